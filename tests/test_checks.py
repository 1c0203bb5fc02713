"""The argument checks: each names the argument, says what is allowed, and passes good values on."""

import math

import numpy as np
import pytest

from specdec_lib.checks import non_negative_int, one_of, positive_int, probability, real


def test_positive_int():
    assert positive_int(3, "K") == 3 and positive_int(np.int64(2), "K") == 2
    assert positive_int(None, "top_k", optional=True) is None
    for bad in (0, -1, 1.0, True, "2", None):
        with pytest.raises(ValueError, match=r"^K must be a positive integer \(draft tokens"):
            positive_int(bad, "K", "draft tokens per step")


def test_non_negative_int():
    assert non_negative_int(0, "seed") == 0
    for bad in (-1, 0.5, False):
        with pytest.raises(ValueError, match="seed must be a non-negative integer"):
            non_negative_int(bad, "seed")


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf, "1", True, None])
def test_real_bounds(bad):
    with pytest.raises(ValueError, match=r"temperature must be a finite number in \[0, inf\)"):
        real(bad, "temperature", low=0.0)


def test_probability_open_and_closed():
    assert probability(1.0, "top_p") == 1.0 and probability(None, "p", optional=True) is None
    with pytest.raises(ValueError, match=r"in \(0, 1\)"):
        probability(1.0, "threshold", one=False)
    with pytest.raises(ValueError, match=r"top_p must be a finite number in \(0, 1\]"):
        probability(0.0, "top_p")


def test_one_of():
    assert one_of("a", "x", ("a", "b")) == "a"
    with pytest.raises(ValueError, match="x must be one of 'a', 'b', got 'c'"):
        one_of("c", "x", ("a", "b"))
