import numpy as np
import pytest
import torch

from specdec_lib.stats import chisquare_gof, holm, homogeneity_test, merge_bins, power_gof


def test_merge_bins_reaches_min_expected():
    obs = np.array([10, 1, 0, 2, 30, 1])
    exp = np.array([12, 0.5, 1.0, 2.5, 27, 1.0])
    o, e = merge_bins(obs, exp)
    assert (e >= 5).all() and o.sum() == obs.sum() and np.isclose(e.sum(), exp.sum())


def test_gof_accepts_and_rejects():
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.2, 0.2, 0.05, 0.05])
    assert chisquare_gof(probs=p, counts=rng.multinomial(5000, p)).pvalue > 1e-3
    q = np.array([0.45, 0.25, 0.2, 0.05, 0.05])
    assert chisquare_gof(probs=p, counts=rng.multinomial(20000, q)).pvalue < 1e-6
    # a token of probability 0 appearing is an immediate failure
    assert chisquare_gof(torch.tensor([0, 1, 2]), [0.5, 0.5, 0.0]).pvalue == 0.0


def test_homogeneity():
    rng = np.random.default_rng(1)
    a = [tuple(x) for x in rng.integers(0, 4, size=(3000, 2))]
    b = [tuple(x) for x in rng.integers(0, 4, size=(3000, 2))]
    assert homogeneity_test(a, b).pvalue > 1e-3
    c = [tuple(x) for x in rng.choice(4, size=(3000, 2), p=[0.4, 0.2, 0.2, 0.2])]
    assert homogeneity_test(a, c).pvalue < 1e-6


def test_holm():
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])


def test_power_increases_with_n():
    p = np.array([0.4, 0.3, 0.2, 0.1])
    q = np.array([0.35, 0.3, 0.2, 0.15])
    assert power_gof(p, q, 200, n_sim=200) < power_gof(p, q, 3000, n_sim=200)
    assert power_gof(p, p, 1000, n_sim=400, level=0.05) == pytest.approx(0.05, abs=0.04)
