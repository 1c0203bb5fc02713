"""A benchmark run: speculative vs autoregressive vs HF assisted generation, one *cell* per
(method, K, prompt, repeat), each written atomically as it finishes so a killed run resumes."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..costs import drafted_parents, drafted_tokens
from ..decoding import AutoregressiveDecoder, SpeculativeDecoder
from ..drafters.dynamic import DynamicK
from ..lm import synchronize
from ..models import ModelPair, load_pair
from ..results import atomic_write_json, load_prompts, provenance, read_json
from ..sampling import Warp
from ..trees import is_chain
from .analysis import cell_key, summarize
from .passes import PassTimer, costs_among_cells, measure_pass_costs
from .settings import BenchSettings, settings_record, tree_tuner

__all__ = ["CellRunner", "hf_generate", "run_benchmark", "start_up", "timing_context"]

FORMAT_VERSION = 1


_HF_ASSISTANT_FIELDS = (
    "num_assistant_tokens",
    "num_assistant_tokens_schedule",
    "assistant_confidence_threshold",
)


def _cell_seed(seed: int, prompt: int, repeat: int) -> int:
    return int(seed) * 1_000_003 + 1_000 * repeat + prompt


def _configs(settings: BenchSettings) -> list[tuple[str, int]]:
    configs: list[tuple[str, int]] = [("autoregressive", 0)]
    if "hf_autoregressive" in settings.methods:
        configs.append(("hf_autoregressive", 0))
    for K in settings.K:
        if "speculative" in settings.methods:
            configs.append(("speculative", K))
        if "hf_assisted" in settings.methods:
            configs.append(("hf_assisted", K))
    return configs


def _scheduled(draft: Any, settings: BenchSettings, K: int) -> Any:
    """The draft, wrapped in the settings' dynamic draft length, if any."""
    if settings.schedule == "fixed":
        return draft
    if settings.schedule == "heuristic":
        return DynamicK(draft, schedule="heuristic", initial=K)
    return DynamicK.stopped(draft, K, settings.threshold)


class CellRunner:
    """Runs and times one cell of any method: ``run(method, K, ids, seed)`` -> the stored cell."""

    def __init__(
        self,
        pair: ModelPair,
        settings: BenchSettings,
        trees: Mapping[int, Any] | None = None,
    ) -> None:
        """``trees``: the step's shape at each ``K`` (default: ``settings.tree`` at every one)."""
        self.pair = pair
        self.s = settings
        # None: every cell generates max_new_tokens
        self.eos = pair.target.config.eos_token_id if settings.stop_at_eos else None
        w = settings.warp
        warps = dict(temperature=w.temperature, top_k=w.top_k, top_p=w.top_p)
        self.ar = AutoregressiveDecoder(pair.target, **warps)
        self.spec = {
            K: SpeculativeDecoder(
                _scheduled(pair.draft, settings, K),
                pair.target,
                K=K if settings.schedule != "heuristic" else max(16, K),
                tree=tuple(trees[K] if trees is not None else settings.tree),
                draft_temperature_scale=settings.draft_temperature_scale,
                **warps,
            )
            for K in settings.K
        }

    def run(self, method: str, K: int, ids: torch.Tensor, seed: int) -> dict[str, Any]:
        n = self.s.max_new_tokens
        if method == "autoregressive":
            r = self.ar.generate_ids(ids, n, self.eos, seed=seed)
        elif method == "speculative":
            r = self.spec[K].generate_ids(ids, n, self.eos, seed=seed)
        else:  # hf_assisted or hf_autoregressive
            return hf_generate(
                self.pair,
                ids,
                n,
                self.s.warp,
                K=K if method == "hf_assisted" else None,
                seed=seed,
                eos=self.eos,
                schedule=self.s.schedule,
                threshold=self.s.threshold,
                lookup=self.s.draft == "ngram",
            )
        fields = ("tokens", "elapsed_s", "n_steps", "n_proposed", "n_accepted")
        cell: dict[str, Any] = {name: getattr(r, name) for name in fields}
        if r.steps:  # the first target pass reads the prompt
            cell["prefill_ms"] = r.steps[0].target_ms
        if method == "speculative":
            # (drafted, accepted, emitted tokens) per step
            cell["steps"] = [[len(st.draft_tokens), st.n_accepted, st.emitted] for st in r.steps]
            # which alternative, counted within its depth, was kept (0: none)
            cell["alt_index"] = [st.alt_index for st in r.steps]
            for part in ("draft_ms", "target_ms", "host_ms"):
                cell[part] = sum(getattr(st, part) for st in r.steps)
        return cell


def hf_generate(
    pair: ModelPair,
    ids: torch.Tensor,
    n: int,
    warp: Warp,
    *,
    K: int | None = None,
    seed: int = 0,
    eos: Any = None,
    schedule: str = "fixed",
    threshold: float = 0.0,
    lookup: bool = False,
) -> dict[str, Any]:
    """Timed transformers ``generate`` on the target: plain (``K=None``), or assisted with ``K``
    draft tokens (prompt lookup with ``lookup``). Returns the new ``tokens`` and ``elapsed_s``."""
    kwargs: dict[str, Any] = {
        "max_new_tokens": n,
        "eos_token_id": eos,  # None: fixed length
        "pad_token_id": pair.tokenizer.pad_token_id if pair.tokenizer is not None else 0,
    }
    if warp.greedy:
        kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    else:
        # top_k=0 disables generate's default top_k=50.
        kwargs.update(
            do_sample=True,
            temperature=warp.temperature,
            top_k=warp.top_k or 0,
            top_p=warp.top_p or 1.0,
        )
    saved = None
    if K is not None and lookup:
        kwargs["prompt_lookup_num_tokens"] = K  # HF's own n-gram drafter
    elif K is not None:
        # transformers reads these from the assistant's generation_config: set, then restore.
        gc = pair.assistant.generation_config
        saved = {name: getattr(gc, name, None) for name in _HF_ASSISTANT_FIELDS}
        gc.num_assistant_tokens = K
        gc.num_assistant_tokens_schedule = (
            "heuristic_transient" if schedule == "heuristic" else "constant"
        )
        gc.assistant_confidence_threshold = threshold if schedule == "threshold" else 0.0
        kwargs["assistant_model"] = pair.assistant
    try:
        torch.manual_seed(seed)
        synchronize(pair.device)
        t0 = time.perf_counter()
        out = pair.target.generate(
            ids.view(1, -1), attention_mask=torch.ones_like(ids.view(1, -1)), **kwargs
        )
        synchronize(pair.device)
        elapsed = time.perf_counter() - t0
    finally:
        if saved is not None:
            for name, value in saved.items():
                setattr(pair.assistant.generation_config, name, value)
    return {"tokens": out[0, ids.numel() :].tolist(), "elapsed_s": elapsed}


def run_benchmark(
    settings: BenchSettings,
    out: str | Path,
    *,
    resume: bool = True,
    progress: bool = True,
    pair: ModelPair | None = None,
) -> dict[str, Any]:
    """Run (or, with ``resume``, continue) a benchmark into ``out`` and return the result dict:
    ``"status": "partial"`` after each cell, ``"complete"`` with the ``runs`` summary at the end.
    ``pair``: the models, if loaded. Raises ``ValueError`` if ``out`` has other settings.
    """
    settings.validate()
    prompts = load_prompts(settings.prompts)
    out = Path(out)
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
    result = _previous(out, settings) if resume else None
    if result is not None and result["status"] == "complete":
        return result
    if pair is None:
        pair = load_pair(
            settings.pair,
            draft=settings.draft,
            dtype=settings.dtype,
            device=settings.device,
            head=settings.head,
            pack=settings.pack,
        )
    if pair.tokenizer is None:
        raise ValueError(f"pair {settings.pair!r} has no tokenizer; the benchmark needs one")
    if result is None:
        result = _new_result(settings, pair, prompts)
    result["sessions"].append(
        provenance(device=pair.device, seed=settings.seed, settings=settings_record(settings))
    )
    result["provenance"] = result["sessions"][0]
    encoded = [
        pair.tokenizer(p["text"], return_tensors="pt").input_ids[0].to(pair.device) for p in prompts
    ]
    context = timing_context(settings, [ids.numel() for ids in encoded])
    trees = start_up(pair, settings, result, out, context)
    _warm_up(pair, settings, encoded[0], trees)
    _run_cells(pair, settings, result, out, encoded, context, trees, progress)
    result["runs"] = summarize(result)
    result["status"] = "complete"
    atomic_write_json(out, result)
    return result


def _largest_pass(settings: BenchSettings) -> int:
    """The most tokens any target pass of the run checks."""
    if settings.tune_tree:
        return tree_tuner().pass_tokens(max(settings.K))
    return max(drafted_tokens(K, settings.tree) for K in settings.K) + 1


def start_up(
    pair: ModelPair, settings: BenchSettings, result: dict[str, Any], out: Path, context: int
) -> dict[int, tuple[int, ...]]:
    """Time the pass costs (``costs``) and, if tuned, choose the trees (``tuned_trees``), each
    stored at once; returns the tree at each ``K``."""
    if result["costs"] is None:
        result["costs"] = measure_pass_costs(
            pair,
            _largest_pass(settings),
            k_max=max(settings.K),
            context=context,
            reps=settings.cost_reps,
            # a tuned run's trees are not chosen yet: time chains
            shapes=None if settings.tune_tree else pass_shapes(_trees(settings, result)),
            warp=settings.warp,
            trees=None if settings.tune_tree else _trees(settings, result),
        )
        atomic_write_json(out, result)
    if settings.tune_tree and result.get("tuned_trees") is None:
        result["tuned_trees"] = tree_tuner().tune(pair, settings, result["costs"])
        atomic_write_json(out, result)
    return _trees(settings, result)


def _run_cells(
    pair: ModelPair,
    settings: BenchSettings,
    result: dict[str, Any],
    out: Path,
    encoded: Sequence[torch.Tensor],
    context: int,
    trees: Mapping[int, tuple[int, ...]],
    progress: bool,
) -> None:
    """Run every cell not yet in ``result``, storing each, with pass-cost rounds spread among
    them (``cost_rounds``, summarized as ``costs_during``)."""
    from tqdm.auto import tqdm

    runner = CellRunner(pair, settings, trees)
    todo = _cells_to_run(settings, len(encoded), result["cells"])
    rounds_before = _rounds_before(settings, len(encoded))
    timer = None
    if settings.cost_timing == "spread":
        timer = PassTimer(
            pair,
            _largest_pass(settings),
            k_max=max(settings.K),
            context=context,
            shapes=pass_shapes(trees),
            warp=settings.warp,
            trees=trees,
        )
        result.setdefault("cost_rounds", [])
    bar = tqdm(todo, desc=f"bench {settings.pair} {settings.warp.describe()}", disable=not progress)
    for key, method, K, p, rep in bar:
        if timer is not None and key in rounds_before:
            result["cost_rounds"].append(timer.round(len(result["cost_rounds"])))
        cell = runner.run(method, K, encoded[p], _cell_seed(settings.seed, p, rep))
        result["cells"][key] = cell
        atomic_write_json(out, result)
    if result.get("cost_rounds"):
        result["costs_during"] = costs_among_cells(
            result["cost_rounds"],
            context,
            timer.describe() if timer is not None else None,
        )


def _trees(settings: BenchSettings, result: dict[str, Any]) -> dict[int, tuple[int, ...]]:
    """The tree at each ``K``: the tuned one, or the settings' tree."""
    tuned = (result.get("tuned_trees") or {}).get("by_K", {})
    return {K: tuple(tuned[str(K)]["tree"] if tuned else settings.tree) for K in settings.K}


def timing_context(settings: BenchSettings, prompt_lengths: Sequence[int]) -> int:
    """The context (tokens) at which pass costs are timed: ``settings.cost_context``, else the
    mean decoding context (mean prompt length + half the new tokens)."""
    if settings.cost_context is not None:
        return settings.cost_context
    if not prompt_lengths:
        raise ValueError("prompt_lengths: no prompts to take the mean context of")
    mean = sum(prompt_lengths) / len(prompt_lengths) + settings.max_new_tokens / 2
    return max(1, round(mean))


def pass_shapes(trees: Mapping[int, Sequence[int]]) -> dict[int, list[int]]:
    """Drafted parents of each non-chain tree in ``trees`` (by ``K``), keyed by pass size (drafts
    + 1; the first tree wins), for :class:`~specdec_lib.bench.passes.PassTimer`."""
    shapes: dict[int, list[int]] = {}
    for K, tree in sorted(trees.items()):
        parents = drafted_parents(K, tree)
        if not is_chain(parents):
            shapes.setdefault(len(parents) + 1, parents)
    return shapes


def _previous(out: Path, settings: BenchSettings) -> dict[str, Any] | None:
    """The run stored at ``out``, if any; raises ``ValueError`` if made with other settings."""
    if not out.exists():
        return None
    try:
        prev = read_json(out)
    except ValueError:
        return None  # unreadable: start over
    if prev.get("status") not in ("partial", "complete"):
        return None
    if prev.get("settings") != settings_record(settings):
        raise ValueError(
            f"{out} holds a run with other settings; choose another --out or pass --restart"
        )
    return prev


def _new_result(
    settings: BenchSettings, pair: ModelPair, prompts: list[dict[str, Any]]
) -> dict[str, Any]:
    """A run's record before its first cell."""
    return {
        "format": FORMAT_VERSION,
        "status": "partial",
        "settings": settings_record(settings),
        "pair": pair.describe(),
        # every method: eager PyTorch, no CUDA graphs, no torch.compile
        "execution": "eager",
        "prompts": prompts,
        "sessions": [],
        "costs": None,
        # how --dtype auto resolved
        "dtype_choice": settings.choice.record() if settings.choice is not None else None,
        "cells": {},
    }


def _warm_up(
    pair: ModelPair,
    settings: BenchSettings,
    ids: torch.Tensor,
    trees: Mapping[int, Any],
) -> None:
    """Unrecorded short generations of a spread of the methods and the baseline."""
    configs = _configs(settings)
    s_short = dataclasses.replace(settings, max_new_tokens=4)
    for method, K in configs[:: max(1, len(configs) // 4)] + [("autoregressive", 0)]:
        CellRunner(pair, s_short, trees).run(method, K or settings.K[0], ids, seed=0)


def _rounds_before(settings: BenchSettings, n_prompts: int) -> set[str]:
    """The ``cost_reps`` cell keys, spread evenly from the first, before which a cost round runs."""
    keys = [todo[0] for todo in _cells_to_run(settings, n_prompts, {})]
    n = min(settings.cost_reps, len(keys))
    return {keys[i * len(keys) // n] for i in range(n)}


def _cells_to_run(
    settings: BenchSettings, n_prompts: int, done: Mapping[str, Any]
) -> list[tuple[str, str, int, int, int]]:
    """``(key, method, K, prompt, repeat)`` of every cell not in ``done``, the method order rotated
    per prompt and repeat so that machine drift spreads over all methods."""
    configs = _configs(settings)
    todo = []
    for rep in range(settings.repeats):
        for p in range(n_prompts):
            shift = (p + rep * 7) % len(configs)
            for method, K in configs[shift:] + configs[:shift]:
                key = cell_key(method, K, p, rep)
                if key not in done:
                    todo.append((key, method, K, p, rep))
    return todo
