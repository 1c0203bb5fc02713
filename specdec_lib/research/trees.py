"""The search for a draft tree's shape, and how far any tree could go (notebook 06).

:func:`best_trees` ranks chain trees by the cost model; :func:`tree_ceiling` bounds any tree."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..checks import positive_int
from ..costs import (
    draft_cost,
    drafted_tokens,
    predicted_speedup,
    tree_prediction,
)
from .speed.tuning import monotone_costs

__all__ = [
    "best_tree",
    "best_trees",
    "monotone_costs",
    "rank_rates",
    "required_alpha",
    "tree_ceiling",
]


def best_tree(m: Sequence[Sequence[float]], n: int, max_depth: int | None = None) -> dict:
    """The tree of ``n`` drafted nodes with the most expected tokens per step when candidates are
    accepted by rank: ``m[d][i]`` is the probability that a node's ``(i+1)``-th candidate at depth
    ``d + 1`` is the one accepted once the step reaches it (the last row serves deeper depths).

    A node is on the accepted path with probability ``v``, the product of ``m`` along its path, and
    ``E[tokens per step] = 1 + sum of v over the nodes``. ``v`` never grows from parent to child, so
    the ``n`` largest values, popped from a heap (best-first), form the best tree, also under
    ``max_depth``. Returns ``parents`` (``-1``: the step's last token), ``depths``, ``ranks``,
    ``values`` and ``tokens_per_step``."""
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
    """The smallest acceptance rate ``alpha`` (the same at every position, one candidate) at which a
    chain reaches ``speedup`` at its best ``K`` by :func:`~specdec_lib.costs.predicted_speedup`
    (``t_target[n - 1]``: a pass on ``n`` tokens). A bisection, as the speedup grows with ``alpha``;
    ``nan`` when ``alpha = 1`` falls short."""
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


def best_trees(
    rates: dict[str, Any], costs: dict[str, Any], *, max_tokens: int | None = None
) -> list[dict[str, Any]]:
    """Every chain tree the rates of :func:`~specdec_lib.bench.tree_rates` cover, ranked by the
    predicted speedup of :func:`~specdec_lib.costs.tree_prediction`. ``max_tokens`` caps the drafts
    in the target's pass (default: what ``costs`` measured)."""
    K_max, W = np.asarray(rates["gamma"]).shape
    cap = len(costs["t_target_s"]) - 1 if max_tokens is None else max_tokens
    out = []
    for K in range(1, K_max + 1):
        for widths in itertools.product(range(1, W + 1), repeat=K):
            n = drafted_tokens(K, widths)
            if n > cap:
                continue
            E, cost = tree_prediction(rates, K, widths, costs)
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


def rank_rates(rates: dict[str, Any]) -> list[list[float]]:
    """The rates of :func:`~specdec_lib.bench.tree_rates` by rank for :func:`best_tree`:
    ``m[d][i]``, the probability that the ``(i+1)``-th candidate at depth ``d + 1`` is accepted once
    the step reaches it: ``beta`` for the first, ``(1 - beta) * (gamma[w] - gamma[w - 1])`` else."""
    beta = np.nan_to_num(np.asarray(rates["beta"], dtype=float))
    gamma = np.nan_to_num(np.asarray(rates["gamma"], dtype=float))
    alt = (1 - beta)[:, None] * np.diff(gamma, axis=1)
    return np.concatenate([beta[:, None], alt], axis=1).tolist()


def tree_ceiling(
    rates: dict[str, Any], costs: dict[str, Any], *, max_nodes: int | None = None
) -> list[dict[str, Any]]:
    """How fast a tree of ``n`` drafted nodes could be, ``n = 1..max_nodes`` (default: what
    ``costs`` measured): :func:`best_tree` at :func:`rank_rates` over one target pass on ``n + 1``
    tokens and one draft pass per depth, at the best depth limit. Optimistic: every node is taken to
    accept at the chain's rates at its depth, the draft to grow a whole depth per pass, and host
    work ignored."""
    m = rank_rates(rates)
    t = costs["t_target_s"]
    cap = len(t) - 1 if max_nodes is None else positive_int(max_nodes, "max_nodes")
    if cap > len(t) - 1:
        raise ValueError(f"max_nodes: costs cover up to {len(t) - 1} drafted nodes, got {cap}")
    out = []
    for n in range(1, cap + 1):
        best = None
        for limit in range(1, n + 1):
            tree = best_tree(m, n, max_depth=limit)
            depth = max(tree["depths"])
            cost = (draft_cost(depth, costs) + t[n]) / t[0]
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
