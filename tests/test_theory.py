import math

import numpy as np
import pytest
import torch

from specdec_lib.sampling import verify
from specdec_lib.theory import (
    expected_tokens_per_step,
    optimal_K,
    predicted_speedup,
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
