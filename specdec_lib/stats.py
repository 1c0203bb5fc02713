"""Exact output laws and the statistical tests that check speculative sampling is lossless.

Exact laws are computed from :func:`specdec_lib.sampling.step_distributions`, the very numbers
:func:`~specdec_lib.sampling.verify` samples from, so an exact check tests the code that runs
(notebook 01). The chi-square machinery (notebook 02) uses ``scipy.stats`` for every distribution.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy import stats as sps

from .sampling import Correction, Warp, residual_correction, step_distributions

__all__ = [
    "GofResult",
    "HomogeneityResult",
    "chisquare_gof",
    "exact_continuation_law",
    "exact_output_law",
    "exact_step_law",
    "holm",
    "homogeneity_test",
    "merge_bins",
    "power_gof",
    "tv",
]


def tv(p: Any, q: Any) -> float:
    """Total-variation distance between two distributions (arrays or tensors)."""
    p = np.asarray(torch.as_tensor(p, dtype=torch.float64))
    q = np.asarray(torch.as_tensor(q, dtype=torch.float64))
    return 0.5 * float(np.abs(p - q).sum())


# --------------------------------------------------------------------------------------------
# Exact laws
# --------------------------------------------------------------------------------------------


def exact_output_law(p: Any, q: Any, correction: Correction = residual_correction) -> torch.Tensor:
    """The exact law of the token emitted at one draft position when ``x ~ q`` is verified
    against ``p``: ``P(y) = q(y) a(y) + sum_x q(x) (1 - a(x)) c_x(y)`` with ``a`` the acceptance
    probability and ``c_x`` the correction after rejecting ``x``. For the residual correction this
    is ``p`` (the theorem of notebook 01); for the prototype's it is not.

    Computed in float64 by enumerating every ``x`` in the vocabulary (``V`` up to a few thousand).
    """
    p = torch.as_tensor(p, dtype=torch.float64)
    q = torch.as_tensor(q, dtype=torch.float64)
    if p.dim() != 1 or p.shape != q.shape:
        raise ValueError(
            f"p and q must be 1-D of the same size, got {tuple(p.shape)} and {tuple(q.shape)}"
        )
    V = p.shape[0]
    xs = torch.arange(V)
    accept, final = step_distributions(xs, q.expand(V, V), p.expand(V + 1, V), correction)
    corrections = final[:V]  # row x: what is sampled after rejecting x
    return q * accept + (q * (1 - accept)) @ corrections


def exact_step_law(
    draft_dists: Any, target_dists: Any, correction: Correction = residual_correction
):
    """Exact laws of one verification step with position-wise fixed distributions.

    ``draft_dists`` ``[K, V]`` (``q_i``), ``target_dists`` ``[K+1, V]`` (``p_i``). Returns
    ``(reach [K+1], emitted [K+1, V])``: ``reach[i]`` the probability that the step gets to
    position ``i`` (all of ``0..i-1`` accepted), and ``emitted[i]`` the law of the token emitted at
    position ``i`` given that it is reached — which is ``p_i`` for a correct rule.
    """
    q = torch.as_tensor(draft_dists, dtype=torch.float64)
    p = torch.as_tensor(target_dists, dtype=torch.float64)
    K = q.shape[0]
    if p.shape != (K + 1, q.shape[1]):
        raise ValueError(
            f"target_dists must be [K+1, V] = [{K + 1}, {q.shape[1]}], got {tuple(p.shape)}"
        )
    rows, alphas = [], []
    for i in range(K):
        rows.append(exact_output_law(p[i], q[i], correction))
        # probability of accepting at i: sum_x q(x) a(x)
        xs = torch.arange(q.shape[1])
        a, _ = step_distributions(
            xs, q[i].expand(len(xs), -1), p[i].expand(len(xs) + 1, -1), correction
        )
        alphas.append(float((q[i] * a).sum()))
    rows.append(p[K])
    reach = torch.tensor([float(np.prod(alphas[:i])) for i in range(K + 1)], dtype=torch.float64)
    return reach, torch.stack(rows)


@torch.inference_mode()
def exact_continuation_law(
    target: Any, prompt_ids: Any, warp: Warp, m: int
) -> dict[tuple[int, ...], float]:
    """The target's exact law of the next ``m`` tokens after ``prompt_ids``, by enumeration.

    Only for small vocabularies (``V ** m`` sequences; the tiny test models). Each prefix is
    scored with a full forward pass, without a cache, so this is an independent reference for the
    cached decoders.
    """
    ids = torch.as_tensor(prompt_ids).view(-1).long()
    V = int(target.config.vocab_size)
    if V**m > 200_000:
        raise ValueError(f"V**m = {V**m} sequences is too many to enumerate")
    law: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(m):
        prefixes = list(law)
        batch = torch.stack(
            [torch.cat([ids, torch.tensor(pr, dtype=torch.long)]) for pr in prefixes]
        )
        logits = target(input_ids=batch, use_cache=False).logits[:, -1]
        probs = warp.probs(logits).double()
        new: dict[tuple[int, ...], float] = {}
        for row, pr in enumerate(prefixes):
            for tok in torch.nonzero(probs[row]).view(-1).tolist():
                new[pr + (tok,)] = law[pr] * float(probs[row, tok])
        law = new
    return law


# --------------------------------------------------------------------------------------------
# Chi-square tests
# --------------------------------------------------------------------------------------------


def merge_bins(
    observed: Any, expected: Any, min_expected: float = 5.0
) -> tuple[np.ndarray, np.ndarray]:
    """Pool the bins of smallest expectation into one until every bin expects >= ``min_expected``.

    The classical validity condition of the chi-square approximation. Returns the merged
    ``(observed, expected)``; the pooled bin, if any, is last.
    """
    obs = np.asarray(observed, dtype=float)
    exp = np.asarray(expected, dtype=float)
    if obs.shape != exp.shape or obs.ndim != 1:
        raise ValueError("observed and expected must be 1-D arrays of the same length")
    order = np.argsort(exp, kind="stable")
    cum = np.cumsum(exp[order])
    # Smallest number of low bins to pool so that the pool itself reaches min_expected.
    n_pool = (
        int(np.searchsorted(cum, min_expected, side="left")) + 1 if exp.min() < min_expected else 0
    )
    n_pool = min(n_pool, len(exp))
    keep = np.sort(order[n_pool:])
    pooled = order[:n_pool]
    obs_m = list(obs[keep])
    exp_m = list(exp[keep])
    if n_pool:
        obs_m.append(obs[pooled].sum())
        exp_m.append(exp[pooled].sum())
    obs_m, exp_m = np.array(obs_m), np.array(exp_m)
    # If the pool still falls short (all mass tiny), fold it into the smallest kept bin.
    if n_pool and len(exp_m) > 1 and exp_m[-1] < min_expected:
        j = int(np.argmin(exp_m[:-1]))
        obs_m[j] += obs_m[-1]
        exp_m[j] += exp_m[-1]
        obs_m, exp_m = obs_m[:-1], exp_m[:-1]
    return obs_m, exp_m


@dataclass(frozen=True)
class GofResult:
    """A chi-square goodness-of-fit test of samples against an exact law."""

    statistic: float
    pvalue: float
    dof: int
    n: int
    n_bins: int

    def __str__(self) -> str:
        return f"chi2={self.statistic:.1f}, dof={self.dof}, N={self.n}, p={self.pvalue:.3g}"


def _counts(samples: Any, V: int) -> np.ndarray:
    s = np.asarray(torch.as_tensor(samples).view(-1), dtype=np.int64)
    if s.size and (s.min() < 0 or s.max() >= V):
        raise ValueError(f"samples must be token ids in [0, {V})")
    return np.bincount(s, minlength=V).astype(float)


def chisquare_gof(
    samples: Any = None, probs: Any = None, *, counts: Any = None, min_expected: float = 5.0
) -> GofResult:
    """Chi-square goodness of fit of ``samples`` (token ids) or ``counts`` against ``probs``.

    Bins with expectation below ``min_expected`` are merged (:func:`merge_bins`). A sample that
    falls where ``probs`` is zero makes the p-value 0: such a token should never appear.
    """
    probs = np.asarray(torch.as_tensor(probs, dtype=torch.float64))
    if probs.ndim != 1:
        raise ValueError("probs must be 1-D")
    probs = probs / probs.sum()
    obs = _counts(samples, len(probs)) if counts is None else np.asarray(counts, dtype=float)
    n = int(obs.sum())
    if n == 0:
        raise ValueError("no samples")
    if np.any(obs[probs == 0] > 0):
        return GofResult(float("inf"), 0.0, 0, n, 0)
    support = probs > 0
    o, e = merge_bins(obs[support], n * probs[support], min_expected)
    if len(o) < 2:
        return GofResult(0.0, 1.0, 0, n, len(o))
    res = sps.chisquare(o, e)
    return GofResult(float(res.statistic), float(res.pvalue), len(o) - 1, n, len(o))


@dataclass(frozen=True)
class HomogeneityResult:
    """A chi-square test that two samples of sequences come from one law."""

    statistic: float
    pvalue: float
    dof: int
    n_a: int
    n_b: int
    n_bins: int
    table: np.ndarray

    def __str__(self) -> str:
        return f"chi2={self.statistic:.1f}, dof={self.dof}, N={self.n_a}+{self.n_b}, p={self.pvalue:.3g}"


def homogeneity_test(
    samples_a: Iterable[Hashable],
    samples_b: Iterable[Hashable],
    *,
    max_bins: int = 50,
    min_expected: float = 5.0,
) -> HomogeneityResult:
    """Chi-square homogeneity test (``scipy.stats.chi2_contingency``) of two samples of outcomes
    (e.g. tuples of the first m tokens): the most frequent outcomes, pooled over both samples, get a
    bin each (at most ``max_bins``, each with expected count >= ``min_expected`` in both rows),
    everything else goes to one "other" bin."""
    a = [tuple(x) if isinstance(x, (list, np.ndarray)) else x for x in samples_a]
    b = [tuple(x) if isinstance(x, (list, np.ndarray)) else x for x in samples_b]
    if not a or not b:
        raise ValueError("both samples must be non-empty")
    ca, cb = Counter(a), Counter(b)
    pooled = (ca + cb).most_common()
    n_a, n_b = len(a), len(b)
    frac_small = min(n_a, n_b) / (n_a + n_b)
    bins = [k for k, c in pooled if c * frac_small >= min_expected][:max_bins]
    table = [[ca[k] for k in bins], [cb[k] for k in bins]]
    other_a, other_b = n_a - sum(table[0]), n_b - sum(table[1])
    if other_a + other_b > 0:
        table[0].append(other_a)
        table[1].append(other_b)
    t = np.array(table, dtype=float)
    if t.shape[1] < 2:
        return HomogeneityResult(0.0, 1.0, 0, n_a, n_b, t.shape[1], t)
    res = sps.chi2_contingency(t, correction=False)
    return HomogeneityResult(
        float(res.statistic), float(res.pvalue), int(res.dof), n_a, n_b, t.shape[1], t
    )


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (step-down; controls the family-wise error rate)."""
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    order = np.argsort(p)
    adj = np.empty(m)
    running = 0.0
    for rank, idx in enumerate(order):
        running = max(running, (m - rank) * p[idx])
        adj[idx] = min(1.0, running)
    return adj


def power_gof(
    p_null: Any,
    p_alt: Any,
    n: int,
    *,
    level: float = 0.01,
    n_sim: int = 500,
    seed: int = 0,
    min_expected: float = 5.0,
) -> float:
    """Probability that :func:`chisquare_gof` at ``level`` rejects ``p_null`` when ``n`` samples
    come from ``p_alt``, estimated by ``n_sim`` simulated multinomial samples."""
    p0 = np.asarray(torch.as_tensor(p_null, dtype=torch.float64))
    p1 = np.asarray(torch.as_tensor(p_alt, dtype=torch.float64))
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, p1 / p1.sum(), size=n_sim)
    rejections = sum(
        chisquare_gof(probs=p0, counts=c, min_expected=min_expected).pvalue < level for c in draws
    )
    return rejections / n_sim


def enumerate_sequences(V: int, m: int):
    """All ``V ** m`` token sequences of length ``m`` (for exact-law tables)."""
    return itertools.product(range(V), repeat=m)
