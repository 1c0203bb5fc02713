"""The tree search and ceiling (``specdec_lib.research.trees``): the best tree of n nodes against
every tree by enumeration, the ranking of chain trees by the cost model, the ceiling, and the
acceptance a chain needs."""

import math

import numpy as np
import pytest

from specdec_lib.bench import tree_rates
from specdec_lib.costs import expected_tokens_per_step, step_cost, tree_tokens_per_step
from specdec_lib.research import trees
from specdec_lib.research.trees import (
    best_tree,
    best_trees,
    rank_rates,
    required_alpha,
    tree_ceiling,
)


def _closed_subtrees(ranks: int, n: int):
    """Every set of ``n`` nodes closed under taking parents, nodes named by their rank paths."""
    seen = set()

    def grow(nodes: frozenset):
        if nodes in seen:
            return
        seen.add(nodes)
        if len(nodes) == n:
            yield nodes
            return
        frontier = {(i,) for i in range(ranks)} | {p + (i,) for p in nodes for i in range(ranks)}
        for node in frontier - nodes:
            yield from grow(nodes | {node})

    yield from grow(frozenset())


@pytest.mark.parametrize("n", [1, 2, 4, 5])
def test_best_tree_is_the_best_by_enumeration(n):
    m = [[0.45, 0.2, 0.1], [0.3, 0.25, 0.05], [0.6, 0.1, 0.0]]

    def value(path):
        return math.prod(m[min(d, len(m) - 1)][i] for d, i in enumerate(path))

    best = max(sum(value(p) for p in nodes) for nodes in _closed_subtrees(3, n))
    tree = best_tree(m, n)
    assert math.isclose(tree["tokens_per_step"], 1 + best)
    assert len(tree["parents"]) == n
    for node, (parent, depth) in enumerate(zip(tree["parents"], tree["depths"], strict=True)):
        assert parent < node and depth == (1 if parent < 0 else tree["depths"][parent] + 1)


def test_best_tree_holds_the_chain_and_the_chain_tree():
    # one candidate per node: the best K-node tree is the chain, E(alpha, K)
    chain = best_tree([[0.7]], 4)
    assert chain["depths"] == [1, 2, 3, 4]
    assert math.isclose(chain["tokens_per_step"], expected_tokens_per_step(0.7, 4))
    # a chain tree (2, 2): its nodes' values sum to tree_tokens_per_step's E
    b, g = [0.5, 0.4], [0.3, 0.2]
    m = [[b[0], (1 - b[0]) * g[0]], [b[1], (1 - b[1]) * g[1]]]
    values = [b[0], m[0][1], b[0] * b[1], b[0] * m[1][1]]
    assert math.isclose(1 + sum(values), tree_tokens_per_step(b, g))


@pytest.mark.parametrize("m, n", [([], 2), ([[0.7, 0.5]], 2), ([[-0.1]], 1), ([[0.5]], -1)])
def test_best_tree_bad_arguments(m, n):
    with pytest.raises(ValueError, match="m|n"):
        best_tree(m, n)


def test_required_alpha():
    # free drafts and a flat target cost: the speedup is E(alpha, K), best at the largest K
    a = required_alpha(2.0, 0.0, [1.0] * 5)
    assert math.isclose(expected_tokens_per_step(a, 4), 2.0, rel_tol=1e-4)
    assert math.isnan(required_alpha(6.0, 0.0, [1.0] * 5))  # K <= 4: at most 5 tokens a step
    with pytest.raises(ValueError, match="speedup"):
        required_alpha(0.0, 0.0, [1.0] * 5)
    with pytest.raises(ValueError, match="t_target"):
        required_alpha(2.0, 0.0, [1.0])


# Steps of a tree [3, 3] at K = 2: (drafted, accepted, emitted) and the alternative kept.
STEPS = [[2, 2, []], [2, 1, []], [2, 1, []], [2, 0, []], [2, 2, []], [2, 0, []]]
ALT_INDEX = [0, 0, 2, 0, 1, 1]
COSTS = {"t_draft_s": 0.1, "t_target_s": [1.0, 1.0, 1.1, 1.2, 1.3, 1.5, 2.0]}


def test_best_trees_ranks_every_chain_tree_by_the_cost_model():
    r = tree_rates([{"steps": STEPS, "alt_index": ALT_INDEX}], K=2, width=3)
    ranked = best_trees(r, COSTS)
    assert len(ranked) == 3 + 9  # K = 1: 3 widths; K = 2: 3 x 3
    speedups = [t["predicted_speedup"] for t in ranked]
    assert speedups == sorted(speedups, reverse=True)
    top = ranked[0]
    assert math.isclose(
        top["predicted_speedup"],
        top["tokens_per_step"] / step_cost(top["K"], COSTS, tree=top["tree"]),
    )
    assert all(t["drafted"] <= 3 for t in best_trees(r, COSTS, max_tokens=3))


def test_tree_ceiling_is_the_best_tree_over_its_costs():
    r = tree_rates([{"steps": STEPS, "alt_index": ALT_INDEX}], K=2, width=3)
    m = rank_rates(r)
    for d in range(2):  # the ranks add up to the depth's acceptance with every candidate
        assert m[d][0] == r["beta"][d]
        assert math.isclose(sum(m[d]), r["beta"][d] + (1 - r["beta"][d]) * r["gamma"][d][-1])
    ceiling = tree_ceiling(r, COSTS)
    assert [c["nodes"] for c in ceiling] == [1, 2, 3, 4, 5, 6]
    for c in ceiling:
        assert len(c["parents"]) == c["nodes"]
        assert math.isclose(c["predicted_speedup"], c["tokens_per_step"] / c["step_cost"])
    # no chain tree of the same size yields more tokens per step
    for t in best_trees(r, COSTS):
        assert ceiling[t["drafted"] - 1]["tokens_per_step"] >= t["tokens_per_step"] - 1e-12
    assert len(tree_ceiling(r, COSTS, max_nodes=2)) == 2
    with pytest.raises(ValueError, match="max_nodes"):
        tree_ceiling(r, COSTS, max_nodes=7)


def test_monotone_costs():
    noisy = {"t_draft_s": 0.1, "t_target_s": [1.0, 1.2, 1.1, 1.3]}
    smooth = trees.monotone_costs(noisy)
    np.testing.assert_allclose(smooth["t_target_s"], [1.0, 1.15, 1.15, 1.3])
    assert smooth["t_draft_s"] == 0.1
    costs = {"t_draft_s": 0.1, "t_target_s": [1.0, 1.0, 1.1, 1.2, 1.3, 1.5, 2.0]}
    assert trees.monotone_costs(costs) == costs
