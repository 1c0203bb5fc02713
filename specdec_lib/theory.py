"""Closed-form predictions of Leviathan et al. 2022 (arXiv 2211.17192), section 3.

Derived in ``notebooks/01_acceptance_rule.ipynb``; compared with measurements in notebook 03.
Symbols: ``alpha`` acceptance rate (assumed the same at every draft position), ``K`` draft tokens per
step, ``c`` cost of one draft pass relative to one target pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "expected_tokens_per_step",
    "optimal_K",
    "predicted_speedup",
    "walltime_speedup",
]


def _check_alpha(alpha):
    a = np.asarray(alpha, dtype=float)
    if np.any(~np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    return a


def _check_K(K):
    k = np.asarray(K)
    if not np.issubdtype(k.dtype, np.integer) or np.any(k < 0):
        raise ValueError(f"K must be a non-negative integer (or array of them), got {K!r}")
    return k


def expected_tokens_per_step(alpha, K):
    """E[tokens per step] = (1 - alpha^(K+1)) / (1 - alpha)  (Leviathan et al., eq. 1).

    The number of accepted drafts is a geometric variable capped at K, plus one corrected or bonus
    token. Equals K + 1 at alpha = 1.
    """
    a, k = _check_alpha(alpha), _check_K(K)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where(a < 1, (1 - a ** (k + 1)) / np.where(a < 1, 1 - a, 1.0), k + 1.0)
    return e.item() if e.ndim == 0 else e


def walltime_speedup(alpha, K, c):
    """Expected walltime improvement (1 - alpha^(K+1)) / ((1 - alpha)(cK + 1))  (Theorem 3.8).

    Assumes a target pass on K + 1 tokens costs the same as on one token, and a draft pass costs
    ``c`` target passes.
    """
    c_ = np.asarray(c, dtype=float)
    if np.any(~np.isfinite(c_)) or np.any(c_ < 0):
        raise ValueError(f"c must be a finite number >= 0, got {c!r}")
    s = expected_tokens_per_step(alpha, K) / (c_ * _check_K(K) + 1.0)
    return s.item() if np.ndim(s) == 0 else s


def predicted_speedup(alpha, K, t_draft, t_target: Sequence[float] | float, t_target_1=None):
    """Speedup predicted from measured pass costs, without the "verification is free" assumption.

    ``E[tokens per step] / ((K * t_draft + t_target(K+1)) / t_target(1))``. ``t_target`` is the
    cost of a target pass on K + 1 tokens; ``t_target_1`` that on one token (if ``t_target`` is a
    sequence indexed by n - 1, both are read from it).
    """
    if t_target_1 is None:
        seq = list(t_target)  # t_target[n - 1] = cost of a pass on n tokens
        t_target_1, t_k1 = seq[0], seq[int(K)]
    else:
        t_k1 = float(t_target)
    step = K * float(t_draft) + float(t_k1)
    return expected_tokens_per_step(alpha, K) / (step / float(t_target_1))


def optimal_K(alpha, c, K_max: int = 16) -> int:
    """The K in 1..K_max that maximises :func:`walltime_speedup` (clipped at ``K_max``: for alpha
    near 1 and tiny c the unconstrained optimum can be larger)."""
    Ks = np.arange(1, K_max + 1)
    return int(Ks[np.argmax(walltime_speedup(alpha, Ks, c))])
