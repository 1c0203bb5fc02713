import math

import numpy as np
import pytest
import torch

from specdec_lib.candidates import chain_tree, verify_tree
from specdec_lib.sampling import verify
from specdec_lib.theory import (
    best_tree,
    expected_tokens_per_step,
    optimal_K,
    predicted_speedup,
    required_alpha,
    tree_tokens_per_step,
    walltime_speedup,
)


def test_expected_tokens_closed_form():
    assert expected_tokens_per_step(0.0, 5) == 1.0
    assert expected_tokens_per_step(1.0, 5) == 6.0
    a, K = 0.7, 4
    assert math.isclose(expected_tokens_per_step(a, K), sum(a**i for i in range(K + 1)))
    np.testing.assert_allclose(expected_tokens_per_step(np.array([0.5, 1.0]), 3), [1.875, 4.0])


def test_expected_tokens_monte_carlo():
    """With q_i, p_i fixed so that every position accepts with probability alpha exactly."""
    alpha, K, n = 0.6, 4, 4000
    p = torch.tensor([[0.6, 0.4, 0.0]] * (K + 1))
    q = torch.tensor([[0.0, 0.4, 0.6]] * K)  # sum min(p, q) = 0.4 ... use p swapped
    q = torch.tensor([[0.6, 0.0, 0.4]] * K)  # sum min(p, q) = 0.6
    g = torch.Generator().manual_seed(0)
    total = 0
    for _ in range(n):
        x = torch.multinomial(q, 1, generator=g).view(-1)
        total += len(verify(x, q, p, g).tokens)
    e = expected_tokens_per_step(alpha, K)
    assert abs(total / n - e) < 4 * math.sqrt(2.0 / n)


def test_walltime_and_optimal_K():
    assert math.isclose(walltime_speedup(0.8, 4, 0.05), (1 - 0.8**5) / (0.2 * 1.2))
    assert optimal_K(0.0, 0.1) == 1
    assert optimal_K(0.9, 0.01) > 5
    assert predicted_speedup(0.5, 2, 0.1, [1.0, 1.1, 1.2]) == pytest.approx(1.75 / 1.4)


@pytest.mark.parametrize("bad", [-0.1, 1.1, float("nan")])
def test_bad_alpha(bad):
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens_per_step(bad, 3)


def test_tree_tokens_reduce_to_the_chain():
    for a, K in ((0.0, 3), (0.6, 4), (1.0, 2)):
        assert math.isclose(
            tree_tokens_per_step([a] * K, [0.0] * K), expected_tokens_per_step(a, K)
        )
    # an alternative always accepted at depth 1: one more token whenever the chain stops there
    assert math.isclose(tree_tokens_per_step([0.5], [1.0]), 0.5 * 2 + 0.5 * 2)


def test_tree_tokens_monte_carlo():
    """Steps of a chain tree (2, 2, 2) with the same p and q at every node: the mean tokens per
    step match the formula at the rates the same steps show."""
    K, n = 3, 4000
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.1, 0.2, 0.3, 0.4])
    g = torch.Generator().manual_seed(1)
    reached, chain, rejected, alt, total = np.zeros(K), np.zeros(K), np.zeros(K), np.zeros(K), 0
    for _ in range(n):
        d = torch.multinomial(q, K, replacement=True, generator=g)
        nodes, parents, laws = chain_tree(d, q.expand(K, -1), (2, 2, 2), g)
        verdict, path = verify_tree(nodes, parents, laws, p.expand(len(nodes) + 1, -1), g)
        total += len(verdict.tokens)
        on_chain = sum(1 for i, node in enumerate(path) if node == i)
        reached[: min(on_chain + 1, K)] += 1
        chain[:on_chain] += 1
        if on_chain < K:
            rejected[on_chain] += 1
            alt[on_chain] += len(path) > on_chain
    E = tree_tokens_per_step(chain / reached, alt / rejected)
    assert abs(total / n - E) < 0.03 * E


@pytest.mark.parametrize(
    "beta, gamma", [([0.5], [0.1, 0.2]), ([1.5], [0.0]), ([0.5], [float("nan")])]
)
def test_tree_tokens_bad_rates(beta, gamma):
    with pytest.raises(ValueError, match="beta|gamma"):
        tree_tokens_per_step(beta, gamma)


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
