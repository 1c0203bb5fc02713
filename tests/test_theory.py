import math

import numpy as np
import pytest
import torch

from specdec_lib.candidates import chain_tree, verify_tree
from specdec_lib.sampling import verify
from specdec_lib.theory import (
    expected_tokens_per_step,
    optimal_K,
    predicted_speedup,
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
