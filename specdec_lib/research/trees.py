"""The search for a draft tree's shape, and how far any tree could go (notebook 06, sections 5-6).

From a run with a wide chain tree (``bench --tree 8 8``), :func:`specdec_lib.bench.tree_rates`
measures the acceptance at every depth for every narrower chain tree; :func:`best_trees` ranks
those trees by the cost model (:mod:`specdec_lib.costs`), which is how the benchmark's default
preset was chosen. :func:`rank_rates` turns the same rates into the probability that each
candidate rank is the one accepted, and :func:`best_tree` builds the best tree of ``n`` nodes at
those rates (best-first, as EAGLE-2 grows its trees): :func:`tree_ceiling`, over measured pass
costs, is how fast any tree could be with this draft. :func:`required_alpha` is the acceptance a
chain needs for a given speedup on the same costs.
"""

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
    trees of :func:`~specdec_lib.costs.tree_tokens_per_step` are the trees whose alternatives are
    leaves.

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
    which a chain reaches ``speedup`` at its best ``K``, by
    :func:`~specdec_lib.costs.predicted_speedup` with the measured pass costs (``t_target[n - 1]``:
    a target pass on ``n`` tokens; ``K`` up to ``len(t_target) - 1``). The predicted speedup grows
    with ``alpha``, so this is a bisection; ``nan`` when even ``alpha = 1`` falls short."""
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
    """Every chain tree the rates of :func:`~specdec_lib.bench.tree_rates` cover (``K`` up to
    theirs, up to their width at each depth), ranked by the cost model's predicted speedup:
    expected tokens per step over the step's cost (:func:`~specdec_lib.costs.tree_prediction`).
    ``max_tokens`` caps the drafts in the target's pass (default: what ``costs`` measured)."""
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
    """The rates of :func:`~specdec_lib.bench.tree_rates` by candidate rank: ``m[d][i]``, the
    probability that the ``(i+1)``-th candidate at depth ``d + 1`` (``i = 0``: the chain's token)
    is the one accepted once the step reaches that depth, ``beta`` for the first and
    ``(1 - beta) * (gamma[w] - gamma[w - 1])`` for the others: the input of :func:`best_tree`."""
    beta = np.nan_to_num(np.asarray(rates["beta"], dtype=float))
    gamma = np.nan_to_num(np.asarray(rates["gamma"], dtype=float))
    alt = (1 - beta)[:, None] * np.diff(gamma, axis=1)
    return np.concatenate([beta[:, None], alt], axis=1).tolist()


def tree_ceiling(
    rates: dict[str, Any], costs: dict[str, Any], *, max_nodes: int | None = None
) -> list[dict[str, Any]]:
    """How fast a tree of ``n`` drafted nodes could be, for ``n = 1..max_nodes`` (default: what
    ``costs`` measured): the best ``n``-node tree of :func:`best_tree` at the rank rates of
    :func:`rank_rates`, over one target pass on ``n + 1`` tokens and the draft's proposal of
    one token per depth (:func:`~specdec_lib.costs.draft_cost`), at
    the depth limit that gives the best ratio. A ceiling, optimistic on three counts: every node's
    candidates are taken to be accepted at the rates the chain shows at its depth (the deepest
    measured depth's rates serve deeper ones), the draft is taken to grow a whole depth of the
    tree for the cost of one chain pass, and the host's work per node is left out."""
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
