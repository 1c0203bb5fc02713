"""A draft's acceptance measured by decoding, and its evaluation (``eval-drafter``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..bench.analysis import position_counts, rates, stopped_rates, tree_rates
from ..bench.passes import measure_pass_costs
from ..bench.settings import DTYPES
from ..checks import one_of, positive_int, probability
from ..costs import drafted_widths
from ..decoding import SpeculativeDecoder
from ..drafters import DynamicK
from ..models import DRAFTS, PAIRS, ModelPair, check_head, load_pair
from ..results import load_prompts, provenance
from ..sampling import Warp
from ..settings import setting
from ..trees import tree_shape

__all__ = ["EvalSettings", "acceptance", "evaluate_drafter"]


@dataclass
class EvalSettings:
    """What defines a draft's evaluation (``python -m specdec_lib eval-drafter``)."""

    draft: str = setting(
        "trained",
        "a draft of the pair by name, or a path to saved draft weights (a trained head)",
    )
    head: str | None = setting(
        None,
        "saved weights for the trained drafts (trained, trained-int8; default: the committed "
        "data/drafter/feature_head.safetensors)",
    )
    pair: str = setting("default", "model pair", choices=PAIRS)
    prompts: str = setting("data/drafter/heldout_prompts.json", "held-out prompts (JSON)")
    dtype: str = setting("bfloat16", "dtype of both models", choices=DTYPES)
    temperatures: list[float] = setting([1.0, 0.7, 0.0], "temperatures (0 = greedy)")
    K: int = setting(1, "draft tokens per step (1: every proposal is judged)")
    width: int = setting(1, "candidates for the first draft position")
    tree: list[int] | None = setting(
        None,
        "the step's shape, candidates at each draft depth (e.g. 8 8): a wide tree's steps "
        "measure the acceptance of every narrower one (the record's tree_rates, which "
        "bench --tune-tree reads); give --width or --tree, not both",
    )
    threshold: float | None = setting(
        None,
        "stop each step's draft after a draft of confidence below it (bench --schedule "
        "threshold); the record then holds stopped_rates, which bench --tune-tree reads for "
        "such a run",
    )
    max_new_tokens: int = setting(64, "tokens generated per prompt")
    seeds: int = setting(1, "seeds per prompt")
    threads: int | None = setting(None, "torch threads (default: torch's)")

    def __post_init__(self) -> None:
        one_of(self.pair, "pair", PAIRS)
        one_of(self.dtype, "dtype", DTYPES)
        positive_int(self.K, "K", "draft tokens per step")
        positive_int(self.width, "width", "candidates for the first draft position")
        if self.tree is not None:  # the decoder's own resolution: a width beside a tree is refused
            self.tree = list(tree_shape(self.tree, None if self.width == 1 else self.width))
        positive_int(self.max_new_tokens, "max_new_tokens")
        probability(self.threshold, "threshold", one=False, optional=True)
        positive_int(self.seeds, "seeds", "seeds per prompt")
        positive_int(self.threads, "threads", optional=True)
        for T in self.temperatures:
            Warp(T)
        check_head(self.head, self.draft)

    def load_pair(self) -> ModelPair:
        """The pair with the draft named, or with the trained head saved at the path given."""
        if self.draft in PAIRS[self.pair]:
            return load_pair(self.pair, draft=self.draft, dtype=self.dtype, head=self.head)
        if self.draft in DRAFTS:
            one_of(self.draft, "draft", PAIRS[self.pair])  # a draft of another pair: say so
        if not Path(self.draft).is_file():
            raise ValueError(
                f"draft must be one of {', '.join(PAIRS[self.pair])} or a path to saved draft "
                f"weights, got {self.draft!r}"
            )
        return load_pair(self.pair, draft="trained", dtype=self.dtype, head=self.draft)


def acceptance(
    pair: ModelPair,
    prompts: list[dict[str, str]] | str | Path,
    *,
    K: int = 1,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    max_new_tokens: int = 64,
    seeds: Iterable[int] = (0,),
    draft: Any = None,
    progress: bool = False,
    width: int = 1,
    tree: Any = None,
    threshold: float | None = None,
) -> dict[str, Any]:
    """The draft's acceptance by decoding: ``alpha`` = accepted / proposed over all prompts and
    seeds (at ``K = 1``: the theory's per-token rate), by draft position and per prompt. With
    ``width > 1`` or a ``tree`` a position is accepted when any candidate is, and ``tree_rates``
    (with ``widths``) covers every narrower tree; with a ``threshold`` the draft stops below that
    confidence (:class:`~specdec_lib.drafters.DynamicK`) and ``stopped_rates`` does."""
    if not isinstance(prompts, list):
        prompts = load_prompts(prompts)
    draft = pair.draft if draft is None else draft
    if threshold is not None:
        draft = DynamicK.stopped(draft, K, threshold)
    dec = SpeculativeDecoder(
        draft,
        pair.target,
        K=K,
        tree=tree,
        width=None if tree is not None else width,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
    )
    cells, per_prompt = _decode_prompts(dec, pair, prompts, seeds, max_new_tokens, progress)
    widths = drafted_widths(K, dec.tree)
    return {
        **_totals(cells, per_prompt, K),
        **_narrower_rates(cells, K, widths, threshold, max_new_tokens),
        "settings": {
            "K": K,
            "tree": list(dec.tree),
            "temperature": temperature,
            "top_k": top_k,
            "top_p": top_p,
            "max_new_tokens": max_new_tokens,
            "seeds": list(seeds),
            "threshold": threshold,
        },
    }


def _decode_prompts(
    dec: SpeculativeDecoder,
    pair: ModelPair,
    prompts: list[dict[str, str]],
    seeds: Iterable[int],
    max_new_tokens: int,
    progress: bool,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Decode every prompt with every seed: each run's steps and its per-prompt counts."""
    from tqdm.auto import tqdm

    cells, per_prompt = [], []
    jobs = [(i, p, s) for i, p in enumerate(prompts) for s in seeds]
    for i, p, s in tqdm(jobs, desc="acceptance", disable=not progress):
        ids = pair.tokenizer(p["text"], return_tensors="pt").input_ids[0].to(pair.device)
        r = dec.generate_ids(ids, max_new_tokens, seed=s)
        steps = [[len(st.draft_tokens), st.n_accepted, st.emitted] for st in r.steps]
        cells.append({"steps": steps, "alt_index": [st.alt_index for st in r.steps]})
        per_prompt.append(
            {
                "prompt": i,
                "category": p.get("category"),
                "seed": s,
                "proposed": r.n_proposed,
                "accepted": r.n_accepted,
                "tau": r.tau,
            }
        )
    return cells, per_prompt


def _totals(
    cells: list[dict[str, Any]], per_prompt: list[dict[str, Any]], K: int
) -> dict[str, Any]:
    """Acceptance overall and by draft position, mean tokens per step, and per-run counts."""
    proposed = sum(c["proposed"] for c in per_prompt)
    accepted = sum(c["accepted"] for c in per_prompt)
    reached_at, accepted_at = position_counts(cells, K)
    return {
        "alpha": accepted / proposed if proposed else float("nan"),
        "by_position": rates(reached_at, accepted_at),
        "reached_by_position": reached_at.tolist(),
        "accepted_by_position": accepted_at.tolist(),
        "proposed": proposed,
        "accepted": accepted,
        "tau": float(np.mean([c["tau"] for c in per_prompt])),
        "per_prompt": per_prompt,
    }


def _narrower_rates(
    cells: list[dict[str, Any]],
    K: int,
    widths: list[int],
    threshold: float | None,
    max_new_tokens: int,
) -> dict[str, Any]:
    """``stopped_rates`` with a threshold, else ``tree_rates`` if a depth had several candidates."""
    if threshold is not None:
        return {
            "stopped_rates": stopped_rates(cells, K, max(widths), max_new_tokens)
            | {"widths": widths, "threshold": threshold}
        }
    if max(widths) > 1:
        return {"tree_rates": tree_rates(cells, K, max(widths)) | {"widths": widths}}
    return {}


def evaluate_drafter(
    settings: EvalSettings, *, progress: bool = True, pair: ModelPair | None = None
) -> dict[str, Any]:
    """The ``eval-drafter`` record: :func:`acceptance` at each temperature, the pass costs up to
    ``K = 5``, and provenance."""
    if settings.threads:
        torch.set_num_threads(settings.threads)
    prompts = load_prompts(settings.prompts)
    pair = settings.load_pair() if pair is None else pair
    results = {}
    for T in settings.temperatures:
        results[f"{T:g}"] = acceptance(
            pair,
            prompts,
            K=settings.K,
            temperature=T,
            max_new_tokens=settings.max_new_tokens,
            seeds=range(settings.seeds),
            progress=progress,
            width=settings.width,
            tree=settings.tree,
            threshold=settings.threshold,
        )
    return {
        "pair": pair.describe(),
        "by_temperature": results,
        "costs": measure_pass_costs(pair, 6, k_max=5),
        "provenance": provenance(device=pair.device, seed=0, settings=dataclasses.asdict(settings)),
    }
