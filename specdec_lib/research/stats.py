"""Exact output laws of speculative sampling and the statistical tests that check it is lossless.

Exact laws come from :func:`specdec_lib.sampling.step_distributions`, the numbers
:func:`~specdec_lib.sampling.verify` samples from; the tests' power is in
:mod:`specdec_lib.research.power`."""

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


# Exact laws


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
    """The exact law of the token emitted at one draft position when ``x ~ q`` is verified against
    ``p``: ``P(y) = q(y) a(y) + sum_x q(x) (1 - a(x)) c_x(y)``, ``a`` the acceptance probability and
    ``c_x`` the correction after rejecting ``x``; ``p`` itself for the residual correction. Float64,
    enumerating every ``x`` (``V`` up to a few thousand)."""
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
    """The exact law of the first ``K + 1`` tokens when one step of a chain tree (``K`` draft
    depths, ``widths[d]`` candidates at depth ``d + 1``) is verified by
    :func:`~specdec_lib.trees.verify_tree` and the rest is drawn from the target. ``p_fn(prefix)``
    and ``q_fn(prefix)`` give the target's and the draft's laws ``[V]`` after a token tuple. For the
    residual correction this is ``prod_t p(x_t | x_<t)``. Enumerates every ordered draw of
    candidates in float64: tiny vocabularies only."""
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
    """Exact laws of one verification step with fixed draft rows ``[K, V]`` and target rows
    ``[K+1, V]``: ``(reach [K+1], emitted [K+1, V])``, ``reach[i]`` the probability that position
    ``i`` is reached and ``emitted[i]`` its token's law once reached (``p_i`` for a correct rule).
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
    """The target's exact law of the next ``m`` tokens after ``prompt_ids``, by enumeration with
    uncached full passes (independent of the decoders' caches). ``min_prob = 0`` lists all
    ``V ** m`` sequences; ``min_prob > 0`` extends only prefixes of probability ``>= min_prob`` and
    leaves the rest of the mass unlisted (:func:`chisquare_law` pools it)."""
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
    """The exact law of the token emitted at one position by
    :func:`~specdec_lib.sampling.prototype_correction` in ``O(V)`` (:func:`exact_output_law`:
    ``O(V^2)``): with ``w(x) = (q(x) - p(x))_+ / (1 - p(x))`` and ``S = sum_x w(x)``,
    ``P(y) = min(p(y), q(y)) + p(y) (S - w(y))``."""
    p, q = _as_pair(p, q)
    # A rejection needs p(x) < q(x) <= 1, so 1 - p(x) > 0 wherever w(x) > 0.
    w = (q - p).clamp(min=0) / (1 - p).clamp(min=torch.finfo(torch.float64).tiny)
    return torch.minimum(p, q) + p * (w.sum() - w)


def accepted_count_law(alpha: Any, K: int | None = None) -> np.ndarray:
    """Law of the accepted-draft count ``n`` when position ``i`` is accepted with probability
    ``alpha_i`` given the earlier ones: ``P(n = i) = alpha_0 ... alpha_{i-1} (1 - alpha_i)`` for
    ``i < K``, ``P(n = K) = alpha_0 ... alpha_{K-1}``. A scalar ``alpha`` with ``K``: one rate
    everywhere."""
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


# Samples for the tests


def step_samples(
    p: Any,
    q: Any,
    n: int,
    generator: torch.Generator | None = None,
    *,
    verifier: Callable[..., Verdict] = verify,
    restrict_support: bool = True,
) -> tuple[list[np.ndarray], np.ndarray]:
    """``n`` sampled verification steps with fixed rows: ``p`` ``[K+1, V]`` (target), ``q``
    ``[K, V]`` (draft); each step draws ``x_i ~ q_i`` and calls ``verifier(x, q, p, generator)``.
    Returns ``(emitted, accepted)``: ``emitted[i]`` the tokens emitted at position ``i`` by the
    steps reaching it (i.i.d. ``p_i`` for a correct rule), ``accepted`` each step's accepted count
    (:func:`accepted_count_law`). ``restrict_support`` runs on the tokens where some row is positive
    and maps them back: exact, and cheaper after top-k or top-p."""
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


# Chi-square tests


def bin_labels(
    expected: Any, min_expected: float = 5.0, max_bins: int | None = None
) -> tuple[np.ndarray, int]:
    """How the chi-square tests bin outcomes: ``(labels, n_bins)``, the bin of each outcome.
    Outcomes ranked by expected count (ties by index) get a bin each while they expect
    ``>= min_expected``, at most ``max_bins - 1`` (``max_bins`` if none is left over); the rest
    share one last bin, the pool. While the pool expects less than ``min_expected``, the smallest
    single bins join it, so every bin expects ``>= min_expected`` unless the total does not."""
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
    """Merged ``(observed, expected)``, one entry per bin of :func:`bin_labels` (pool last)."""
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
    """A chi-square test whose outcomes fall into fewer than two bins. Raised instead of returning
    ``p = 1``, so that a test of nothing never counts as a pass."""


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
    """Chi-square goodness of fit of ``samples`` (token ids) or ``counts``; the null: i.i.d. draws
    from ``probs``. Bins: :func:`bin_labels` on ``N probs`` (never on the data). A sample where
    ``probs`` is zero gives ``p = 0``; raises :class:`NothingToTest` under two bins."""
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
    """:func:`chisquare_gof` of ``counts`` against an exact ``law`` over outcomes that may leave
    mass unlisted: the unlisted mass ``1 - sum(law)`` is one more candidate bin, holding every
    observed outcome the law does not list."""
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
    """``(counts_j, law_j)`` of the token at position ``j``, projected from sequence ``counts`` and
    an exact sequence ``law`` that may leave mass unlisted, for :func:`chisquare_law`: an unlisted
    sequence stays in the pooled bin, so ``law_j`` is the exact law of the projection."""
    law_j: dict[tuple[int, ...], float] = {}
    for seq, pr in law.items():
        law_j[(seq[j],)] = law_j.get((seq[j],), 0.0) + pr
    counts_j: Counter = Counter()
    for seq, c in counts.items():
        counts_j[(seq[j],) if seq in law else ("unlisted",)] += c
    return counts_j, law_j


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (step-down; controls the family-wise error rate under any
    dependence)."""
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    adj = np.empty(m)
    running = 0.0
    for rank, idx in enumerate(order):
        running = max(running, (m - rank) * p[idx])
        adj[idx] = min(1.0, running)
    return adj
