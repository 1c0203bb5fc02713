"""The benchmark: speculative vs autoregressive vs HF assisted generation, measured side by side.

Used by ``python -m specdec_lib bench`` and notebooks 03-04. One process, one pair, one set of
sampling settings; every (method, K, prompt, repeat) *cell* is measured in an order rotated from
prompt to prompt so that slow drift of the machine spreads over all methods. Each cell is written
to the output file as soon as it finishes (atomically), so a killed run resumes where it stopped
and never leaves a truncated file behind.

The cost model (notebook 03): ``t_target(n)``, the time of one target pass over ``n`` new tokens
with a KV cache, and ``t_draft``, one draft pass over one token, both measured here; the predicted
speedup at acceptance ``alpha`` is ``E[tokens per step] / ((K t_draft + t_target(K+1)) / t_target(1))``.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .candidates import check_widths
from .checks import one_of, positive_int, probability
from .config import DEFAULT_PROMPTS, REPO_ROOT
from .decoding import AutoregressiveDecoder, SpeculativeDecoder, TargetState, as_drafter
from .drafters import DynamicK
from .lm import model_forward, synchronize
from .models import DRAFTS, PAIRS, TRAINED_DRAFTS, ModelPair, default_draft, load_pair
from .results import atomic_write_json, load_prompts, provenance, read_json
from .sampling import Warp
from .settings import setting
from .theory import best_tree, expected_tokens_per_step, tree_tokens_per_step

__all__ = [
    "DEFAULT_METHODS",
    "METHODS",
    "SCHEDULES",
    "BenchSettings",
    "EvalSettings",
    "acceptance",
    "best_trees",
    "monotone_costs",
    "rank_rates",
    "tree_ceiling",
    "tree_rates",
    "evaluate_drafter",
    "fastest_draft",
    "fastest_shape",
    "identical_outputs",
    "measure_pass_costs",
    "native_bfloat16",
    "per_prompt_frame",
    "reuse_freed_memory",
    "run_benchmark",
    "runs_frame",
    "speculative_runs",
    "speedup_interval",
    "summarize",
]

METHODS = (
    "autoregressive",
    "speculative",
    "hf_assisted",
    "hf_autoregressive",
    "autoregressive_inverse_cdf",
)
# The last is the greedy baseline drawing by inverse CDF from a one-hot row instead of taking the
# argmax (notebook 06 measures what the argmax saves): not measured unless asked for.
DEFAULT_METHODS = METHODS[:4]
SCHEDULES = ("fixed", "heuristic", "threshold")
DTYPES = ("float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")
FORMAT_VERSION = 1


@dataclass
class BenchSettings:
    """Everything that defines a benchmark run (stored in the results' provenance; the flags of
    ``python -m specdec_lib bench`` are generated from these fields)."""

    pair: str = setting("default", "model pair", choices=PAIRS)
    draft: str | None = setting(
        None,
        "the pair's draft (default: the fastest measured, fastest_draft: the trained head, with "
        "int8 weights in bfloat16 on a CPU)",
        choices=DRAFTS,
    )
    head: str | None = setting(
        None,
        "saved weights of a trained draft (default: the committed data/drafter/feature_head"
        ".safetensors)",
    )
    device: str = setting(
        "auto", "where both models run (auto: cuda when present)", choices=DEVICES
    )
    dtype: str = setting(
        "auto",
        "dtype of both models (auto: bfloat16 on cuda and on a CPU with native bfloat16 "
        "instructions, float32 otherwise)",
        choices=DTYPES + ("auto",),
    )
    K: list[int] = setting(list(range(1, 9)), "draft lengths (tokens drafted per step)")
    max_new_tokens: int = setting(50, "tokens generated per prompt")
    temperature: float = setting(1.0, "sampling temperature (0 = greedy)")
    top_k: int | None = setting(None, "keep the k most likely tokens")
    top_p: float | None = setting(None, "keep the smallest set with this probability")
    repeats: int = setting(1, "repeats of every (method, K, prompt) cell")
    seed: int = setting(0, "seed of the cells' sampling seeds")
    prompts: str = setting(
        str(DEFAULT_PROMPTS), 'JSON {"prompts": [{"category": ..., "text": ...}, ...]}'
    )
    methods: list[str] = setting(list(DEFAULT_METHODS), "methods measured", choices=METHODS)
    threads: int | None = setting(None, "torch threads (default: torch's)")
    cost_context: int = setting(64, "context length at which the pass costs are timed")
    cost_reps: int = setting(15, "rounds of the pass-cost timing")
    schedule: str = setting(
        "fixed",
        "draft length per step: fixed K; HF's heuristic schedule from K (+2 after a fully "
        "accepted step, -1 otherwise); or up to K, stopping after a draft with q(x) < threshold",
        choices=SCHEDULES,
    )
    threshold: float = setting(0.4, "confidence threshold of --schedule threshold")
    width: int | None = setting(
        None,
        "candidates for the first draft position, checked in one pass (speculative only: "
        "transformers' assisted generation has one; default: the fastest measured, "
        "fastest_shape)",
    )
    tree: list[int] | None = setting(
        None,
        "candidates at each draft depth, e.g. 4 4: a draft tree along the chain, checked in one "
        "pass (speculative only; default: the fastest measured, fastest_shape)",
    )
    stop_at_eos: bool = setting(
        False,
        "end a cell at the target's end-of-sequence token (Spec-Bench's convention) instead of "
        "always generating max_new_tokens",
    )
    reuse_memory: bool = setting(
        True,
        "keep freed memory for reuse (glibc's mallopt, for the whole process: every method "
        "alike), so that vocabulary-wide buffers are not page-faulted in afresh at every step",
    )

    def validate(self) -> BenchSettings:
        if not self.K:
            raise ValueError("K: give at least one draft length")
        self.K = sorted({positive_int(k, "K", "draft tokens per step") for k in self.K})
        positive_int(self.max_new_tokens, "max_new_tokens")
        positive_int(self.repeats, "repeats")
        positive_int(self.threads, "threads", optional=True)
        positive_int(self.cost_context, "cost_context")
        positive_int(self.cost_reps, "cost_reps")
        if not self.methods:
            raise ValueError(f"methods must be a non-empty subset of {METHODS}")
        for m in self.methods:
            one_of(m, "methods", METHODS)
        if "autoregressive" not in self.methods:
            raise ValueError(
                "methods must include 'autoregressive' (the baseline every speedup is relative to)"
            )
        Warp(self.temperature, self.top_k, self.top_p)  # validates the warps
        if "autoregressive_inverse_cdf" in self.methods and self.temperature != 0:
            raise ValueError(
                "methods: 'autoregressive_inverse_cdf' is the greedy baseline without the argmax; "
                f"it needs temperature 0, got {self.temperature}"
            )
        # Stored resolved, so that a run records where and in what it ran.
        self.device = resolve_device(self.device)
        self.dtype = one_of(self.dtype, "dtype", DTYPES + ("auto",))
        if self.dtype == "auto":
            self.dtype = "bfloat16" if native_bfloat16(self.device) else "float32"
        one_of(self.schedule, "schedule", SCHEDULES)
        probability(self.threshold, "threshold", one=False)
        positive_int(self.width, "width", "candidates for the first draft position", optional=True)
        if self.tree is not None:
            self.tree = list(check_widths(self.tree))
            if self.width not in (None, 1):
                raise ValueError(
                    f"give either width (candidates at the first position) or tree (candidates "
                    f"at each depth), got width={self.width} and tree={self.tree}"
                )
        one_of(self.pair, "pair", PAIRS)
        # Store the draft by name, so that a run records the draft it measured.
        if self.draft is None:
            self.draft = fastest_draft(self.pair, self.device, self.dtype)
        one_of(self.draft, "draft", PAIRS[self.pair])
        # Stored resolved too: the chain's width, or a tree and width 1.
        if self.width is None and self.tree is None:
            self.width, self.tree = fastest_shape(self.draft)
        self.width = self.width or 1
        if self.head is not None:
            if self.draft not in TRAINED_DRAFTS:
                raise ValueError(
                    f"head: saved weights are for the trained drafts {TRAINED_DRAFTS}, "
                    f"not draft={self.draft!r}"
                )
            if not Path(self.head).is_file():
                raise ValueError(f"head: no saved draft weights at {self.head!r}")
        return self

    @property
    def warp(self) -> Warp:
        return Warp(self.temperature, self.top_k, self.top_p)


def fastest_draft(pair: str, device: str, dtype: str) -> str:
    """The draft ``bench`` measures when none is named: the fastest exact one measured for the
    pair (notebook 05). For the default pair that is the trained head, with int8 weights where
    they run (bfloat16 on a CPU); for the others, the pair's first draft."""
    if pair == "default":
        return "trained-int8" if (device, dtype) == ("cpu", "bfloat16") else "trained"
    return default_draft(pair)


# The chain tree the cost model ranks first for the trained head, and that measured fastest
# (notebook 06, section 9).
FASTEST_TREE = (4, 3)


def fastest_shape(draft: str) -> tuple[int, list[int] | None]:
    """``(width, tree)`` ``bench`` measures when neither is given: the fastest exact shape
    measured for the draft. For the trained head (notebook 06 §9), the chain tree
    :data:`FASTEST_TREE`; for the other drafts, the chain with two first-position candidates
    (notebook 06 §6)."""
    if draft in TRAINED_DRAFTS:
        return 1, list(FASTEST_TREE)
    return 2, None


def resolve_device(device: str) -> str:
    """``"auto"`` -> ``"cuda"`` when a CUDA device is present, else ``"cpu"``; ``"cuda"`` without
    one is a ``ValueError``."""
    one_of(device, "device", DEVICES)
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no CUDA device (use 'cpu' or 'auto')")
    return device


# glibc's mallopt parameters (malloc.h), and the largest mmap threshold it takes on 64-bit Linux
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_MAX = 32 << 20


def reuse_freed_memory() -> str:
    """Have the C allocator keep freed memory for reuse: glibc's ``mallopt`` raises the size from
    which a buffer is mapped from the system on its own to 32 MiB, and the free memory kept before
    the heap is trimmed to 128 MiB. Without it, a buffer the size of a few vocabulary-wide rows
    (a pass's logits, the warped ``p`` and ``q``) is mapped afresh and page-faulted in at every
    step, which can take longer than the arithmetic on it. The setting holds for the whole
    process, so for every method of a run alike (the allocator tuning that PyTorch's CPU
    performance guide makes with jemalloc or tcmalloc). Notebook 06 §9 measures what it adds.

    Returns what was set, for the run's record, or why nothing was."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return "unchanged (the C library has no mallopt: not glibc)"
    if mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) != 1:
        return "unchanged (mallopt refused the mmap threshold)"
    if mallopt(_M_TRIM_THRESHOLD, 4 * _MMAP_THRESHOLD_MAX) != 1:
        return "unchanged (mallopt refused the trim threshold)"
    return "glibc mallopt: mmap threshold 32 MiB, trim threshold 128 MiB"


def native_bfloat16(device: str) -> bool:
    """Does ``device`` compute in bfloat16 natively? A CUDA device: yes (its tensor cores). A CPU:
    when it has AVX512-BF16 or AMX-BF16 instructions (read from ``/proc/cpuinfo``; elsewhere: no),
    where bfloat16 passes cost less than float32 ones (notebook 06); without them bfloat16 is
    emulated and slower."""
    if device == "cuda":
        return True
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


# --------------------------------------------------------------------------------------------
# Cost model
# --------------------------------------------------------------------------------------------


@torch.inference_mode()
def measure_pass_costs(
    pair: ModelPair, n_max: int, *, context: int = 64, reps: int = 15
) -> dict[str, Any]:
    """``t_target[n-1]`` for n = 1..n_max and ``t_draft`` (one token), in seconds, with KV cache at a
    context of ``context`` tokens; ``c = t_draft / t_target(1)``.

    The passes are measured in rounds, every pass size once per round in a rotated order, and the
    median over rounds is kept: a transient load on the machine then hits every size alike
    instead of one size's whole sample (two warm-up rounds are dropped).
    """
    device = pair.device
    g = torch.Generator().manual_seed(0)
    vocab = pair.target.config.vocab_size
    ctx = torch.randint(min(100, vocab // 2), vocab, (context,), generator=g).to(device)
    _, t_cache = model_forward(pair.target, ctx, None, 1)
    # The draft is timed through the Drafter interface: one proposal of one token after the
    # context (for a model draft: one cached pass, the warp and the sample).
    drafter = as_drafter(pair.draft)
    drafter.reset()
    TargetState.for_drafter(pair.target, drafter).forward(ctx, 1)
    warp, d_gen = Warp(1.0), torch.Generator(device=device).manual_seed(0)
    jobs = [("target", n) for n in range(1, n_max + 1)] + [("draft", 1)]
    samples: dict[tuple[str, int], list[float]] = {job: [] for job in jobs}
    for r in range(reps + 2):
        shift = r % len(jobs)
        for which, n in jobs[shift:] + jobs[:shift]:
            synchronize(device)
            t0 = time.perf_counter()
            if which == "target":
                model_forward(pair.target, ctx[-n:], t_cache, n)
            else:
                drafter.propose(ctx, 1, warp, d_gen)
            synchronize(device)
            dt = time.perf_counter() - t0
            if which == "target":
                t_cache.crop(-n)
            else:
                drafter.rollback(context - 1)
            if r >= 2:
                samples[(which, n)].append(dt)
    t_target = [statistics.median(samples[("target", n)]) for n in range(1, n_max + 1)]
    t_draft = statistics.median(samples[("draft", 1)])
    return {
        "t_target_s": t_target,
        "t_draft_s": t_draft,
        "c": t_draft / t_target[0],
        "context": context,
        "reps": reps,
        "statistic": "median over interleaved rounds",
    }


def predicted_from_costs(alpha: float, K: int, costs: dict[str, Any], width: int = 1) -> float:
    """Predicted speedup from the i.i.d. model: ``E(alpha, K)`` tokens per step over ``K`` draft
    passes and one target pass over ``K + width`` tokens (``alpha`` per position, with all the
    position's candidates counted). A chain tree has its own model:
    :func:`predicted_tree_speedup`."""
    return float(expected_tokens_per_step(alpha, K) / step_cost(K, costs, width))


def drafted_widths(K: int, tree: Sequence[int]) -> list[int]:
    """The candidates at each of the ``K`` depths of a chain tree (``1`` past ``tree``'s end)."""
    return [tree[d] if d < len(tree) else 1 for d in range(K)]


def drafted_tokens(K: int, width: int = 1, tree: Sequence[int] | None = None) -> int:
    """Draft tokens a step puts in the target's pass: ``K + width - 1`` for the chain with
    ``width`` first-position candidates, every node of the chain tree for ``tree``."""
    return K + width - 1 if tree is None else sum(drafted_widths(K, tree))


def predicted_tree_speedup(
    rates: dict[str, Any], K: int, tree: Sequence[int], costs: dict[str, Any]
) -> float:
    """The cost model's speedup of the chain tree ``tree`` at draft length ``K``: expected tokens
    per step (:func:`~specdec_lib.theory.tree_tokens_per_step` at the rates of
    :func:`tree_rates`, which must cover ``K`` depths and ``tree``'s widths) over the step's
    cost (:func:`step_cost`)."""
    E, cost = _tree_prediction(rates, K, drafted_widths(K, tree), costs)
    return E / cost


def _tree_prediction(
    rates: dict[str, Any], K: int, widths: Sequence[int], costs: dict[str, Any]
) -> tuple[float, float]:
    """(expected tokens per step, step cost) of the chain tree ``widths`` at the rates given."""
    beta = np.nan_to_num(np.asarray(rates["beta"], dtype=float))[:K]
    gamma = np.nan_to_num(np.asarray(rates["gamma"], dtype=float))
    g = [gamma[d, w - 1] for d, w in enumerate(widths)]
    return tree_tokens_per_step(beta, g), step_cost(K, costs, tree=widths)


def step_cost(
    K: int, costs: dict[str, Any], width: int = 1, tree: Sequence[int] | None = None
) -> float:
    """One step's cost in target passes over one token: ``K`` draft passes (a chain tree's
    alternatives come from the chain's own rows) and one target pass over the last token and the
    drafts (:func:`drafted_tokens`)."""
    t = costs["t_target_s"]
    return (K * costs["t_draft_s"] + t[drafted_tokens(K, width, tree)]) / t[0]


# --------------------------------------------------------------------------------------------
# Running cells
# --------------------------------------------------------------------------------------------


_HF_ASSISTANT_FIELDS = (
    "num_assistant_tokens",
    "num_assistant_tokens_schedule",
    "assistant_confidence_threshold",
)


def _cell_key(method: str, K: int, prompt: int, repeat: int) -> str:
    return f"{method}|{K}|{prompt}|{repeat}"


def _cell_seed(seed: int, prompt: int, repeat: int) -> int:
    return int(seed) * 1_000_003 + 1_000 * repeat + prompt


def _configs(settings: BenchSettings) -> list[tuple[str, int]]:
    configs: list[tuple[str, int]] = [("autoregressive", 0)]
    if "autoregressive_inverse_cdf" in settings.methods:
        configs.append(("autoregressive_inverse_cdf", 0))
    if "hf_autoregressive" in settings.methods:
        configs.append(("hf_autoregressive", 0))
    for K in settings.K:
        if "speculative" in settings.methods:
            configs.append(("speculative", K))
        if "hf_assisted" in settings.methods:
            configs.append(("hf_assisted", K))
    return configs


def _scheduled(draft: Any, settings: BenchSettings, K: int) -> Any:
    """The draft, wrapped in the settings' dynamic draft length (if any)."""
    if settings.schedule == "fixed":
        return draft
    if settings.schedule == "heuristic":
        return DynamicK(draft, schedule="heuristic", initial=K)
    return DynamicK(draft, schedule="constant", initial=K, threshold=settings.threshold)


class _Runner:
    def __init__(self, pair: ModelPair, settings: BenchSettings) -> None:
        self.pair = pair
        self.s = settings
        self.device = pair.device
        # None: fixed length (every cell generates max_new_tokens, past EOS if need be)
        self.eos = pair.target.config.eos_token_id if settings.stop_at_eos else None
        w = settings.warp
        self.ar = AutoregressiveDecoder(
            pair.target, temperature=w.temperature, top_k=w.top_k, top_p=w.top_p
        )
        self.ar_inverse_cdf = AutoregressiveDecoder(
            pair.target, temperature=w.temperature, top_k=w.top_k, top_p=w.top_p, argmax=False
        )
        self.spec = {
            K: SpeculativeDecoder(
                _scheduled(pair.draft, settings, K),
                pair.target,
                K=K if settings.schedule != "heuristic" else max(16, K),
                width=settings.width,
                tree=settings.tree,
                temperature=w.temperature,
                top_k=w.top_k,
                top_p=w.top_p,
            )
            for K in settings.K
        }

    def _hf(self, ids: torch.Tensor, n: int, K: int | None, seed: int) -> dict[str, Any]:
        w = self.s.warp
        kwargs: dict[str, Any] = {
            "max_new_tokens": n,
            "eos_token_id": self.eos,  # None: fixed length, like our decoders
            "pad_token_id": self.pair.tokenizer.pad_token_id
            if self.pair.tokenizer is not None
            else 0,
        }
        if w.greedy:
            kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
        else:
            # top_k=0 disables generate's default top_k=50 (the prototype's unfair baseline).
            kwargs.update(
                do_sample=True, temperature=w.temperature, top_k=w.top_k or 0, top_p=w.top_p or 1.0
            )
        saved = None
        if K is not None and self.s.draft == "ngram":
            kwargs["prompt_lookup_num_tokens"] = K  # HF's own n-gram drafter
        elif K is not None:
            # transformers reads the draft length, its schedule and the confidence threshold from
            # the *assistant's* generation_config, not from generate()'s arguments: set them there
            # (constant K, no early stop on low confidence) and restore them afterwards.
            gc = self.pair.assistant.generation_config
            saved = {name: getattr(gc, name, None) for name in _HF_ASSISTANT_FIELDS}
            gc.num_assistant_tokens = K
            gc.num_assistant_tokens_schedule = (
                "heuristic_transient" if self.s.schedule == "heuristic" else "constant"
            )
            gc.assistant_confidence_threshold = (
                self.s.threshold if self.s.schedule == "threshold" else 0.0
            )
            kwargs["assistant_model"] = self.pair.assistant
        try:
            torch.manual_seed(seed)
            synchronize(self.device)
            t0 = time.perf_counter()
            out = self.pair.target.generate(
                ids.view(1, -1), attention_mask=torch.ones_like(ids.view(1, -1)), **kwargs
            )
            synchronize(self.device)
            elapsed = time.perf_counter() - t0
        finally:
            if saved is not None:
                for name, value in saved.items():
                    setattr(self.pair.assistant.generation_config, name, value)
        tokens = out[0, ids.numel() :].tolist()
        return {"tokens": tokens, "elapsed_s": elapsed}

    def run(self, method: str, K: int, ids: torch.Tensor, seed: int) -> dict[str, Any]:
        n = self.s.max_new_tokens
        if method == "autoregressive":
            r = self.ar.generate_ids(ids, n, self.eos, seed=seed)
        elif method == "autoregressive_inverse_cdf":
            r = self.ar_inverse_cdf.generate_ids(ids, n, self.eos, seed=seed)
        elif method == "speculative":
            r = self.spec[K].generate_ids(ids, n, self.eos, seed=seed)
        elif method == "hf_assisted":
            return self._hf(ids, n, K, seed)
        else:
            return self._hf(ids, n, None, seed)
        cell: dict[str, Any] = {
            "tokens": r.tokens,
            "elapsed_s": r.elapsed_s,
            "n_steps": r.n_steps,
            "n_proposed": r.n_proposed,
            "n_accepted": r.n_accepted,
        }
        if method == "speculative":
            # Compact step log: (drafted, accepted, emitted tokens), for per-position acceptance
            # and the token-level view of notebook 04.
            cell["steps"] = [[len(st.draft_tokens), st.n_accepted, st.emitted] for st in r.steps]
            if self.s.tree is not None:  # which alternative, counted within its depth, was kept
                cell["alt_index"] = [st.alt_index for st in r.steps]
            cell["draft_ms"] = sum(st.draft_ms for st in r.steps)
            cell["verify_ms"] = sum(st.verify_ms for st in r.steps)
        return cell


# --------------------------------------------------------------------------------------------
# Aggregation
# --------------------------------------------------------------------------------------------


def _position_counts(cells: Iterable[dict[str, Any]], K: int) -> tuple[np.ndarray, np.ndarray]:
    """Per draft position: how many steps judged it (reached it: every draft before it was
    accepted) and how many accepted it."""
    reached = np.zeros(K, dtype=np.int64)
    accepted = np.zeros(K, dtype=np.int64)
    for c in cells:
        for drafted, n_acc, _ in c.get("steps", []):
            upto = min(n_acc + 1, drafted)
            reached[:upto] += 1
            accepted[:n_acc] += 1
    return reached, accepted


def _rates(reached: np.ndarray, accepted: np.ndarray) -> list[float]:
    """Acceptance at each draft position, given that the position was judged (NaN if never)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (accepted / reached).tolist()


def _accept_by_position(cells: Iterable[dict[str, Any]], K: int) -> list[float]:
    return _rates(*_position_counts(cells, K))


def tree_rates(cells: Iterable[dict[str, Any]], K: int, width: int) -> dict[str, Any]:
    """What a chain tree's steps say about every narrower chain tree, per depth ``d = 1..K``.

    From cells of a run with ``width`` candidates at every depth (``tree = [width] * K``):
    ``beta[d-1]``, the chain's acceptance at depth ``d`` once reached, and ``gamma[d-1][w-1]``,
    the probability that one of the first ``w - 1`` alternatives is accepted once the chain's
    token is rejected there (``w = 1..width``; ``gamma[.][0] = 0``). Alternatives are tried in the
    order they are drawn, so the first ``w - 1`` of them are exactly a narrower tree's: one wide
    run measures them all. Also returns the counts behind each rate."""
    positive_int(K, "K")
    positive_int(width, "width")
    reached = np.zeros(K, dtype=np.int64)
    chain = np.zeros(K, dtype=np.int64)
    rejected = np.zeros(K, dtype=np.int64)
    alt = np.zeros((K, width), dtype=np.int64)  # alt[d, j]: alternative j + 1 kept at depth d + 1
    for c in cells:
        for (drafted, n_acc, _), j in zip(c["steps"], c["alt_index"], strict=True):
            if drafted < K:  # a clamped step near the end of the output: not this tree
                continue
            on_chain = n_acc - 1 if j else n_acc  # chain tokens accepted
            reached[: min(on_chain + 1, K)] += 1
            chain[:on_chain] += 1
            if on_chain < K:
                rejected[on_chain] += 1
                if j:
                    alt[on_chain, j - 1] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        beta = chain / reached
        kept = np.concatenate([np.zeros((K, 1), dtype=np.int64), np.cumsum(alt, axis=1)[:, :-1]], 1)
        gamma = kept / rejected[:, None]
    return {
        "beta": beta.tolist(),
        "gamma": gamma.tolist(),
        "reached": reached.tolist(),
        "chain_accepted": chain.tolist(),
        "chain_rejected": rejected.tolist(),
        "alternative_kept": alt.tolist(),
    }


def best_trees(
    rates: dict[str, Any], costs: dict[str, Any], *, max_tokens: int | None = None
) -> list[dict[str, Any]]:
    """Every chain tree the rates of :func:`tree_rates` cover (``K`` up to theirs, up to their
    width at each depth), ranked by the cost model's predicted speedup: expected tokens per step
    (:func:`~specdec_lib.theory.tree_tokens_per_step`) over the step's cost (:func:`step_cost`).
    ``max_tokens`` caps the drafts in the target's pass (default: what ``costs`` measured)."""
    K_max, W = np.asarray(rates["gamma"]).shape
    cap = len(costs["t_target_s"]) - 1 if max_tokens is None else max_tokens
    out = []
    for K in range(1, K_max + 1):
        for widths in itertools.product(range(1, W + 1), repeat=K):
            n = drafted_tokens(K, tree=widths)
            if n > cap:
                continue
            E, cost = _tree_prediction(rates, K, widths, costs)
            out.append(
                {
                    "K": K,
                    "tree": list(widths),
                    "drafted": n,
                    "tokens_per_step": E,
                    "step_cost": cost,
                    "predicted_speedup": E / cost,
                }
            )
    return sorted(out, key=lambda r: -r["predicted_speedup"])


def monotone_costs(costs: dict[str, Any]) -> dict[str, Any]:
    """``costs`` with ``t_target`` made non-decreasing in the tokens of the pass, by least squares
    (scipy's isotonic regression): a pass over more tokens never costs less, so a dip between
    neighbouring sizes is timing noise, which a maximum over tree sizes would otherwise chase."""
    from scipy.optimize import isotonic_regression

    t = np.asarray(costs["t_target_s"], dtype=float)
    return {**costs, "t_target_s": isotonic_regression(t).x.tolist()}


def rank_rates(rates: dict[str, Any]) -> list[list[float]]:
    """The rates of :func:`tree_rates` by candidate rank: ``m[d][i]``, the probability that the
    ``(i+1)``-th candidate at depth ``d + 1`` (``i = 0``: the chain's token) is the one accepted
    once the step reaches that depth, ``beta`` for the first and ``(1 - beta) * (gamma[w] -
    gamma[w - 1])`` for the others: the input of :func:`~specdec_lib.theory.best_tree`."""
    beta = np.nan_to_num(np.asarray(rates["beta"], dtype=float))
    gamma = np.nan_to_num(np.asarray(rates["gamma"], dtype=float))
    alt = (1 - beta)[:, None] * np.diff(gamma, axis=1)
    return np.concatenate([beta[:, None], alt], axis=1).tolist()


def tree_ceiling(
    rates: dict[str, Any], costs: dict[str, Any], *, max_nodes: int | None = None
) -> list[dict[str, Any]]:
    """How fast a tree of ``n`` drafted nodes could be, for ``n = 1..max_nodes`` (default: what
    ``costs`` measured): the best ``n``-node tree of :func:`~specdec_lib.theory.best_tree` at the
    rank rates of :func:`rank_rates`, over one target pass on ``n + 1`` tokens and one draft pass
    per depth, at the depth limit that gives the best ratio. A ceiling, optimistic on three
    counts: every node's candidates are taken to be accepted at the rates the chain shows at its
    depth (the deepest measured depth's rates serve deeper ones), the draft is taken to grow a
    whole depth of the tree for the cost of one chain pass, and the host's work per node is left
    out."""
    m = rank_rates(rates)
    t, t_draft = costs["t_target_s"], costs["t_draft_s"]
    cap = len(t) - 1 if max_nodes is None else positive_int(max_nodes, "max_nodes")
    if cap > len(t) - 1:
        raise ValueError(f"max_nodes: costs cover up to {len(t) - 1} drafted nodes, got {cap}")
    out = []
    for n in range(1, cap + 1):
        best = None
        for limit in range(1, n + 1):
            tree = best_tree(m, n, max_depth=limit)
            depth = max(tree["depths"])
            cost = (depth * t_draft + t[n]) / t[0]
            rec = {
                "nodes": n,
                "depth": depth,
                "tokens_per_step": tree["tokens_per_step"],
                "step_cost": cost,
                "predicted_speedup": tree["tokens_per_step"] / cost,
                "parents": tree["parents"],
            }
            if best is None or rec["predicted_speedup"] > best["predicted_speedup"]:
                best = rec
            if depth < limit:  # the limit no longer binds: deeper limits give this same tree
                break
        out.append(best)
    return out


def _against_baseline(result: dict[str, Any]):
    """Each non-baseline cell of ``result`` beside the autoregressive cell of the same prompt and
    repeat: ``(method, K, prompt, baseline tokens, first differing position or None)``."""
    cells = {tuple(key.split("|")): cell for key, cell in sorted(result["cells"].items())}
    base = {(p, rep): c["tokens"] for (m, _k, p, rep), c in cells.items() if m == "autoregressive"}
    for (method, K, p, rep), cell in cells.items():
        if method == "autoregressive" or (p, rep) not in base:
            continue
        ref, got = base[p, rep], cell["tokens"]
        j = None
        if got != ref:
            pairs = enumerate(zip(got, ref, strict=False))
            j = next((i for i, (a, b) in pairs if a != b), min(len(got), len(ref)))
        yield method, int(K), int(p), ref, j


def identical_outputs(result: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """For a greedy run (``temperature == 0``): per (method, K) other than the baseline, how many
    of its cells emitted exactly the autoregressive cell's tokens (same prompt and repeat), and
    where the others first differ (token positions). In float32 speculative decoding is token for
    token the autoregressive output; in bfloat16 a pass over ``K + 1`` tokens rounds differently
    from a pass over one, so a near-tie between the top two tokens can go the other way.
    ``{}`` for a sampled run, whose outputs differ by design."""
    if result["settings"]["temperature"] != 0:
        return {}
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for method, K, _p, _ref, j in _against_baseline(result):
        rec = out.setdefault((method, K), {"cells": 0, "identical": 0, "first_divergence": []})
        rec["cells"] += 1
        if j is None:
            rec["identical"] += 1
        else:
            rec["first_divergence"].append(j)
    for rec in out.values():
        rec["fraction"] = rec["identical"] / rec["cells"]
    return out


def summarize(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per (method, K): throughput, speedup vs the baseline of the same run, alpha,
    tau, per-request latency percentiles, predicted speedup and per-prompt records."""
    prompts = result["prompts"]
    costs = result.get("costs")
    width = int(result["settings"]["width"])
    tree = result["settings"].get("tree")
    identical = identical_outputs(result)
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for key, cell in result["cells"].items():
        method, K, p, rep = key.split("|")
        groups.setdefault((method, int(K)), []).append(
            {**cell, "prompt": int(p), "repeat": int(rep)}
        )
    base = groups.get(("autoregressive", 0))
    base_tps = (
        sum(len(c["tokens"]) for c in base) / sum(c["elapsed_s"] for c in base)
        if base
        else float("nan")
    )
    runs = []
    for (method, K), cells in sorted(
        groups.items(), key=lambda kv: (METHODS.index(kv[0][0]), kv[0][1])
    ):
        n_tok = sum(len(c["tokens"]) for c in cells)
        secs = sum(c["elapsed_s"] for c in cells)
        lat = np.array([c["elapsed_s"] * 1e3 for c in cells])
        rec: dict[str, Any] = {
            "method": method,
            "K": K,
            "n_cells": len(cells),
            "tokens": n_tok,
            "seconds": secs,
            "tokens_per_s": n_tok / secs,
            "speedup": (n_tok / secs) / base_tps,
            "latency_p50_ms": float(np.percentile(lat, 50)),
            "latency_p95_ms": float(np.percentile(lat, 95)),
            "alpha": None,
            "tau": None,
            "predicted_speedup": None,
        }
        if method == "speculative":
            proposed = sum(c["n_proposed"] for c in cells)
            accepted = sum(c["n_accepted"] for c in cells)
            # Draft positions actually judged: a step stops at its first rejection, so the drafts
            # after it were proposed but never tested.
            judged = sum(min(a + 1, d) for c in cells for d, a, _ in c["steps"])
            rec["alpha"] = accepted / proposed if proposed else float("nan")
            # The per-position acceptance probability of the i.i.d. model (its maximum-likelihood
            # estimate): the alpha in E = (1 - alpha^(K+1)) / (1 - alpha). accepted / proposed
            # is smaller, (a - a^(K+1)) / ((1 - a) K), and would make the prediction pessimistic.
            rec["alpha_iid"] = accepted / judged if judged else float("nan")
            rec["tau"] = n_tok / sum(c["n_steps"] for c in cells)
            rec["alpha_by_position"] = _accept_by_position(cells, K)
            if costs and tree is not None:
                # the chain tree's own model, at the rates its steps show (tree_tokens_per_step)
                rates = tree_rates(cells, K, max(drafted_widths(K, tree)))
                rec["tree_rates"] = rates
                rec["predicted_speedup"] = predicted_tree_speedup(rates, K, tree, costs)
            elif costs:
                rec["predicted_speedup"] = predicted_from_costs(rec["alpha_iid"], K, costs, width)
            if costs:
                rec["efficiency"] = rec["speedup"] / rec["predicted_speedup"]
                # The same cost model with the measured tokens per step instead of the modelled E.
                rec["predicted_speedup_from_tau"] = rec["tau"] / step_cost(K, costs, width, tree)
            rec["draft_share"] = sum(c["draft_ms"] for c in cells) / (1e3 * secs)
        per_prompt = []
        for p in sorted({c["prompt"] for c in cells}):
            cs = [c for c in cells if c["prompt"] == p]
            pp = {
                "prompt": p,
                "category": prompts[p]["category"],
                "tokens": sum(len(c["tokens"]) for c in cs),
                "seconds": sum(c["elapsed_s"] for c in cs),
            }
            pp["tokens_per_s"] = pp["tokens"] / pp["seconds"]
            if method == "speculative":
                prop = sum(c["n_proposed"] for c in cs)
                pp["alpha"] = sum(c["n_accepted"] for c in cs) / prop if prop else float("nan")
                pp["n_proposed"] = prop
                pp["n_accepted"] = sum(c["n_accepted"] for c in cs)
                pp["tau"] = pp["tokens"] / sum(c["n_steps"] for c in cs)
            per_prompt.append(pp)
        if (method, K) in identical:
            rec["identical_to_autoregressive"] = identical[method, K]["fraction"]
        rec["per_prompt"] = per_prompt
        runs.append(rec)
    return runs


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


def _settings_dict(s: BenchSettings) -> dict[str, Any]:
    d = dataclasses.asdict(s)
    # Store the prompts path relative to the repository so that results compare across checkouts.
    try:
        d["prompts"] = str(Path(d["prompts"]).resolve().relative_to(REPO_ROOT.resolve()))
    except ValueError:
        pass
    return d


def speedup_interval(
    result: dict[str, Any],
    method: str,
    K: int,
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
    baseline: str = "autoregressive",
) -> tuple[float, float]:
    """A bootstrap interval over prompts for the speedup of ``(method, K)`` in ``result``.

    The speedup is pooled tokens per second over pooled tokens per second of the ``baseline``
    method (one of the ``K = 0`` methods; by default the autoregressive baseline, what
    :func:`summarize` reports) on the same prompts; prompts are resampled in pairs
    (a prompt's cells of both methods, all repeats, go together), by ``scipy.stats.bootstrap``
    (BCa). The interval speaks of these prompts' population, at this machine's timing noise."""
    from scipy import stats as sps

    positive_int(n_resamples, "n_resamples")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    sums: dict[tuple[str, int], np.ndarray] = {}
    for key, cell in result["cells"].items():
        m, k, p, _rep = key.split("|")
        if (m, int(k)) in {(method, K), (baseline, 0)}:
            row = sums.setdefault((m, int(p)), np.zeros(2))
            row += (len(cell["tokens"]), cell["elapsed_s"])
    prompts = sorted({p for m, p in sums if m == method} & {p for m, p in sums if m == baseline})
    if method == baseline or len(prompts) < 2:
        raise ValueError(
            f"no ({method!r}, K={K}) cells beside {baseline!r} cells on two prompts or more"
        )
    ours = np.array([sums[method, p] for p in prompts])
    base = np.array([sums[baseline, p] for p in prompts])

    def ratio(a_tok, a_s, b_tok, b_s):
        return (a_tok.sum() / a_s.sum()) / (b_tok.sum() / b_s.sum())

    res = sps.bootstrap(
        (ours[:, 0], ours[:, 1], base[:, 0], base[:, 1]),
        ratio,
        paired=True,
        vectorized=False,
        confidence_level=confidence,
        n_resamples=n_resamples,
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def speculative_runs(files: Mapping[tuple[str, str], Any]):
    """The speculative rows of several runs side by side (notebooks 05 and 06): ``files`` maps
    ``(panel, config)`` to a stored run; each run's rows, with their intervals
    (:func:`runs_frame`), are labelled by its ``panel`` and ``config``."""
    import pandas as pd

    frames = []
    for (panel, config), path in files.items():
        df = runs_frame(read_json(path), intervals=True)
        frames.append(df[df.method == "speculative"].assign(panel=panel, config=config))
    return pd.concat(frames, ignore_index=True)


def runs_frame(result: dict[str, Any], *, intervals: bool = False):
    """The ``runs`` summary as a pandas DataFrame (one row per method and K); with ``intervals``,
    ``speedup_low`` and ``speedup_high``, the 95% bootstrap interval over prompts
    (:func:`speedup_interval`) of each method other than the baseline."""
    import pandas as pd

    cols = [
        "method",
        "K",
        "tokens_per_s",
        "speedup",
        "alpha",
        "alpha_iid",
        "tau",
        "predicted_speedup",
        "efficiency",
        "latency_p50_ms",
        "latency_p95_ms",
        "n_cells",
        "tokens",
    ]
    df = pd.DataFrame(result["runs"])
    df = df[[c for c in cols if c in df.columns]]
    if intervals:
        bounds = [
            speedup_interval(result, m, int(k)) if m != "autoregressive" else (1.0, 1.0)
            for m, k in zip(df["method"], df["K"], strict=True)
        ]
        df.insert(df.columns.get_loc("speedup") + 1, "speedup_low", [b[0] for b in bounds])
        df.insert(df.columns.get_loc("speedup") + 2, "speedup_high", [b[1] for b in bounds])
    return df


def pool_repeats(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several runs of the same settings (other sampling seeds allowed) as one run with more
    repeats: their cells under distinct repeat indices, ``runs`` summarized again over all of them
    (so :func:`runs_frame` and :func:`speedup_interval` pool the repeats). The first run's prompts,
    costs and provenance are kept; ``pooled_from`` lists every run's seed and repeats."""
    if not results:
        raise ValueError("results must hold at least one benchmark run")
    first = results[0]

    def comparable(settings: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in settings.items() if k not in {"seed", "repeats"}}

    cells: dict[str, Any] = {}
    offset = 0
    for res in results:
        if comparable(res["settings"]) != comparable(first["settings"]):
            raise ValueError("results must share their settings (other than seed and repeats)")
        for key, cell in res["cells"].items():
            method, K, prompt, rep = key.split("|")
            cells[_cell_key(method, int(K), int(prompt), int(rep) + offset)] = cell
        offset += int(res["settings"]["repeats"])
    pooled = {
        **first,
        "settings": {**first["settings"], "repeats": offset},
        "cells": cells,
        "pooled_from": [
            {"seed": r["settings"]["seed"], "repeats": r["settings"]["repeats"]} for r in results
        ],
    }
    pooled["runs"] = summarize(pooled)
    return pooled


def per_prompt_frame(result: dict[str, Any]):
    """Per-prompt throughput, alpha and speedup over the same prompt's autoregressive run."""
    import pandas as pd

    rows = []
    for run in result["runs"]:
        for pp in run["per_prompt"]:
            rows.append({"method": run["method"], "K": run["K"], **pp})
    df = pd.DataFrame(rows)
    base = df[df.method == "autoregressive"].set_index("prompt")["tokens_per_s"]
    df["speedup"] = df["tokens_per_s"] / df["prompt"].map(base)
    return df


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
) -> dict[str, Any]:
    """The draft's acceptance measured by decoding: ``alpha`` = accepted / proposed over all
    prompts and seeds, per draft position, with the per-prompt values (for intervals).

    At ``K = 1`` every proposal is judged, so ``alpha`` is the per-token acceptance rate of the
    theory (``E[sum_x min(p, q)]`` over the contexts the target visits). With ``width > 1`` a
    position counts as accepted when any of its candidates is.
    """
    from tqdm.auto import tqdm

    if not isinstance(prompts, list):
        prompts = load_prompts(prompts)
    dec = SpeculativeDecoder(
        pair.draft if draft is None else draft,
        pair.target,
        K=K,
        width=width,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
    )
    cells, per_prompt = [], []
    jobs = [(i, p, s) for i, p in enumerate(prompts) for s in seeds]
    for i, p, s in tqdm(jobs, desc="acceptance", disable=not progress):
        ids = pair.tokenizer(p["text"], return_tensors="pt").input_ids[0].to(pair.device)
        r = dec.generate_ids(ids, max_new_tokens, seed=s)
        steps = [[len(st.draft_tokens), st.n_accepted, st.emitted] for st in r.steps]
        cells.append({"steps": steps})
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
    proposed = sum(c["proposed"] for c in per_prompt)
    accepted = sum(c["accepted"] for c in per_prompt)
    reached_at, accepted_at = _position_counts(cells, K)
    return {
        "alpha": accepted / proposed if proposed else float("nan"),
        "by_position": _rates(reached_at, accepted_at),
        "reached_by_position": reached_at.tolist(),
        "accepted_by_position": accepted_at.tolist(),
        "proposed": proposed,
        "accepted": accepted,
        "tau": float(np.mean([c["tau"] for c in per_prompt])),
        "per_prompt": per_prompt,
        "settings": {
            "K": K,
            "temperature": temperature,
            "top_k": top_k,
            "top_p": top_p,
            "max_new_tokens": max_new_tokens,
            "seeds": list(seeds),
        },
    }


def run_benchmark(
    settings: BenchSettings,
    out: str | Path,
    *,
    resume: bool = True,
    progress: bool = True,
    pair: ModelPair | None = None,
) -> dict[str, Any]:
    """Run (or resume) a benchmark and write it to ``out``; returns the final result dict.

    The file is rewritten atomically after every cell with ``"status": "partial"``; the final
    write has ``"status": "complete"`` and the ``runs`` summary. With ``resume`` a partial file
    made with the same settings is continued; a file made with other settings is refused.
    """
    from tqdm.auto import tqdm

    settings.validate()
    prompts = load_prompts(settings.prompts)
    out = Path(out)
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
    allocator = reuse_freed_memory() if settings.reuse_memory else "unchanged (--no-reuse-memory)"

    result: dict[str, Any] | None = None
    if out.exists() and resume:
        try:
            prev = read_json(out)
        except ValueError:
            prev = None  # unreadable: start over (it was never ours to trust)
        if prev is not None and prev.get("status") in ("partial", "complete"):
            if prev.get("settings") != _settings_dict(settings):
                raise ValueError(
                    f"{out} holds a run with other settings; choose another --out or pass --restart"
                )
            result = prev
            if prev.get("status") == "complete":
                return prev
    if pair is None:
        pair = load_pair(
            settings.pair,
            draft=settings.draft,
            dtype=settings.dtype,
            device=settings.device,
            head=settings.head,
        )
    if pair.tokenizer is None:
        raise ValueError(f"pair {settings.pair!r} has no tokenizer; the benchmark needs one")

    if result is None:
        result = {
            "format": FORMAT_VERSION,
            "status": "partial",
            "settings": _settings_dict(settings),
            "pair": pair.describe(),
            # Both sides of every comparison run the same way: eager PyTorch, no CUDA graphs,
            # no torch.compile.
            "execution": "eager",
            "prompts": prompts,
            "sessions": [],
            "costs": None,
            "cells": {},
        }
    result["sessions"].append(
        provenance(device=pair.device, seed=settings.seed, settings=_settings_dict(settings))
        | {"allocator": allocator}
    )
    result["provenance"] = result["sessions"][0]

    runner = _Runner(pair, settings)
    encoded = [
        pair.tokenizer(p["text"], return_tensors="pt").input_ids[0].to(pair.device) for p in prompts
    ]
    if result["costs"] is None:
        result["costs"] = measure_pass_costs(
            pair,
            max(drafted_tokens(K, settings.width, settings.tree) for K in settings.K) + 1,
            context=settings.cost_context,
            reps=settings.cost_reps,
        )
        atomic_write_json(out, result)

    # Warm-up, excluded: one short generation per method.
    for method, K in _configs(settings)[:: max(1, len(_configs(settings)) // 4)] + [
        ("autoregressive", 0)
    ]:
        s_short = dataclasses.replace(settings, max_new_tokens=4)
        _Runner(pair, s_short).run(method, K or settings.K[0], encoded[0], seed=0)

    configs = _configs(settings)
    todo = []
    for rep in range(settings.repeats):
        for p in range(len(prompts)):
            shift = (p + rep * 7) % len(configs)
            for method, K in configs[shift:] + configs[:shift]:
                key = _cell_key(method, K, p, rep)
                if key not in result["cells"]:
                    todo.append((key, method, K, p, rep))
    bar = tqdm(todo, desc=f"bench {settings.pair} {settings.warp.describe()}", disable=not progress)
    for key, method, K, p, rep in bar:
        cell = runner.run(method, K, encoded[p], _cell_seed(settings.seed, p, rep))
        result["cells"][key] = cell
        atomic_write_json(out, result)
    result["runs"] = summarize(result)
    result["status"] = "complete"
    atomic_write_json(out, result)
    return result


# --------------------------------------------------------------------------------------------
# A draft's acceptance and cost on held-out prompts
# --------------------------------------------------------------------------------------------


@dataclass
class EvalSettings:
    """What defines a draft's evaluation (``python -m specdec_lib eval-drafter``)."""

    draft: str = setting(
        "trained",
        "a draft of the pair by name, or a path to saved draft weights (a trained head)",
    )
    pair: str = setting("default", "model pair", choices=PAIRS)
    prompts: str = setting("data/drafter/heldout_prompts.json", "held-out prompts (JSON)")
    dtype: str = setting("bfloat16", "dtype of both models", choices=DTYPES)
    temperatures: list[float] = setting([1.0, 0.7, 0.0], "temperatures (0 = greedy)")
    K: int = setting(1, "draft tokens per step (1: every proposal is judged)")
    width: int = setting(1, "candidates for the first draft position")
    max_new_tokens: int = setting(64, "tokens generated per prompt")
    seeds: int = setting(1, "seeds per prompt")
    threads: int | None = setting(None, "torch threads (default: torch's)")

    def __post_init__(self) -> None:
        one_of(self.pair, "pair", PAIRS)
        one_of(self.dtype, "dtype", DTYPES)
        positive_int(self.K, "K", "draft tokens per step")
        positive_int(self.width, "width", "candidates for the first draft position")
        positive_int(self.max_new_tokens, "max_new_tokens")
        positive_int(self.seeds, "seeds", "seeds per prompt")
        positive_int(self.threads, "threads", optional=True)
        for T in self.temperatures:
            Warp(T)

    def load_pair(self) -> ModelPair:
        """The pair with the draft named, or with the trained head saved at the path given."""
        if self.draft in PAIRS[self.pair]:
            return load_pair(self.pair, draft=self.draft, dtype=self.dtype)
        if self.draft in DRAFTS:
            one_of(self.draft, "draft", PAIRS[self.pair])  # a draft of another pair: say so
        if not Path(self.draft).is_file():
            raise ValueError(
                f"draft must be one of {', '.join(PAIRS[self.pair])} or a path to saved draft "
                f"weights, got {self.draft!r}"
            )
        return load_pair(self.pair, draft="trained", dtype=self.dtype, head=self.draft)


def evaluate_drafter(
    settings: EvalSettings, *, progress: bool = True, pair: ModelPair | None = None
) -> dict[str, Any]:
    """Acceptance by decoding at each temperature (:func:`acceptance`) and the pass costs (the
    cost model up to ``K = 5``), with provenance: the record ``eval-drafter`` writes."""
    import dataclasses as dc

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
        )
    return {
        "pair": pair.describe(),
        "by_temperature": results,
        "costs": measure_pass_costs(pair, 6),  # t_target(1..6): the cost model up to K = 5
        "provenance": provenance(device=pair.device, seed=0, settings=dc.asdict(settings)),
    }


@torch.inference_mode()
def near_tie_evidence(pair: ModelPair, result: dict[str, Any], K: int) -> list[dict[str, Any]]:
    """Why greedy bfloat16 speculative output can differ from autoregressive output.

    For each speculative cell of a greedy ``result`` (run at ``K``) whose tokens differ from the
    autoregressive cell's, take the prefix up to the first differing position ``j`` (prompt plus
    the shared tokens) and compute the target's logits for position ``j`` twice, as the two
    decoders do: from a pass over the last token alone (autoregressive) and as the last row of a
    pass over the last ``K + 1`` tokens (a verification pass). Returns, per divergence, the gap
    between the top two logits of the one-token pass and the largest difference between the two
    passes' logits: a divergence is a near-tie when the gap is within that difference."""
    prompts = [
        pair.tokenizer(p["text"], return_tensors="pt").input_ids[0] for p in result["prompts"]
    ]
    rows = []
    for method, k, p, ref, j in _against_baseline(result):
        if method != "speculative" or k != K or j is None:
            continue
        prefix = torch.cat([prompts[p], torch.tensor(ref[:j], dtype=torch.long)])
        prefix = prefix.to(pair.device)
        one, _ = model_forward(pair.target, prefix[-1:], _cache_over(pair.target, prefix[:-1]), 1)
        many, _ = model_forward(
            pair.target, prefix[-(K + 1) :], _cache_over(pair.target, prefix[: -(K + 1)]), 1
        )
        top2 = one[-1].float().topk(2).values
        rows.append(
            {
                "prompt": p,
                "position": j,
                "top2_gap": float(top2[0] - top2[1]),
                "max_logit_difference": float((one[-1].float() - many[-1].float()).abs().max()),
                "argmax_differs": bool(one[-1].argmax() != many[-1].argmax()),
            }
        )
    return rows


def _cache_over(model: Any, ids: torch.Tensor) -> Any:
    """A KV cache over ``ids`` (``None`` for an empty prefix)."""
    if ids.numel() == 0:
        return None
    _, cache = model_forward(model, ids, None, 1)
    return cache
