"""The cost model: expected tokens per step, a step's cost, and the speedup they predict
(Leviathan et al. 2022, arXiv 2211.17192, section 3). ``alpha``: acceptance rate per draft
position; ``K``: drafts per step; ``c``: a draft pass's cost in target passes. A step's *shape*
``tree``: candidates per depth along the chain (``(1,)`` is the chain; depths past the tuple have
one; an int ``w`` is ``(w,)``).

``costs``, as the benchmark records them: ``t_target_s[n - 1]``, a cached target pass over ``n``
new tokens; ``t_draft_s``, ``t_draft_next_s``, ``t_draft_by_k_s``, proposal costs;
``t_host_s`` (by ``K``; ``"0"``, the baseline's draw), a step's host work. The unit is the
baseline's token (:func:`base_cost`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .checks import positive_int
from .trees import check_widths

__all__ = [
    "as_tree",
    "base_cost",
    "chain_tokens_per_step",
    "draft_cost",
    "drafted_parents",
    "drafted_tokens",
    "drafted_widths",
    "expected_tokens_per_step",
    "host_cost",
    "optimal_K",
    "predicted_from_costs",
    "predicted_cell_speedup",
    "predicted_speedup",
    "predicted_stopped_speedup",
    "predicted_tree_speedup",
    "step_cost",
    "stopped_prediction",
    "stopped_step_law",
    "tree_prediction",
    "tree_step_law",
    "tree_tokens_per_step",
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
    """E[tokens per step] = (1 - alpha^(K+1)) / (1 - alpha), K + 1 at alpha = 1 (Leviathan eq 1)."""
    a, k = _check_alpha(alpha), _check_K(K)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where(a < 1, (1 - a ** (k + 1)) / np.where(a < 1, 1 - a, 1.0), k + 1.0)
    return e.item() if e.ndim == 0 else e


def tree_tokens_per_step(beta: Sequence[float], gamma: Sequence[float]) -> float:
    """E[tokens per step] of a chain tree (the chain, with alternatives beside it at each depth).

    ``beta[d]``: P(the chain's token at depth ``d + 1`` is accepted | the step reaches it);
    ``gamma[d]``: P(one of that depth's alternatives is accepted | the chain's token is rejected):

        E = sum_d R_d (1 - beta_d) (d + gamma_d) + R_{K+1} (K + 1),  R_1 = 1,  R_{d+1} = R_d beta_d.

    With ``gamma = 0`` and ``beta = alpha`` this is :func:`expected_tokens_per_step`.
    """
    b = np.asarray(beta, dtype=float)
    g = np.asarray(gamma, dtype=float)
    if b.ndim != 1 or b.shape != g.shape:
        raise ValueError(
            f"beta and gamma must be 1-D of the same length (one per depth), got {b.shape} and {g.shape}"
        )
    for name, v in (("beta", b), ("gamma", g)):
        if np.any(~np.isfinite(v)) or np.any((v < 0) | (v > 1)):
            raise ValueError(f"{name} must hold probabilities in [0, 1], got {v.tolist()}")
    K = b.shape[0]
    reach = np.concatenate([[1.0], np.cumprod(b)])  # R_1 .. R_{K+1}
    depth = np.arange(1, K + 1)
    return float(np.sum(reach[:K] * (1 - b) * (depth + g)) + reach[K] * (K + 1))


def chain_tokens_per_step(alpha_by_position: Sequence[float], K: int) -> float:
    """E[tokens per step] of the chain, ``1 + sum_{i=1..K} prod_{j<=i} alpha_j``, with
    ``alpha_by_position[i - 1]`` the rate at position ``i`` (later ones repeat the last rate)."""
    a = [float(x) for x in alpha_by_position]
    if not a:
        raise ValueError("alpha_by_position must hold the rate of at least one position")
    K = positive_int(K, "K", "draft tokens per step")
    a = (a + [a[-1]] * K)[:K]
    return tree_tokens_per_step(a, [0.0] * K)


def walltime_speedup(alpha, K, c):
    """(1 - alpha^(K+1)) / ((1 - alpha)(cK + 1)) (Theorem 3.8): verifying K + 1 tokens costs one
    target pass, a draft pass ``c`` of them."""
    c_ = np.asarray(c, dtype=float)
    if np.any(~np.isfinite(c_)) or np.any(c_ < 0):
        raise ValueError(f"c must be a finite number >= 0, got {c!r}")
    s = expected_tokens_per_step(alpha, K) / (c_ * _check_K(K) + 1.0)
    return s.item() if np.ndim(s) == 0 else s


def optimal_K(alpha, c, K_max: int = 16) -> int:
    """The K in 1..K_max that maximises :func:`walltime_speedup`."""
    Ks = np.arange(1, positive_int(K_max, "K_max") + 1)
    return int(Ks[np.argmax(walltime_speedup(alpha, Ks, c))])


def predicted_speedup(alpha, K, t_draft, t_target: Sequence[float] | float, t_target_1=None):
    """``E[tokens per step] / ((K * t_draft + t_target(K+1)) / t_target(1))``; ``t_target``: a
    pass over K + 1 tokens, or a sequence indexed by n - 1 when ``t_target_1`` is None."""
    if t_target_1 is None:
        seq = list(t_target)  # t_target[n - 1] = cost of a pass on n tokens
        t_target_1, t_k1 = seq[0], seq[int(K)]
    else:
        t_k1 = float(t_target)
    step = K * float(t_draft) + float(t_k1)
    return expected_tokens_per_step(alpha, K) / (step / float(t_target_1))


def as_tree(tree: Any) -> tuple[int, ...]:
    """A step's shape as a tuple of candidates per depth; an int ``w`` is ``(w,)``."""
    if isinstance(tree, int | np.integer) and not isinstance(tree, bool):
        tree = (int(tree),)
    shape = check_widths(tree)
    if shape is None:
        raise ValueError("tree must be candidates at each draft depth, e.g. (4, 3), got None")
    return shape


def drafted_widths(K: int, tree: Any = (1,)) -> list[int]:
    """The candidates at each of the ``K`` depths of a step of shape ``tree``."""
    widths = as_tree(tree)
    return [widths[d] if d < len(widths) else 1 for d in range(K)]


def drafted_tokens(K: int, tree: Any = (1,)) -> int:
    """Draft tokens of a step of shape ``tree`` cut at depth ``K`` (``K + w - 1`` for ``(w,)``)."""
    return sum(drafted_widths(K, tree))


def drafted_parents(K: int, tree: Any = (1,)) -> list[int]:
    """The parents of the nodes of a step of shape ``tree`` cut at depth ``K``, in
    :func:`~specdec_lib.trees.chain_tree`'s order, when every alternative is found."""
    widths = drafted_widths(K, tree)
    return list(range(-1, K - 1)) + [d - 1 for d, w in enumerate(widths) for _ in range(w - 1)]


def draft_cost(K: int, costs: dict[str, Any]) -> float:
    """Seconds to propose ``K`` draft tokens: ``t_draft_by_k_s[K - 1]`` (past the longest timed,
    extrapolated at the last increment), else ``t_draft + (K - 1) t_draft_next``."""
    if K < 1:
        return 0.0
    by_k = costs.get("t_draft_by_k_s")
    if by_k:
        if K <= len(by_k):
            return by_k[K - 1]
        step = by_k[-1] - by_k[-2] if len(by_k) > 1 else by_k[-1]
        return by_k[-1] + (K - len(by_k)) * max(0.0, step)
    return costs["t_draft_s"] + (K - 1) * costs.get("t_draft_next_s", costs["t_draft_s"])


def host_cost(K: int, costs: dict[str, Any]) -> float:
    """Seconds of a step's host work at ``K`` drafts (``K = 0``: the baseline's draw), interpolated
    linearly in ``t_host_s``; 0 where the costs lack it."""
    host = costs.get("t_host_s")
    if not host:
        return 0.0
    timed = sorted((int(k), float(v)) for k, v in host.items())
    return float(np.interp(K, [k for k, _ in timed], [v for _, v in timed]))


def base_cost(costs: dict[str, Any]) -> float:
    """Seconds of the baseline's token, the cost model's unit: a one-token pass and its draw."""
    return costs["t_target_s"][0] + host_cost(0, costs)


def step_cost(K: int, costs: dict[str, Any], tree: Any = (1,)) -> float:
    """One step's cost in baseline tokens, ``(draft_cost(K) + t_target(1 + drafted_tokens) +
    host_cost(K)) / base_cost``."""
    t = costs["t_target_s"]
    n = drafted_tokens(K, tree)
    if n >= len(t):
        raise ValueError(
            f"costs: t_target_s covers passes up to {len(t)} tokens, a step of K = {K} and tree "
            f"{as_tree(tree)} needs {n + 1}"
        )
    return (draft_cost(K, costs) + t[n] + host_cost(K, costs)) / base_cost(costs)


def predicted_from_costs(alpha: float, K: int, costs: dict[str, Any], tree: Any = (1,)) -> float:
    """The i.i.d. model's speedup: :func:`expected_tokens_per_step` over :func:`step_cost`."""
    return float(expected_tokens_per_step(alpha, K) / step_cost(K, costs, tree))


def tree_prediction(
    rates: dict[str, Any], K: int, tree: Any, costs: dict[str, Any]
) -> tuple[float, float]:
    """(expected tokens per step, step cost) of a step of shape ``tree`` at draft length ``K``.

    ``rates`` (as the benchmark's ``tree_rates``): per depth ``d``, ``beta[d-1]``, the chain's
    acceptance once the step reaches ``d``, and ``gamma[d-1][w-1]``, P(one of the first ``w - 1``
    alternatives is accepted | the chain's token is rejected); NaN counts as 0."""
    widths = drafted_widths(K, tree)
    beta, gamma = _depth_rates(rates, K, tree)
    return tree_tokens_per_step(beta, gamma), step_cost(K, costs, widths)


def _depth_rates(rates: dict[str, Any], K: int, tree: Any) -> tuple[np.ndarray, list[float]]:
    """``beta`` and ``gamma`` of depths ``1..K`` at the tree's width of each depth."""
    widths = drafted_widths(K, tree)
    beta = np.nan_to_num(np.asarray(rates["beta"], dtype=float))
    gamma = np.nan_to_num(np.asarray(rates["gamma"], dtype=float))
    if beta.shape[0] < K or gamma.shape[1] < max(widths):
        raise ValueError(
            f"rates cover {beta.shape[0]} depths and {gamma.shape[1]} candidates, a step of K = {K} "
            f"and tree {as_tree(tree)} needs {K} and {max(widths)}"
        )
    return beta[:K], [float(gamma[d, w - 1]) for d, w in enumerate(widths)]


def predicted_tree_speedup(
    rates: dict[str, Any], K: int, tree: Any, costs: dict[str, Any]
) -> float:
    """The cost model's speedup of a step of shape ``tree``: :func:`tree_prediction`'s ratio."""
    E, cost = tree_prediction(rates, K, tree, costs)
    return E / cost


def tree_step_law(beta: Sequence[float], gamma: Sequence[float]) -> np.ndarray:
    """The law of a chain tree step's tokens, ``law[j]``, ``j = 0..K+1``; its mean is
    :func:`tree_tokens_per_step` at the same rates."""
    b, g = np.asarray(beta, dtype=float), np.asarray(gamma, dtype=float)
    K = b.shape[0]
    law, reach = np.zeros(K + 2), 1.0
    for d in range(1, K + 1):
        law[d] += reach * (1 - b[d - 1]) * (1 - g[d - 1])
        law[d + 1] += reach * (1 - b[d - 1]) * g[d - 1]
        reach *= b[d - 1]
    law[K + 1] += reach
    return law


def stopped_step_law(
    rates: dict[str, Any], k: int, K: int, tree: Any, costs: dict[str, Any]
) -> tuple[np.ndarray, float]:
    """The law of one step's tokens (``law[j]``, ``j = 0..k+1``) and its expected cost, for a draft
    that stops by confidence after at most ``k <= K`` tokens.

    The draft's length is a stopping time: after depth ``d < K`` it stops with probability
    ``rates["stop"][d-1]``, and at ``k`` regardless. A step of length ``j`` costs
    ``step_cost(j)``; its tokens follow :func:`tree_step_law` at ``rates["go"]`` for depths the
    draft went on from, ``rates["last"]`` at the depth it stopped at, and ``rates["capped"]`` at
    depth ``K`` reached unstopped (the two mixed, unless ``stop`` covers depth ``K``); each as
    :func:`tree_prediction` takes them. With every hazard 0 this is the fixed draft's step at ``k``.
    """
    k = positive_int(k, "k", "the most draft tokens of a step")
    if k > K:
        raise ValueError(f"k = {k} is above the run's K = {K}")
    hazard = np.nan_to_num(np.asarray(rates["stop"], dtype=float))
    if hazard.shape[0] < K - 1:
        raise ValueError(f"rates: stop covers {hazard.shape[0]} depths, K = {K} needs {K - 1}")
    kinds = {name: _depth_rates(rates[name], K, tree) for name in ("go", "last", "capped")}

    def rates_of(j: int, last: str) -> tuple[np.ndarray, list[float]]:
        # depths 1..j-1 went on; depth j is of kind `last`
        beta = np.concatenate([kinds["go"][0][: j - 1], kinds[last][0][j - 1 : j]])
        return beta, kinds["go"][1][: j - 1] + kinds[last][1][j - 1 : j]

    outcomes = []  # (probability, draft length, kind of its last token)
    going = 1.0
    for j in range(1, k):
        outcomes.append((going * hazard[j - 1], j, "last"))
        going *= 1 - hazard[j - 1]
    if k < K or hazard.shape[0] >= K:  # cut at k: its token there may be sure or not
        outcomes += [(going * hazard[k - 1], k, "last"), (going * (1 - hazard[k - 1]), k, "go")]
    else:
        outcomes.append((going, k, "capped"))
    law, cost = np.zeros(k + 2), 0.0
    for prob, j, last in outcomes:
        law[: j + 2] += prob * tree_step_law(*rates_of(j, last))
        cost += prob * step_cost(j, costs, tree)
    return law, cost


def stopped_prediction(
    rates: dict[str, Any], K: int, tree: Any, costs: dict[str, Any]
) -> tuple[float, float]:
    """(expected tokens per step, expected step cost): :func:`stopped_step_law` at ``k = K``."""
    law, cost = stopped_step_law(rates, K, K, tree, costs)
    return float(np.arange(law.shape[0]) @ law), cost


def predicted_stopped_speedup(
    rates: dict[str, Any], K: int, tree: Any, costs: dict[str, Any]
) -> float:
    """The speedup of a draft that stops by confidence: :func:`stopped_prediction`'s ratio (steps
    renew, so the ratio of their means is the speedup)."""
    E, cost = stopped_prediction(rates, K, tree, costs)
    return E / cost


def predicted_cell_speedup(
    rates: dict[str, Any],
    K: int,
    tree: Any,
    costs: dict[str, Any],
    n_tokens: int,
    prefill_s: float,
) -> float:
    """The cost model's speedup over cells of ``n_tokens`` new tokens (finite decodes).

    The prompt's pass (``prefill_s``, on both sides) gives the first token; each later step drafts
    ``k = min(K, tokens left - 1)`` (:func:`tree_step_law`, or :func:`stopped_step_law` where
    ``rates`` hold ``stop``). The expected time is exact over the tokens left (a dynamic programme);
    the ratio tends to :func:`predicted_tree_speedup` as ``n_tokens`` grows."""
    n_tokens = positive_int(n_tokens, "n_tokens", "new tokens per cell")
    if not prefill_s >= 0:
        raise ValueError(f"prefill_s must be a time in seconds >= 0, got {prefill_s!r}")
    if "stop" in rates:
        laws = {k: stopped_step_law(rates, k, K, tree, costs) for k in range(1, K + 1)}
    else:
        laws = {
            k: (tree_step_law(*_depth_rates(rates, k, tree)), step_cost(k, costs, tree))
            for k in range(1, K + 1)
        }
    spent = np.zeros(n_tokens)  # spent[r]: expected baseline tokens' time to emit r tokens
    for r in range(1, n_tokens):
        k = min(K, r - 1)
        if k == 0:
            spent[r] = 1.0 + spent[r - 1]
            continue
        law, cost = laws[k]
        spent[r] = cost + sum(law[j] * spent[r - j] for j in range(1, k + 2))
    prefill = prefill_s / base_cost(costs)
    return float((prefill + n_tokens - 1) / (prefill + spent[n_tokens - 1]))
