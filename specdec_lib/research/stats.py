"""Exact output laws and the statistical tests that check speculative sampling is lossless.

Exact laws are computed from :func:`specdec_lib.sampling.step_distributions`, the very numbers
:func:`~specdec_lib.sampling.verify` samples from, so an exact check tests the code that runs
(notebook 01). Notebook 02's tests live here too: samples (:func:`step_samples` runs ``verify`` on
fixed distributions), bins (:func:`bin_labels`), chi-square goodness of fit and Holm's correction;
their power is :mod:`specdec_lib.research.power`. Every distribution comes from ``scipy.stats``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy import stats as sps

from ..checks import positive_int, real
from ..lm import last_rows, model_device
from ..sampling import (
    Correction,
    Verdict,
    Warp,
    residual_correction,
    sample,
    step_distributions,
    verify,
)
from ..trees import candidate_stage

__all__ = [
    "as_probs",
    "GofResult",
    "NothingToTest",
    "accepted_count_law",
    "bin_labels",
    "chisquare_gof",
    "chisquare_law",
    "position_law",
    "exact_continuation_law",
    "exact_output_law",
    "exact_step_law",
    "holm",
    "merge_bins",
    "prototype_output_law",
    "step_samples",
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


def _as_pair(p: Any, q: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``p`` and ``q`` as float64 vectors of one size."""
    p = torch.as_tensor(p, dtype=torch.float64)
    q = torch.as_tensor(q, dtype=torch.float64)
    if p.dim() != 1 or p.shape != q.shape:
        raise ValueError(
            f"p and q must be 1-D of the same size, got {tuple(p.shape)} and {tuple(q.shape)}"
        )
    return p, q


def exact_output_law(p: Any, q: Any, correction: Correction = residual_correction) -> torch.Tensor:
    """The exact law of the token emitted at one draft position when ``x ~ q`` is verified
    against ``p``: ``P(y) = q(y) a(y) + sum_x q(x) (1 - a(x)) c_x(y)`` with ``a`` the acceptance
    probability and ``c_x`` the correction after rejecting ``x``. For the residual correction this
    is ``p`` (the theorem of notebook 01); for the prototype's it is not.

    Computed in float64 by enumerating every ``x`` in the vocabulary (``V`` up to a few thousand).
    """
    return _position_law(p, q, correction)[0]


def _position_law(p: Any, q: Any, correction: Correction) -> tuple[torch.Tensor, float]:
    """:func:`exact_output_law` and the probability of accepting the draft, ``sum_x q(x) a(x)``."""
    p, q = _as_pair(p, q)
    V = p.shape[0]
    accept, final = step_distributions(
        torch.arange(V), q.expand(V, V), p.expand(V + 1, V), correction
    )
    corrections = final[:V]  # row x: what is sampled after rejecting x
    return q * accept + (q * (1 - accept)) @ corrections, float((q * accept).sum())


def exact_tree_law(
    p_fn: Callable[[tuple[int, ...]], Any],
    q_fn: Callable[[tuple[int, ...]], Any],
    widths: Sequence[int],
    K: int,
    correction: Correction = residual_correction,
) -> dict[tuple[int, ...], float]:
    """The exact law of the first ``K + 1`` tokens when one step of a chain tree
    (:func:`~specdec_lib.trees.chain_tree`: ``K`` draft depths, ``widths[d]`` candidates at
    depth ``d + 1``) is verified by :func:`~specdec_lib.trees.verify_tree` and the tokens
    the step does not emit are drawn from the target. ``p_fn(prefix)`` and ``q_fn(prefix)`` give
    the target's and the draft's laws ``[V]`` after a tuple of tokens. For the residual correction
    the result is the target's own law of ``K + 1`` tokens, ``prod_t p(x_t | x_<t)``.

    Enumerates every ordered draw of every node's candidates (stages by
    :func:`~specdec_lib.trees.candidate_stage`, made of the two halves the decoder runs), in
    float64: tiny vocabularies only. ``widths = (w,)`` with ``K = 1`` is ``w`` candidates for one
    position; its first token's law (:func:`first_token_law`) is ``p``."""
    positive_int(K, "K", "draft depths")
    for w in widths:
        positive_int(w, "widths", "candidates at each depth")

    def law(x: Any) -> torch.Tensor:
        return torch.as_tensor(x, dtype=torch.float64)

    def add(out: dict, part: dict, weight: float) -> None:
        for seq, pr in part.items():
            out[seq] = out.get(seq, 0.0) + weight * pr

    def emit(s: tuple[int, ...], probs: torch.Tensor) -> dict:
        """A token from ``probs`` after ``s``, the rest from the target."""
        out: dict = {}
        for y in torch.nonzero(probs).view(-1).tolist():
            add(out, target_from(s + (y,)), float(probs[y]))
        return out

    def target_from(s: tuple[int, ...]) -> dict:
        return {s: 1.0} if len(s) > K else emit(s, law(p_fn(s)))

    def node(s: tuple[int, ...], d: int) -> dict:
        """The law once the path ``s`` is accepted and the step stands at depth ``d``."""
        if d > K:  # a node without children: the bonus token, then the target
            return target_from(s)
        w = widths[d - 1] if d - 1 < len(widths) else 1

        def stages(left: torch.Tensor, rest: torch.Tensor, tries: int, first: bool) -> dict:
            total = float(rest.sum())
            if tries == 0 or total <= 1e-12:  # every candidate rejected
                return emit(s, left)
            qi = rest / total
            out: dict = {}
            for x in torch.nonzero(qi).view(-1).tolist():
                a, passed = candidate_stage(left, qi, torch.tensor(x), correction)
                # the chain's token goes on down the tree; an alternative has no children
                after = node(s + (x,), d + 1) if first else target_from(s + (x,))
                add(out, after, float(qi[x] * a))
                nxt = rest.clone()
                nxt[x] = 0
                add(out, stages(passed, nxt, tries - 1, False), float(qi[x] * (1 - a)))
            return out

        return stages(law(p_fn(s)), law(q_fn(s)).clone(), w, True)

    return node((), 1)


def first_token_law(law: Mapping[tuple[int, ...], float], V: int) -> torch.Tensor:
    """The law of the first token, ``[V]`` float64, from a law over token tuples."""
    out = torch.zeros(V, dtype=torch.float64)
    for seq, pr in law.items():
        out[seq[0]] += pr
    return out


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
        law, alpha = _position_law(p[i], q[i], correction)
        rows.append(law)
        alphas.append(alpha)
    rows.append(p[K])
    reach = torch.tensor(np.r_[1.0, np.cumprod(alphas)], dtype=torch.float64)
    return reach, torch.stack(rows)


@torch.inference_mode()
def exact_continuation_law(
    target: Any, prompt_ids: Any, warp: Warp, m: int, *, min_prob: float = 0.0, batch_size: int = 64
) -> dict[tuple[int, ...], float]:
    """The target's exact law of the next ``m`` tokens after ``prompt_ids``, by enumeration.

    Each prefix is scored with a full forward pass, without a cache, so this is an independent
    reference for the cached decoders. With ``min_prob = 0`` every sequence is listed (``V ** m``
    of them: the tiny test models only). With ``min_prob > 0`` a prefix is extended only while its
    probability is at least ``min_prob``: the listed sequences keep their exact probabilities and
    the rest of the mass, ``1 - sum(law.values())``, is left unlisted (:func:`chisquare_law` pools
    it into one bin). That makes the law of a real model's next few tokens one batched pass per
    depth.
    """
    ids = torch.as_tensor(prompt_ids).view(-1).long()
    positive_int(m, "m", "tokens per continuation")
    real(min_prob, "min_prob", "a probability below which prefixes are not extended", low=0.0)
    positive_int(batch_size, "batch_size")
    V = int(target.config.vocab_size)
    if min_prob == 0 and V**m > 200_000:
        raise ValueError(f"V**m = {V**m} sequences is too many to enumerate; pass min_prob > 0")
    device = model_device(target)
    law: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(m):
        prefixes = list(law)
        new: dict[tuple[int, ...], float] = {}
        for start in range(0, len(prefixes), batch_size):
            chunk = prefixes[start : start + batch_size]
            batch = torch.stack(
                [torch.cat([ids, torch.tensor(pr, dtype=torch.long)]) for pr in chunk]
            ).to(device)
            last = last_rows(1, batch.shape[1], batch.device)
            logits = target(input_ids=batch, use_cache=False, logits_to_keep=last).logits[:, -1]
            probs = warp.probs(logits).double().cpu()
            for row, pr in enumerate(chunk):
                mass = law[pr] * probs[row]
                keep = mass >= min_prob if min_prob > 0 else mass > 0
                for tok in torch.nonzero(keep).view(-1).tolist():
                    new[pr + (tok,)] = float(mass[tok])
        law = new
    return law


def prototype_output_law(p: Any, q: Any) -> torch.Tensor:
    """The exact law of the token emitted at one position by the prototype's rule
    (:func:`~specdec_lib.sampling.prototype_correction`), in ``O(V)``.

    A draft ``x`` is rejected with probability ``(q(x) - p(x))_+``, and the prototype then samples
    ``p`` with ``x`` removed, ``p(y) [y != x] / (1 - p(x))``. Summing over ``x``, with
    ``w(x) = (q(x) - p(x))_+ / (1 - p(x))`` and ``S = sum_x w(x)``, gives
    ``P(y) = min(p(y), q(y)) + p(y) (S - w(y))``.
    :func:`exact_output_law` gives the same numbers by enumeration (``O(V^2)``, small ``V`` only);
    this form makes the prototype's bias computable on a real vocabulary (notebook 02).
    """
    p, q = _as_pair(p, q)
    # A rejection needs p(x) < q(x) <= 1, so 1 - p(x) > 0 wherever w(x) > 0.
    w = (q - p).clamp(min=0) / (1 - p).clamp(min=torch.finfo(torch.float64).tiny)
    return torch.minimum(p, q) + p * (w.sum() - w)


def accepted_count_law(alpha: Any, K: int | None = None) -> np.ndarray:
    """Law of the number ``n`` of accepted drafts in one step whose draft positions are accepted
    with probabilities ``alpha_0, ..., alpha_{K-1}`` (given the earlier ones were):
    ``P(n = i) = alpha_0 ... alpha_{i-1} (1 - alpha_i)`` for ``i < K`` and
    ``P(n = K) = alpha_0 ... alpha_{K-1}``. A scalar ``alpha`` with ``K`` means the same rate at
    every position; then the mean plus one is :func:`~specdec_lib.costs.expected_tokens_per_step`.
    """
    a = np.atleast_1d(np.asarray(alpha, dtype=float))
    if K is not None:
        positive_int(K, "K", "draft positions")
        if a.size != 1:
            raise ValueError("give either one alpha and K, or one alpha per position without K")
        a = np.full(int(K), a[0])
    if a.ndim != 1 or a.size < 1 or np.any(~np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise ValueError(f"alpha must be in [0, 1] (one value per draft position), got {alpha!r}")
    reach = np.r_[1.0, np.cumprod(a)]
    return reach * np.r_[1 - a, 1.0]


# --------------------------------------------------------------------------------------------
# Samples for the tests
# --------------------------------------------------------------------------------------------


def step_samples(
    p: Any,
    q: Any,
    n: int,
    generator: torch.Generator | None = None,
    *,
    verifier: Callable[..., Verdict] = verify,
    restrict_support: bool = True,
) -> tuple[list[np.ndarray], np.ndarray]:
    """``n`` verification steps with fixed distributions at every position, sampled.

    ``p`` is ``[K+1, V]`` (the target rows ``p_0..p_K``), ``q`` is ``[K, V]`` (the draft rows). Each
    step draws ``x_i ~ q_i`` independently and calls ``verifier(x, q, p, generator)``. Returns
    ``(emitted, accepted)``: ``emitted[i]`` holds the tokens emitted at position ``i`` (``0..K``) by
    the steps that reached it, ``accepted`` the number of accepted drafts of each step.

    For a correct rule ``emitted[i]`` are i.i.d. ``p_i`` (notebook 01, section 2.2, and
    :func:`exact_step_law`) and ``accepted`` follows :func:`accepted_count_law`. The rows need not
    come from one sequence of drafts (``verify`` cannot tell): they can be a real model's
    distributions along a fixed continuation, and ``emitted[0]`` is then the next token of a real
    speculative step. ``restrict_support`` runs the steps on the tokens where some row of ``p`` or
    ``q`` is positive and maps them back: exact (a token of probability 0 everywhere is never
    proposed, accepted or emitted), and much cheaper after top-k or top-p.
    """
    p = torch.as_tensor(p)
    q = torch.as_tensor(q)
    if q.dim() != 2 or q.shape[0] < 1 or p.shape != (q.shape[0] + 1, q.shape[1]):
        raise ValueError(
            f"p must be [K+1, V] and q [K, V] (K >= 1), got {tuple(p.shape)} and {tuple(q.shape)}"
        )
    K = q.shape[0]
    positive_int(n, "n", "verification steps sampled")
    index = torch.arange(q.shape[1])
    if restrict_support:
        index = torch.nonzero((p > 0).any(0) | (q > 0).any(0)).view(-1)
        p, q = p[:, index].contiguous(), q[:, index].contiguous()
    emitted: list[list[int]] = [[] for _ in range(K + 1)]
    accepted = np.empty(n, dtype=np.int64)
    for step in range(n):
        verdict = verifier(sample(q, generator), q, p, generator)
        for i, tok in enumerate(verdict.tokens.tolist()):
            emitted[i].append(tok)
        accepted[step] = verdict.n_accepted
    out = [index[torch.tensor(tokens, dtype=torch.long)].numpy() for tokens in emitted]
    return out, accepted


# --------------------------------------------------------------------------------------------
# Chi-square tests
# --------------------------------------------------------------------------------------------


def bin_labels(
    expected: Any, min_expected: float = 5.0, max_bins: int | None = None
) -> tuple[np.ndarray, int]:
    """How the chi-square tests group outcomes into bins: ``(labels, n_bins)``, the bin of each
    outcome.

    Outcomes are ranked by expected count, largest first (ties by index). Every outcome expecting
    at least ``min_expected`` gets a bin of its own, in that order, at most ``max_bins - 1`` of them
    if the rest must be pooled (``max_bins`` if nothing is left over); all other outcomes share one
    last bin, the pool. If the pool still expects less than ``min_expected``, the smallest single
    bins join it until it does. So every bin expects ``>= min_expected`` (unless the total does
    not).
    """
    exp = np.asarray(expected, dtype=float)
    if exp.ndim != 1 or exp.size == 0:
        raise ValueError("expected must be a non-empty 1-D array")
    real(min_expected, "min_expected", "expected count per bin", low=0.0)
    if positive_int(max_bins, "max_bins", "at least 2", optional=True) == 1:
        raise ValueError(f"max_bins must be an integer >= 2 or None, got {max_bins!r}")
    order = np.argsort(-exp, kind="stable")
    n_keep = int((exp >= min_expected).sum())  # these come first in `order`
    if max_bins is not None and n_keep > max_bins - (n_keep < exp.size):
        n_keep = max_bins - 1
    pool_sum = exp[order[n_keep:]].sum()
    while n_keep > 0 and n_keep < exp.size and pool_sum < min_expected:
        n_keep -= 1
        pool_sum += exp[order[n_keep]]
    if n_keep == exp.size - 1:  # a "pool" of one outcome is just its own bin
        n_keep = exp.size
    labels = np.empty(exp.size, dtype=np.int64)
    labels[order[:n_keep]] = np.arange(n_keep)
    labels[order[n_keep:]] = n_keep
    return labels, n_keep + (n_keep < exp.size)


def merge_bins(
    observed: Any, expected: Any, min_expected: float = 5.0, max_bins: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Merged ``(observed, expected)`` counts under :func:`bin_labels`: one entry per bin, single
    outcomes first (largest expectation first), the pooled low-expectation outcomes last.

    The classical validity condition of the chi-square approximation: every bin expects at least
    ``min_expected`` (5) counts.
    """
    obs = np.asarray(observed, dtype=float)
    exp = np.asarray(expected, dtype=float)
    if obs.shape != exp.shape or obs.ndim != 1:
        raise ValueError("observed and expected must be 1-D arrays of the same length")
    labels, n_bins = bin_labels(exp, min_expected, max_bins)
    return (
        np.bincount(labels, weights=obs, minlength=n_bins),
        np.bincount(labels, weights=exp, minlength=n_bins),
    )


class NothingToTest(ValueError):
    """A chi-square test that has nothing to test: its outcomes fall into fewer than two bins
    (a near-deterministic position, or too few samples for two bins to expect ``min_expected``).

    Raised instead of returning ``p = 1``, so that a test of nothing is never counted as a pass;
    a caller that expects it reports the test as not made."""


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


def as_probs(probs: Any) -> np.ndarray:
    """``probs`` (1-D, finite, non-negative, not all zero) as a float64 array that sums to 1."""
    probs = np.asarray(torch.as_tensor(probs, dtype=torch.float64))
    if probs.ndim != 1:
        raise ValueError("probs must be 1-D")
    if np.any(probs < 0) or not np.isfinite(probs).all() or probs.sum() <= 0:
        raise ValueError("probs must be finite, non-negative and not all zero")
    return probs / probs.sum()


def chisquare_gof(
    samples: Any = None,
    probs: Any = None,
    *,
    counts: Any = None,
    min_expected: float = 5.0,
    max_bins: int | None = None,
) -> GofResult:
    """Chi-square goodness of fit of ``samples`` (token ids) or ``counts`` against ``probs``
    (``scipy.stats.chisquare``).

    Bins follow :func:`bin_labels` on the expected counts ``N probs``: they depend on ``probs`` and
    ``N`` only, never on the data. A sample that falls where ``probs`` is zero makes the p-value 0:
    such a token should never appear.
    """
    probs = as_probs(probs)
    if counts is None:
        ids = np.asarray(torch.as_tensor(samples).view(-1), dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= len(probs)):
            raise ValueError(f"samples must be token ids in [0, {len(probs)})")
        counts = np.bincount(ids, minlength=len(probs))
    obs = np.asarray(counts, dtype=float)
    if obs.shape != probs.shape:
        raise ValueError(f"counts must have the shape of probs {probs.shape}, got {obs.shape}")
    n = int(obs.sum())
    if n == 0:
        raise ValueError("no samples")
    if np.any(obs[probs == 0] > 0):
        return GofResult(float("inf"), 0.0, 0, n, 0)
    support = probs > 0
    o, e = merge_bins(obs[support], n * probs[support], min_expected, max_bins)
    if len(o) < 2:
        raise NothingToTest(
            f"{n} samples fall into {len(o)} bin expecting >= {min_expected}: nothing to test"
        )
    res = sps.chisquare(o, e)
    return GofResult(float(res.statistic), float(res.pvalue), len(o) - 1, n, len(o))


def chisquare_law(
    counts: Mapping[Hashable, int],
    law: Mapping[Hashable, float],
    *,
    min_expected: float = 5.0,
    max_bins: int | None = None,
) -> GofResult:
    """Chi-square goodness of fit of outcomes given as ``counts`` against an exact ``law`` over
    outcomes (e.g. :func:`exact_continuation_law`), which may leave part of its mass unlisted.

    Every listed outcome is a candidate bin; the unlisted mass ``1 - sum(law)`` is one more, which
    also holds every observed outcome the law does not list. Bins then follow :func:`chisquare_gof`
    (they depend on the law and ``N`` only). Raises :class:`NothingToTest` under two bins.
    """
    keys = list(law)
    listed = np.array([law[k] for k in keys], dtype=float)
    if np.any(listed < 0) or not np.isfinite(listed).all():
        raise ValueError("law must hold finite, non-negative probabilities")
    rest = 1.0 - listed.sum()
    if rest < -1e-5:  # float32 probabilities sum to 1 only to float32 rounding
        raise ValueError(f"law must sum to at most 1, got {listed.sum():.6g}")
    n = sum(counts.values())
    obs = np.array([counts.get(k, 0) for k in keys] + [0], dtype=float)
    obs[-1] = n - obs.sum()
    probs = np.append(listed, max(rest, 0.0))
    return chisquare_gof(counts=obs, probs=probs, min_expected=min_expected, max_bins=max_bins)


def position_law(
    counts: Mapping[tuple[int, ...], int], law: Mapping[tuple[int, ...], float], j: int
) -> tuple[Counter, dict[tuple[int, ...], float]]:
    """The token at position ``j`` of sequences, projected from ``counts`` and an exact ``law`` over
    whole sequences that may leave part of its mass unlisted: ``(counts_j, law_j)`` for
    :func:`chisquare_law`.

    The outcome of a sequence is ``(z_j,)`` when the sequence is listed and "unlisted" otherwise,
    so ``law_j[(t,)]`` sums the listed sequences with ``z_j = t`` and the unlisted mass stays one
    pooled bin: an exact law of an exact projection. A joint law of several tokens spreads its
    mass over many sequences; the token at one position keeps enough mass per token for bins."""
    law_j: dict[tuple[int, ...], float] = {}
    for seq, pr in law.items():
        law_j[(seq[j],)] = law_j.get((seq[j],), 0.0) + pr
    counts_j: Counter = Counter()
    for seq, c in counts.items():
        counts_j[(seq[j],) if seq in law else ("unlisted",)] += c
    return counts_j, law_j


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (step-down; controls the family-wise error rate under any
    dependence). Rejecting where the adjusted value is ``<= alpha`` rejects nothing at all exactly
    when every raw p-value exceeds ``alpha / m``."""
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    adj = np.empty(m)
    running = 0.0
    for rank, idx in enumerate(order):
        running = max(running, (m - rank) * p[idx])
        adj[idx] = min(1.0, running)
    return adj
