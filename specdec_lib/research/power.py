"""The power of the chi-square tests of :mod:`specdec_lib.research.stats`: what bias of the output
law a test with ``n`` samples finds (notebook 02)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from scipy import optimize
from scipy import stats as sps

from .stats import as_probs, bin_labels, chisquare_gof, tv

__all__ = ["detectable_tv", "least_favourable", "power_gof", "power_gof_ncx2", "toward"]


def toward(p: Any, r: Any, tv_target: float) -> np.ndarray:
    """A biased law at total-variation distance ``tv_target`` from ``p``, in the direction of ``r``:
    ``(1 - eps) p + eps r`` with ``eps = tv_target / TV(p, r)`` (which must be ``<= 1``)."""
    p = np.asarray(torch.as_tensor(p, dtype=torch.float64))
    r = np.asarray(torch.as_tensor(r, dtype=torch.float64))
    d = tv(p, r)
    if tv_target < 0 or d == 0 or tv_target > d * (1 + 1e-12):
        raise ValueError(f"tv_target must be in [0, TV(p, r) = {d:.4g}], got {tv_target!r}")
    eps = min(1.0, tv_target / d)
    return (1 - eps) * p + eps * r


def least_favourable(
    p_null: Any,
    n: int,
    tv_target: float,
    *,
    min_expected: float = 5.0,
    max_bins: int | None = None,
) -> np.ndarray:
    """The bias of total variation ``tv_target`` hardest for :func:`chisquare_gof` with ``n``
    samples to see: the test's bins split into two halves of nearly equal probability, one half's
    outcomes gaining and the other's losing in proportion to their probability. Its noncentrality is
    near the minimum ``4 n tv^2`` (:func:`detectable_tv`)."""
    p0 = as_probs(p_null)
    support = p0 > 0
    labels, n_bins = bin_labels(n * p0[support], min_expected, max_bins)
    pi = np.bincount(labels, weights=p0[support], minlength=n_bins)
    half = np.zeros(n_bins, dtype=bool)
    mass_a = mass_b = 0.0
    for b in np.argsort(-pi, kind="stable"):  # greedy balance, largest bins first
        if mass_a <= mass_b:
            half[b], mass_a = True, mass_a + pi[b]
        else:
            mass_b += pi[b]
    if tv_target < 0 or tv_target > min(mass_a, mass_b):
        raise ValueError(f"tv_target must be in [0, {min(mass_a, mass_b):.4g}], got {tv_target!r}")
    factor = np.where(half, 1 + tv_target / mass_a, 1 - tv_target / mass_b)
    alt = p0.copy()
    alt[support] = p0[support] * factor[labels]
    return alt


def power_gof_ncx2(
    p_null: Any,
    p_alt: Any,
    n: int,
    *,
    level: float = 0.01,
    min_expected: float = 5.0,
    max_bins: int | None = None,
) -> float:
    """Approximate power of :func:`chisquare_gof` at ``level`` with ``n`` samples from ``p_alt``: on
    the bins fixed by ``p_null`` and ``n`` the statistic is noncentral chi-square with
    ``dof = bins - 1`` and ``lambda = n sum_b (pi1_b - pi0_b)^2 / pi0_b``; mass of ``p_alt`` where
    ``p_null`` is zero rejects whenever a sample lands there. :func:`power_gof` checks it."""
    p0 = as_probs(p_null)
    p1 = as_probs(p_alt)
    if p0.shape != p1.shape:
        raise ValueError("p_null and p_alt must have the same shape")
    support = p0 > 0
    impossible = float(p1[~support].sum())
    p0s = p0[support]
    p1s = p1[support] / max(1e-300, 1 - impossible)
    labels, n_bins = bin_labels(n * p0s, min_expected, max_bins)
    if n_bins < 2:
        chi_power = 0.0
    else:
        pi0 = np.bincount(labels, weights=p0s, minlength=n_bins)
        pi1 = np.bincount(labels, weights=p1s, minlength=n_bins)
        lam = n * float(((pi1 - pi0) ** 2 / pi0).sum())
        dof = n_bins - 1
        chi_power = float(sps.ncx2.sf(sps.chi2.isf(level, dof), dof, lam))
    return 1 - (1 - impossible) ** n * (1 - chi_power)


def power_gof(
    p_null: Any,
    p_alt: Any,
    n: int,
    *,
    level: float = 0.01,
    n_sim: int = 500,
    seed: int = 0,
    min_expected: float = 5.0,
    max_bins: int | None = None,
) -> float:
    """Probability that :func:`chisquare_gof` at ``level`` rejects ``p_null`` when ``n`` samples
    come from ``p_alt``, estimated from ``n_sim`` simulated multinomial samples (seeded)."""
    p0 = as_probs(p_null)
    p1 = as_probs(p_alt)
    rng = np.random.default_rng(seed)
    rejections = 0
    chunk = max(1, min(n_sim, 2_000_000 // max(1, len(p1))))  # bounded memory for large V
    done = 0
    while done < n_sim:
        size = min(chunk, n_sim - done)
        for c in rng.multinomial(n, p1, size=size):
            res = chisquare_gof(probs=p0, counts=c, min_expected=min_expected, max_bins=max_bins)
            rejections += res.pvalue < level
        done += size
    return rejections / n_sim


def detectable_tv(n: float, n_bins: int, *, level: float = 0.01, power: float = 0.9) -> float:
    """The smallest total variation between binned laws that a chi-square test on ``n_bins`` bins at
    ``level`` detects with probability ``>= power`` in any direction: by Cauchy-Schwarz
    ``sum_b (pi1_b - pi0_b)^2 / pi0_b >= 4 TV^2``, so the noncentrality is at least ``4 n TV^2``. A
    bias that moves mass only inside the pooled bin is invisible and not covered."""
    if n <= 0 or n_bins < 2:
        return float("nan")
    dof = n_bins - 1
    crit = sps.chi2.isf(level, dof)

    def gap(lam: float) -> float:
        return float(sps.ncx2.sf(crit, dof, lam)) - power

    hi = 1.0
    while gap(hi) < 0:
        hi *= 2
    lam = optimize.brentq(gap, 0.0, hi, xtol=1e-6)
    return math.sqrt(lam / (4 * n))
