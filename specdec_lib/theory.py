"""Closed-form predictions of Leviathan et al. 2022 (arXiv 2211.17192), section 3.

Derived in ``notebooks/01_acceptance_rule.ipynb``; compared with measurements in notebook 03.
Symbols: ``alpha`` acceptance rate (assumed the same at every draft position), ``K`` draft tokens per
step, ``c`` cost of one draft pass relative to one target pass.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "expected_tokens_per_step",
    "tree_tokens_per_step",
    "best_tree",
    "required_alpha",
    "optimal_K",
    "predicted_speedup",
    "walltime_speedup",
    "DeviceSpec",
    "GPUS",
    "gpu_pass_time",
]


def _check_alpha(alpha):
    a = np.asarray(alpha, dtype=float)
    if np.any(~np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    return a


def _check_K(K):
    k = np.asarray(K)
    if not np.issubdtype(k.dtype, np.integer) or np.any(k < 0):
        raise ValueError(f"K must be a non-negative integer (or array of them), got {K!r}")
    return k


def expected_tokens_per_step(alpha, K):
    """E[tokens per step] = (1 - alpha^(K+1)) / (1 - alpha)  (Leviathan et al., eq. 1).

    The number of accepted drafts is a geometric variable capped at K, plus one corrected or bonus
    token. Equals K + 1 at alpha = 1.
    """
    a, k = _check_alpha(alpha), _check_K(K)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where(a < 1, (1 - a ** (k + 1)) / np.where(a < 1, 1 - a, 1.0), k + 1.0)
    return e.item() if e.ndim == 0 else e


def tree_tokens_per_step(beta: Sequence[float], gamma: Sequence[float]) -> float:
    """E[tokens per step] of a chain tree (the chain, with alternatives beside it at each depth).

    ``beta[d]``: the probability that the chain's token at depth ``d + 1`` is accepted once the
    step reaches it; ``gamma[d]``: the probability that one of that depth's alternatives is
    accepted once the chain's token there is rejected (``0`` without alternatives). A step that
    reaches depth ``d`` ends there with ``d + 1`` tokens when an alternative is accepted (it, then
    the target's token after it) and ``d`` otherwise; past the last depth ``K`` it ends with
    ``K + 1``:

        E = sum_d R_d (1 - beta_d) (d + gamma_d) + R_{K+1} (K + 1),  R_1 = 1,  R_{d+1} = R_d beta_d.

    With ``gamma = 0`` and ``beta = alpha`` at every depth this is :func:`expected_tokens_per_step`.
    """
    b = np.asarray(beta, dtype=float)
    g = np.asarray(gamma, dtype=float)
    if b.ndim != 1 or b.shape != g.shape:
        raise ValueError(
            f"beta and gamma must be 1-D of the same length (one per depth), got {b.shape} and {g.shape}"
        )
    for name, v in (("beta", b), ("gamma", g)):
        if np.any(~np.isfinite(v)) or np.any((v < 0) | (v > 1)):
            raise ValueError(f"{name} must hold probabilities in [0, 1], got {v.tolist()}")
    K = b.shape[0]
    reach = np.concatenate([[1.0], np.cumprod(b)])  # R_1 .. R_{K+1}
    depth = np.arange(1, K + 1)
    return float(np.sum(reach[:K] * (1 - b) * (depth + g)) + reach[K] * (K + 1))


def best_tree(m: Sequence[Sequence[float]], n: int, max_depth: int | None = None) -> dict:
    """The tree of ``n`` drafted nodes with the most expected tokens per step, when the draft's
    candidates are accepted by rank: ``m[d][i]`` is the probability that the ``(i+1)``-th candidate
    a node proposes at depth ``d + 1`` is the one accepted, once the step reaches that node (the
    last row serves every deeper depth). Each node's children are its ranks ``0, 1, ...``.

    A node is on the accepted path with probability ``v`` = the product of ``m`` along its path,
    and a step emits one token more than the drafted nodes it accepts, so

        E[tokens per step] = 1 + sum over the tree's nodes of v(node).

    ``v`` never grows from a node to its child, so the ``n`` largest values form a tree: taken in
    order from a heap (best-first, as EAGLE-2 grows its trees), they are the best ``n``-node tree.
    The same holds among the nodes no deeper than ``max_depth`` (default: no limit). The chain
    trees of :func:`tree_tokens_per_step` are the trees whose alternatives are leaves.

    Returns ``parents`` (``-1``: the step's last token), ``depths``, ``ranks``, the node values
    ``v`` and ``tokens_per_step``."""
    rows = [np.asarray(r, dtype=float) for r in m]
    if not rows or any(r.ndim != 1 or r.size == 0 for r in rows):
        raise ValueError("m must hold one non-empty row of rank probabilities per depth")
    for d, r in enumerate(rows):
        if np.any(~np.isfinite(r)) or np.any(r < 0) or r.sum() > 1 + 1e-9:
            raise ValueError(f"m[{d}] must hold probabilities >= 0 that sum to <= 1, got {r}")
    n = int(n)
    if n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    if max_depth is not None and int(max_depth) < 1:
        raise ValueError(f"max_depth must be an integer >= 1 or None, got {max_depth!r}")
    deepest = float("inf") if max_depth is None else int(max_depth)
    parents: list[int] = []
    depths: list[int] = []
    ranks: list[int] = []
    values: list[float] = []
    heap = [(-v, 0, i, -1) for i, v in enumerate(rows[0])]  # (-value, depth - 1, rank, parent)
    heapq.heapify(heap)
    while heap and len(values) < n:
        neg_v, d, i, parent = heapq.heappop(heap)
        node = len(values)
        parents.append(parent)
        depths.append(d + 1)
        ranks.append(i)
        values.append(-neg_v)
        if d + 2 > deepest:
            continue
        row = rows[min(d + 1, len(rows) - 1)]
        for j, mj in enumerate(row):
            heapq.heappush(heap, (neg_v * mj, d + 1, j, node))
    return {
        "parents": parents,
        "depths": depths,
        "ranks": ranks,
        "values": values,
        "tokens_per_step": 1.0 + float(np.sum(values)),
    }


def required_alpha(
    speedup: float, t_draft: float, t_target: Sequence[float], *, tol: float = 1e-6
) -> float:
    """The smallest acceptance rate ``alpha`` (the same at every position, one candidate each) at
    which a chain reaches ``speedup`` at its best ``K``, by :func:`predicted_speedup` with the
    measured pass costs (``t_target[n - 1]``: a target pass on ``n`` tokens; ``K`` up to
    ``len(t_target) - 1``). The predicted speedup grows with ``alpha``, so this is a bisection;
    ``nan`` when even ``alpha = 1`` falls short."""
    t = [float(x) for x in t_target]
    if len(t) < 2:
        raise ValueError("t_target must hold the pass costs on 1 and more tokens")
    if not speedup > 0:
        raise ValueError(f"speedup must be > 0, got {speedup!r}")
    Ks = range(1, len(t))

    def best(a: float) -> float:
        return max(predicted_speedup(a, K, t_draft, t) for K in Ks)

    if best(1.0) < speedup:
        return float("nan")
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if best(mid) < speedup else (lo, mid)
    return hi


def walltime_speedup(alpha, K, c):
    """Expected walltime improvement (1 - alpha^(K+1)) / ((1 - alpha)(cK + 1))  (Theorem 3.8).

    Assumes a target pass on K + 1 tokens costs the same as on one token, and a draft pass costs
    ``c`` target passes.
    """
    c_ = np.asarray(c, dtype=float)
    if np.any(~np.isfinite(c_)) or np.any(c_ < 0):
        raise ValueError(f"c must be a finite number >= 0, got {c!r}")
    s = expected_tokens_per_step(alpha, K) / (c_ * _check_K(K) + 1.0)
    return s.item() if np.ndim(s) == 0 else s


def predicted_speedup(alpha, K, t_draft, t_target: Sequence[float] | float, t_target_1=None):
    """Speedup predicted from measured pass costs, without the "verification is free" assumption.

    ``E[tokens per step] / ((K * t_draft + t_target(K+1)) / t_target(1))``. ``t_target`` is the
    cost of a target pass on K + 1 tokens; ``t_target_1`` that on one token (if ``t_target`` is a
    sequence indexed by n - 1, both are read from it).
    """
    if t_target_1 is None:
        seq = list(t_target)  # t_target[n - 1] = cost of a pass on n tokens
        t_target_1, t_k1 = seq[0], seq[int(K)]
    else:
        t_k1 = float(t_target)
    step = K * float(t_draft) + float(t_k1)
    return expected_tokens_per_step(alpha, K) / (step / float(t_target_1))


def optimal_K(alpha, c, K_max: int = 16) -> int:
    """The K in 1..K_max that maximises :func:`walltime_speedup` (clipped at ``K_max``: for alpha
    near 1 and tiny c the unconstrained optimum can be larger)."""
    Ks = np.arange(1, K_max + 1)
    return int(Ks[np.argmax(walltime_speedup(alpha, Ks, c))])


# --------------------------------------------------------------------------------------------
# A roofline-plus-launch cost model of a forward pass, for "what a GPU would show" (notebook 03).
# It is a model, not a measurement: every constant below is an assumption with its source.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceSpec:
    """Peak numbers of an accelerator, from its vendor's datasheet."""

    name: str
    bandwidth_gb_s: float  # HBM/GDDR bandwidth, GB/s
    peak_tflops: float  # dense fp16/bf16 tensor-core peak, TFLOP/s
    source: str


GPUS: dict[str, DeviceSpec] = {
    "T4": DeviceSpec(
        "NVIDIA T4", 320.0, 65.0, "NVIDIA T4 datasheet: 320 GB/s GDDR6, 65 TFLOPS FP16 (mixed)"
    ),
    "A100": DeviceSpec(
        "NVIDIA A100 SXM 80GB",
        2039.0,
        312.0,
        "NVIDIA A100 datasheet: 2,039 GB/s HBM2e, 312 TFLOPS BF16 dense",
    ),
    "H200": DeviceSpec(
        "NVIDIA H200 SXM",
        4800.0,
        989.0,
        "NVIDIA H200 datasheet: 4.8 TB/s HBM3e, 989 TFLOPS BF16 dense (1,979 sparse)",
    ),
}

# Host-side cost of launching one op in eager PyTorch: "usually between 5-20 microseconds" on the
# CPU side per CUDA launch (HolisticTraceAnalysis docs, cuda_kernel_launch_stats). We take 10 us.
LAUNCH_OVERHEAD_S = 10e-6
# Fraction of peak a decode-time kernel reaches (memory-bound GEMV-like kernels rarely exceed
# ~70-80% of bandwidth; small GEMMs are far from tensor-core peak). An assumption, stated.
BANDWIDTH_EFFICIENCY = 0.7
COMPUTE_EFFICIENCY = 0.5
# Ops launched per decoder layer in an eager Hugging Face Llama forward (2 RMSNorms, q/k/v/o
# projections, rotary embedding, attention, gate/up/down projections, activation and product,
# 2 residual adds, plus views and casts): about 15.
OPS_PER_LAYER = 15
OPS_FIXED = 6  # embedding, final norm, head, logits slice, ...


def gpu_pass_time(
    spec: DeviceSpec,
    *,
    weight_bytes: float,
    n_tokens: int,
    flops_per_token: float,
    n_layers: int,
    launch_overhead_s: float = LAUNCH_OVERHEAD_S,
    bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY,
    compute_efficiency: float = COMPUTE_EFFICIENCY,
) -> float:
    """Modelled seconds for one forward pass over ``n_tokens`` new tokens at batch size 1.

    ``max(weights / bandwidth, n_tokens * flops / peak) + ops * launch overhead``: a pass reads
    every weight once whatever ``n_tokens`` is (so verifying K + 1 tokens costs about as much as one
    until compute catches up), and in eager mode each op costs a fixed launch overhead on the host
    (which, for a 135M model, dominates). KV-cache traffic and attention FLOPs are ignored (short
    contexts).
    """
    t_mem = weight_bytes / (spec.bandwidth_gb_s * 1e9 * bandwidth_efficiency)
    t_compute = n_tokens * flops_per_token / (spec.peak_tflops * 1e12 * compute_efficiency)
    ops = n_layers * OPS_PER_LAYER + OPS_FIXED
    return max(t_mem, t_compute) + ops * launch_overhead_s
