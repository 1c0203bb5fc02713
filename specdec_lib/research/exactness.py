"""Every shipped configuration against the target's exact law on the real model (notebook 02).

Each output position's token is chi-square tested against the law in the same dtype and warp
(:func:`shipped_grid`); the arms of :data:`FAULTS` must fail."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from ..bench.run import hf_generate
from ..checks import one_of, positive_int
from ..config import REPO_ROOT
from ..decoding import SpeculativeDecoder
from ..drafters import DynamicK
from ..models import load_pair
from ..results import provenance
from ..sampling import Warp
from ..settings import setting
from ..testing import StaleCacheState, prototype_verify, wrong_bonus_row_verify
from . import speed  # noqa: F401  the packing library of the grid's library configurations
from .stats import (
    NothingToTest,
    chisquare_law,
    exact_continuation_law,
    holm,
    position_law,
)

__all__ = [
    "CONFIGS",
    "FAULTS",
    "PROBE_PROMPTS",
    "Config",
    "ExactnessSettings",
    "as_frame",
    "shipped_grid",
    "stale_cache_law",
    "stale_cache_probe",
]


def decoder_continuations(
    decoder: Any, prompt_ids: Any, length: int, n: int, *, first: int | None = None, seed: int = 0
) -> dict[str, Any]:
    """``n`` outputs of ``length`` tokens from ``decoder`` (seeded ``seed, seed + 1, ...``) as a
    ``Counter`` of tuples, with what the draft did: ``counts``, ``kept``, ``proposed``,
    ``accepted``, ``steps``, ``bonus_steps`` (steps whose every draft was accepted). With ``first``,
    only outputs starting with ``first`` are kept, counted without it: a feature-level drafter
    drafts nothing before the target's first pass, so conditioning on a near-certain first token
    tests the drafted tokens."""
    positive_int(length, "length", "tokens per output")
    positive_int(n, "n", "outputs drawn")
    counts: Counter = Counter()
    proposed = accepted = steps = bonus = 0
    for i in range(n):
        r = decoder.generate_ids(prompt_ids, length, seed=seed + i)
        proposed += r.n_proposed
        accepted += r.n_accepted
        steps += r.n_steps
        bonus += sum(1 for st in r.steps if st.draft_tokens and st.bonus)
        toks = tuple(r.tokens)
        if first is None:
            counts[toks] += 1
        elif toks[0] == first:
            counts[toks[1:]] += 1
    return {
        "counts": counts,
        "kept": sum(counts.values()),
        "proposed": proposed,
        "accepted": accepted,
        "steps": steps,
        "bonus_steps": bonus,
    }


@dataclass(frozen=True)
class Config:
    """One shipped configuration: the default pair's ``draft`` (``head``: other saved weights),
    dtype, ``pack`` as ``load_pair`` takes it (the exact law is then the packed target's), the
    step's shape (``width``: ``tree=(width,)``), ``threshold``
    (:class:`~specdec_lib.drafters.DynamicK` stopping; ``None``: ``K`` drafts every step), warp, and
    ``method``: ``"speculative"`` or ``"hf_assisted"`` (transformers' assisted generation with the
    pair's model draft)."""

    draft: str
    dtype: str
    width: int = 1
    tree: tuple[int, ...] | None = None
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    head: str | None = None
    method: str = "speculative"
    pack: bool | str = False
    threshold: float | None = None

    @property
    def warp(self) -> Warp:
        return Warp(self.temperature, self.top_k, self.top_p)

    @property
    def shape(self) -> tuple[int, ...]:
        """The step's shape: the tree, or ``(width,)``."""
        return tuple(self.tree) if self.tree is not None else (self.width,)


CONFIGS: dict[str, Config] = {
    "early-exit-f32": Config("early-exit", "float32"),
    "trained-f32": Config("trained", "float32"),
    "trained-f32-w2": Config("trained", "float32", width=2),
    "trained-bf16": Config("trained", "bfloat16"),
    "trained-bf16-topk20": Config("trained", "bfloat16", top_k=20),
    "trained-bf16-w2": Config("trained", "bfloat16", width=2),
    "trained-int8-bf16": Config("trained-int8", "bfloat16"),
    "trained-int8-bf16-w2": Config("trained-int8", "bfloat16", width=2),
    "trained-int8-bf16-w2-topp0.9": Config("trained-int8", "bfloat16", width=2, top_p=0.9),
    "ngram-bf16": Config("ngram", "bfloat16"),
    "trained-int8-bf16-tree4-3": Config("trained-int8", "bfloat16", tree=(4, 3)),
    "trained-int8-bf16-tree4-3-packed": Config("trained-int8", "bfloat16", tree=(4, 3), pack=True),
    "trained-f32-tree4-3-packed": Config("trained", "float32", tree=(4, 3), pack=True),
    "trained-bf16-f32-tree4-3-packed": Config("trained-bf16", "float32", tree=(4, 3), pack=True),
    "trained-int8-bf16-tree4-3-library": Config(
        "trained-int8", "bfloat16", tree=(4, 3), pack="library"
    ),
    "trained-bf16-tree4-3-library": Config("trained-bf16", "bfloat16", tree=(4, 3), pack="library"),
    "trained-bf16-tree4-3-library-stopped": Config(
        "trained-bf16", "bfloat16", tree=(4, 3), pack="library", threshold=0.4
    ),
    "hf-assisted-early-exit-f32": Config("early-exit", "float32", method="hf_assisted"),
}
# Arms that must fail, at width 1 (the prototype's rule plugs into verify, which width 1 uses).
FAULTS = {
    "prototype's correction": "trained-int8-bf16",
    "uncropped target cache": "trained-int8-bf16",
    "bonus from the wrong row": "trained-int8-bf16",
}


@dataclass
class ExactnessSettings:
    """What defines a stored grid (``python -m specdec_lib exactness``; flags generated)."""

    configs: list[str] = setting(list(CONFIGS), "configurations to test", choices=CONFIGS)
    n: int = setting(400, "decoder outputs per configuration")
    n_fault: int = setting(800, "decoder outputs per arm that must fail")
    faults: bool = setting(True, "run the arms that must fail")
    probe: bool = setting(
        True, "run the uncropped cache's probe at the N its exact bias needs (power 0.9)"
    )
    seed: int = setting(0, "seed of every arm's sampling")

    def __post_init__(self) -> None:
        if not self.configs:
            raise ValueError("configs: name at least one configuration")
        for c in self.configs:
            one_of(c, "configs", CONFIGS)
        positive_int(self.n, "n")
        positive_int(self.n_fault, "n_fault")

    def run(self, *, progress: bool = True) -> dict[str, Any]:
        result = shipped_grid(
            {k: CONFIGS[k] for k in self.configs},
            n=self.n,
            n_fault=self.n_fault,
            faults=FAULTS if self.faults else {},
            seed=self.seed,
            progress=progress,
        )
        if self.probe:
            result["stale_cache_probe"] = stale_cache_probe(seed=self.seed)
        return result


class HFAssisted:
    """transformers' assisted generation with the pair's model draft proposing ``K`` tokens, behind
    ``generate_ids``; it reports no acceptance (``proposed`` 0)."""

    def __init__(self, pair: Any, K: int, warp: Warp) -> None:
        if pair.assistant is None:
            raise ValueError("hf_assisted needs a pair with a model draft (its assistant)")
        self.pair, self.K, self.warp = pair, K, warp

    def generate_ids(self, prompt_ids: torch.Tensor, length: int, seed: int = 0) -> Any:
        out = hf_generate(self.pair, prompt_ids, length, self.warp, K=self.K, seed=seed)
        return SimpleNamespace(
            tokens=out["tokens"], n_proposed=0, n_accepted=0, n_steps=0, steps=[]
        )


def _load_default(c: Config) -> Any:
    head = None if c.head is None else REPO_ROOT / c.head
    return load_pair("default", draft=c.draft, dtype=c.dtype, head=head, pack=c.pack)


def shipped_grid(
    configs: dict[str, Config] | None = None,
    *,
    n: int = 1000,
    faults: dict[str, str] | None = None,
    n_fault: int | None = None,
    prompt: str = "To be or not to",
    first: str | None = " be",
    K: int = 2,
    length: int = 4,
    seed: int = 0,
    max_bins: int = 50,
    min_prob: float = 1e-4,
    progress: bool = False,
    load: Callable[[Config], Any] = _load_default,
) -> dict[str, Any]:
    """Run every configuration and failing arm and test each against the target's exact law
    (continuations below ``min_prob`` pooled). ``n`` outputs per configuration (``n_fault`` per
    failing arm); ``first=None`` tests all ``length`` tokens; ``load`` gives a configuration's pair.
    Returns ``rows`` (per arm: each position's p-value, their Bonferroni ``p``, ``p_holm`` within
    the configurations, outputs kept, acceptance, counts), ``settings`` and ``provenance``."""
    from tqdm.auto import tqdm

    configs = dict(CONFIGS if configs is None else configs)
    faults = dict(FAULTS if faults is None else faults)
    positive_int(n, "n", "decoder outputs per configuration")
    n_fault = positive_int(n if n_fault is None else n_fault, "n_fault")
    _check_faults(faults, configs)
    grid = _Grid(prompt, first, K, length, n, n_fault, seed, max_bins, min_prob)
    pair_of = _pair_cache(load)
    any_pair = pair_of(next(iter(configs.values())))
    ref = _Reference.of(any_pair.tokenizer, prompt, first, length)
    laws: dict[tuple[str, bool, Warp], dict[tuple[int, ...], float]] = {}
    rows = []
    arms = _arms(configs, faults)
    for i, (name, c, fault) in enumerate(tqdm(arms, desc="exactness grid", disable=not progress)):
        pair = pair_of(c)
        key = (c.dtype, c.pack, Warp(c.temperature, c.top_k, c.top_p))
        if key not in laws:
            laws[key] = exact_continuation_law(
                pair.target, ref.ids, c.warp, ref.length, min_prob=min_prob
            )
        rows.append(_run_arm(i, name, c, fault, pair, laws[key], ref, grid))
    family = [r for r in rows if not r["must_fail"]]
    for r, p in zip(family, holm([r["p"] for r in family]), strict=True):
        r["p_holm"] = float(p)
    return {
        "rows": rows,
        "settings": grid.record(ref.first_id),
        "provenance": provenance(seed=seed, settings={"configs": list(configs), "faults": faults}),
        "reference_first_token_probability": None
        if ref.first_id is None
        else _first_probability(any_pair, ref.prompt_ids, ref.first_id),
    }


def _check_faults(faults: dict[str, str], configs: dict[str, Config]) -> None:
    """Refuse an unknown failing arm, or one on an unknown configuration."""
    for name, base in faults.items():
        one_of(name, "faults", FAULTS)
        if base not in configs and base not in CONFIGS:
            raise ValueError(f"faults: {name!r} runs on an unknown configuration {base!r}")


def _pair_cache(load: Callable[[Config], Any]) -> Callable[[Config], Any]:
    """``load``, loading each pair once: the arms that differ only in how they decode share it."""
    pairs: dict[tuple[str, str, str | None, bool | str], Any] = {}

    def pair_of(c: Config) -> Any:
        key = (c.draft, c.dtype, c.head, c.pack)
        if key not in pairs:
            pairs[key] = load(c)
        return pairs[key]

    return pair_of


@dataclass(frozen=True)
class _Grid:
    """The settings every arm of a grid runs with (the record keeps them)."""

    prompt: str
    first: str | None
    K: int
    length: int
    n: int
    n_fault: int
    seed: int
    max_bins: int
    min_prob: float

    def record(self, first_id: int | None) -> dict[str, Any]:
        """The settings as the grid's record writes them, with the first token's id."""
        d = dataclasses.asdict(self)
        return {"prompt": d.pop("prompt"), "first": d.pop("first"), "first_id": first_id, **d}


@dataclass(frozen=True)
class _Reference:
    """The prompt, the first token conditioned on (or None), and the law's context and length."""

    prompt_ids: torch.Tensor
    first_id: int | None
    ids: torch.Tensor
    length: int

    @classmethod
    def of(cls, tok: Any, prompt: str, first: str | None, length: int) -> _Reference:
        """The reference of ``length`` tokens after ``prompt`` (then ``first``), by ``tok``."""
        prompt_ids = tok(prompt, return_tensors="pt").input_ids[0]
        if first is None:
            return cls(prompt_ids, None, prompt_ids, length)
        first_id = int(tok(prompt + first, return_tensors="pt").input_ids[0][len(prompt_ids)])
        ids = torch.cat([prompt_ids, torch.tensor([first_id])])
        return cls(prompt_ids, first_id, ids, length - 1)


def _arms(
    configs: dict[str, Config], faults: dict[str, str]
) -> list[tuple[str, Config, str | None]]:
    """Every arm as ``(name, config, fault or None)``: the configurations, then the failing arms."""
    arms = [(name, c, None) for name, c in configs.items()]
    arms += [
        (name, configs[base] if base in configs else CONFIGS[base], name)
        for name, base in faults.items()
    ]
    return arms


def _decoder(pair: Any, c: Config, fault: str | None, K: int) -> Any:
    """The arm's decoder: the configuration's, with the failing arm's fault plugged in."""
    kw: dict[str, Any] = dict(
        K=K, tree=c.shape, temperature=c.temperature, top_k=c.top_k, top_p=c.top_p
    )
    if fault == "prototype's correction":
        kw["verifier"] = prototype_verify
    elif fault == "uncropped target cache":
        kw["target_state"] = StaleCacheState
    elif fault == "bonus from the wrong row":
        kw["verifier"] = wrong_bonus_row_verify
    elif fault is not None:  # pragma: no cover - the names are checked above
        raise AssertionError(fault)
    if c.method == "hf_assisted":
        return HFAssisted(pair, K, c.warp)
    draft = pair.draft if c.threshold is None else DynamicK.stopped(pair.draft, K, c.threshold)
    return SpeculativeDecoder(draft, pair.target, **kw)


def _run_arm(
    i: int,
    name: str,
    c: Config,
    fault: str | None,
    pair: Any,
    law: dict[tuple[int, ...], float],
    ref: _Reference,
    grid: _Grid,
) -> dict[str, Any]:
    """Decode the ``i``-th arm's outputs and test each position against the law: its row."""
    dec = _decoder(pair, c, fault, grid.K)
    n = grid.n_fault if fault else grid.n
    t0 = time.perf_counter()
    out = decoder_continuations(
        dec, ref.prompt_ids, grid.length, n, first=ref.first_id, seed=grid.seed + 10**6 * i
    )
    seconds = time.perf_counter() - t0
    tests = _position_tests(name, out, law, ref.length, grid.max_bins)
    made = [t for t in tests if t is not None]
    return {
        "name": name,
        "must_fail": fault is not None,
        **dataclasses.asdict(c),
        "n": n,
        "kept": out["kept"],
        "alpha": out["accepted"] / out["proposed"] if out["proposed"] else float("nan"),
        "proposed": out["proposed"],
        "bonus_steps": out["bonus_steps"],
        "steps": out["steps"],
        "p_by_position": [None if t is None else t.pvalue for t in tests],
        "bins_by_position": [0 if t is None else t.n_bins for t in tests],
        "bins": min(t.n_bins for t in made),
        "law_listed": len(law),
        "law_listed_mass": sum(law.values()),
        "p": min(1.0, len(made) * min(t.pvalue for t in made)),
        "counts": [[list(k), c] for k, c in sorted(out["counts"].items())],
        "seconds": seconds,
    }


def _position_tests(
    name: str, out: dict[str, Any], law: dict[tuple[int, ...], float], length: int, max_bins: int
) -> list[Any]:
    """Each position's chi-square test (None under two bins), for a Bonferroni combination valid
    whatever their dependence; raises ``NothingToTest`` when no position can be tested."""
    tests = []
    for j in range(length):
        try:
            tests.append(chisquare_law(*position_law(out["counts"], law, j), max_bins=max_bins))
        except NothingToTest:
            tests.append(None)
    if not any(t is not None for t in tests):
        raise NothingToTest(f"{name}: no position has two bins at N = {out['kept']}")
    return tests


@torch.inference_mode()
def _first_probability(pair: Any, prompt_ids: torch.Tensor, first_id: int) -> float:
    logits = pair.target(input_ids=prompt_ids.view(1, -1)).logits[0, -1].float()
    return float(torch.softmax(logits, -1)[first_id])


def as_frame(result: dict[str, Any]):
    """The grid as a pandas DataFrame, one row per configuration or failing arm."""
    import pandas as pd

    df = pd.DataFrame(result["rows"])
    df["kept_fraction"] = df["kept"] / df["n"]
    return df


# Prompts that repeat themselves, so that prompt lookup drafts from the first step.
PROBE_PROMPTS = (
    "one two three four five, one two three four five, one two",
    "red, green, blue, red, green, blue, red, green,",
    "Monday Tuesday Wednesday. Monday Tuesday Wednesday. Monday",
    "I like tea. You like tea. We like",
    "the cat and the dog and the cat and the",
)


@torch.inference_mode()
def stale_cache_law(
    target: Any, ids: torch.Tensor, warp: Warp, x1: int
) -> tuple[dict[tuple[int, int], float], dict[tuple[int, int], float]]:
    """The exact laws of the first two tokens after ``ids`` from a decoder with one draft per
    step, the draft ``x1`` one-hot (prompt lookup): ``(right, uncropped)``. When ``x1`` is
    rejected (probability ``1 - p(x1)``) the first token ``y`` follows the residual, ``p`` without
    ``x1``; a target cache left uncropped then still holds ``x1``, so the second token follows
    ``p(. | ids, x1, y)`` instead of ``p(. | ids, y)``. Laws by uncached passes in the target's
    dtype; ``x1`` accepted, both decoders emit ``x1`` and a bonus from ``p(. | ids, x1)``."""

    def law_after(seq: list[int]) -> torch.Tensor:
        logits = target(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
        return warp.probs(logits.float()).double()

    base = ids.view(-1).tolist()
    p1 = law_after(base)
    right: dict[tuple[int, int], float] = {}
    wrong: dict[tuple[int, int], float] = {}
    for y in torch.nonzero(p1).view(-1).tolist():
        after = {"right": law_after(base + [y])}
        after["wrong"] = after["right"] if y == x1 else law_after(base + [x1, y])
        for name, law in (("right", right), ("wrong", wrong)):
            for z in torch.nonzero(after[name]).view(-1).tolist():
                law[(y, z)] = float(p1[y] * after[name][z])
    return right, wrong


def stale_cache_probe(
    *,
    prompts: tuple[str, ...] = PROBE_PROMPTS,
    top_k: int = 5,
    power_at: float = 0.9,
    level: float = 1e-3,
    n_max: int = 6400,
    seed: int = 0,
    load: Callable[[Config], Any] = _load_default,
) -> dict[str, Any]:
    """The uncropped cache against the target's exact law where its exact bias is largest: the
    prompt of ``prompts`` whose uncropped law (:func:`stale_cache_law`) is farthest from the
    right one, at the smallest ``N`` (of a doubling grid up to ``n_max``) whose chi-square test
    has power ``power_at`` at ``level`` against that bias; then ``N`` outputs of the faulty
    decoder (prompt lookup, ``K = 1``, T = 1 with top-k) and of the right one, each tested."""
    from ..drafters import NgramDrafter
    from ..testing import StaleCacheState
    from .power import power_gof_ncx2
    from .stats import tv

    c = Config("ngram", "bfloat16", top_k=top_k)
    pair = load(c)
    candidates = []
    for text in prompts:
        ids = pair.tokenizer(text, return_tensors="pt").input_ids[0]
        drafts, _ = NgramDrafter(pair.target.config.vocab_size).propose(ids, 1, c.warp, None)
        if drafts.numel():
            right, wrong = stale_cache_law(pair.target, ids, c.warp, int(drafts[0]))
            keys = sorted(set(right) | set(wrong))
            pr, pw = (np.array([law.get(k, 0.0) for k in keys]) for law in (right, wrong))
            candidates.append((tv(pr, pw), text, ids, keys, pr, pw, int(drafts[0])))
    bias, text, ids, keys, pr, pw, x1 = max(candidates, key=lambda t: t[0])
    n = 200
    while n < n_max and power_gof_ncx2(pr, pw, n, level=level) < power_at:
        n *= 2
    law = dict(zip(keys, pr.tolist(), strict=True))
    rows = {}
    for arm, state in (("uncropped target cache", StaleCacheState), ("right", None)):
        kw = {} if state is None else {"target_state": state}
        dec = SpeculativeDecoder(
            NgramDrafter(pair.target.config.vocab_size), pair.target, K=1, temperature=1.0,
            top_k=top_k, seed=seed, **kw,
        )  # fmt: skip
        counts = Counter(tuple(dec.generate_ids(ids, 2).tokens) for _ in range(n))
        rows[arm] = {"p": chisquare_law(counts, law).pvalue, "counts": sorted(counts.items())}
    return {
        "prompt": text, "draft": x1, "top_k": top_k, "tv": float(bias), "n": n,
        "power": power_gof_ncx2(pr, pw, n, level=level), "level": level, "rows": rows,
        "provenance": provenance(seed=seed, settings={"prompts": list(prompts), "top_k": top_k}),
    }  # fmt: skip
