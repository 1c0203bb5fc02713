"""The cost model: tokens a step is expected to emit, what a step costs, the speedup they predict.

The closed forms are Leviathan et al. 2022 (arXiv 2211.17192), section 3, derived in
``notebooks/01_acceptance_rule.ipynb``; the same model over measured pass costs is compared with
measurements in notebook 03, and extended to draft trees in notebook 06 (section 5). The benchmark's
analysis, the theory notebook and the device-cost run all predict through this module.

Symbols: ``alpha`` acceptance rate (the same at every draft position), ``K`` draft tokens per step,
``c`` cost of one draft pass relative to one target pass.

A step's *shape* is its draft tree along the chain, the candidates at each depth: ``(1,)`` is the
chain, ``(w,)`` puts ``w`` candidates at the first position, ``(4, 3)`` four at depth 1 and three
at depth 2; depths past the tuple have one candidate, and an int ``w`` is the shape ``(w,)``.

Measured pass costs are a dict ``costs`` as the benchmark records them: ``t_target_s[n - 1]``,
one cached target pass over ``n`` new tokens, ``t_draft_s``, the draft's proposal of one token,
and ``t_draft_next_s`` (where measured), what each further draft token adds: a draft that reads
the target's features builds its first position from them and feeds its own after that, and a
proposal's fixed work is paid once. Runs that record ``draft_timed = "after a target pass"``
timed each proposal as decoding runs it, right after the target's pass (which evicts the draft's
weights from the CPU's caches), and every proposal length the run decodes with
(``t_draft_by_k_s``); earlier runs timed one and two tokens warm, and their draft costs are lower.
Runs that time the host's work of a step (``t_host_s``, by ``K``, ``"0"`` the baseline's draw
after its pass) charge it on both sides: a step then costs its passes and its host work, and the
unit is the baseline's token, a one-token pass and its draw (:func:`base_cost`); costs without
``t_host_s`` charge passes alone, in one-token passes.
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
    """E[tokens per step] = (1 - alpha^(K+1)) / (1 - alpha)  (Leviathan et al., eq. 1).

    The number of accepted drafts is a geometric variable capped at K, plus one corrected or bonus
    token. Equals K + 1 at alpha = 1.
    """
    a, k = _check_alpha(alpha), _check_K(K)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where(a < 1, (1 - a ** (k + 1)) / np.where(a < 1, 1 - a, 1.0), k + 1.0)
    return e.item() if e.ndim == 0 else e


def tree_tokens_per_step(beta: Sequence[float], gamma: Sequence[float]) -> float:
    """E[tokens per step] of a chain tree (the chain, with alternatives beside it at each depth).

    ``beta[d]``: the probability that the chain's token at depth ``d + 1`` is accepted once the
    step reaches it; ``gamma[d]``: the probability that one of that depth's alternatives is
    accepted once the chain's token there is rejected (``0`` without alternatives). A step that
    reaches depth ``d`` ends there with ``d + 1`` tokens when an alternative is accepted (it, then
    the target's token after it) and ``d`` otherwise; past the last depth ``K`` it ends with
    ``K + 1``:

        E = sum_d R_d (1 - beta_d) (d + gamma_d) + R_{K+1} (K + 1),  R_1 = 1,  R_{d+1} = R_d beta_d.

    With ``gamma = 0`` and ``beta = alpha`` at every depth this is :func:`expected_tokens_per_step`.
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
    """E[tokens per step] of the chain when position ``i`` is accepted with probability
    ``alpha_by_position[i - 1]`` given the earlier ones: ``1 + sum_{i=1..K} prod_{j<=i} alpha_j``,
    :func:`tree_tokens_per_step` without alternatives. Positions past the ones given repeat the
    last rate."""
    a = [float(x) for x in alpha_by_position]
    if not a:
        raise ValueError("alpha_by_position must hold the rate of at least one position")
    K = positive_int(K, "K", "draft tokens per step")
    a = (a + [a[-1]] * K)[:K]
    return tree_tokens_per_step(a, [0.0] * K)


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


def optimal_K(alpha, c, K_max: int = 16) -> int:
    """The K in 1..K_max that maximises :func:`walltime_speedup` (clipped at ``K_max``: for alpha
    near 1 and tiny c the unconstrained optimum can be larger)."""
    Ks = np.arange(1, positive_int(K_max, "K_max") + 1)
    return int(Ks[np.argmax(walltime_speedup(alpha, Ks, c))])


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


def as_tree(tree: Any) -> tuple[int, ...]:
    """A step's shape as a tuple of candidates per depth (checked by
    :func:`~specdec_lib.trees.check_widths`): an int ``w`` is ``(w,)``."""
    if isinstance(tree, int | np.integer) and not isinstance(tree, bool):
        tree = (int(tree),)
    shape = check_widths(tree)
    if shape is None:
        raise ValueError("tree must be candidates at each draft depth, e.g. (4, 3), got None")
    return shape


def drafted_widths(K: int, tree: Any = (1,)) -> list[int]:
    """The candidates at each of the ``K`` depths of a step of shape ``tree`` (``1`` past its end)."""
    widths = as_tree(tree)
    return [widths[d] if d < len(widths) else 1 for d in range(K)]


def drafted_tokens(K: int, tree: Any = (1,)) -> int:
    """Draft tokens a step of shape ``tree`` puts in the target's pass: every node of the tree
    cut at depth ``K`` (``K`` for the chain, ``K + w - 1`` for ``(w,)``)."""
    return sum(drafted_widths(K, tree))


def drafted_parents(K: int, tree: Any = (1,)) -> list[int]:
    """The parents of the nodes of a step of shape ``tree`` cut at depth ``K``, in the order
    :func:`~specdec_lib.trees.chain_tree` builds them (the chain, then each depth's
    alternatives, shallowest first) when every alternative is found: the tree a target pass over
    ``drafted_tokens(K, tree) + 1`` tokens checks."""
    widths = drafted_widths(K, tree)
    return list(range(-1, K - 1)) + [d - 1 for d, w in enumerate(widths) for _ in range(w - 1)]


def draft_cost(K: int, costs: dict[str, Any]) -> float:
    """Seconds to propose ``K`` draft tokens (a tree's alternatives come from the chain's own
    rows): the proposal of ``K`` tokens as timed, ``t_draft_by_k_s[K - 1]``, where the costs time
    every length up to ``K``; past the longest timed, each further token at the last length's
    increment. Costs without ``t_draft_by_k_s``: ``t_draft + (K - 1) t_draft_next``, or
    ``K t_draft`` where they have no ``t_draft_next_s``."""
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
    """Seconds of a step's host work at ``K`` drafts (``K = 0``: the baseline's draw after its
    pass), from ``t_host_s`` where the costs time it, and 0 where they do not: the work of the
    tree the run decodes with at that ``K`` (``host_trees``), whatever tree a caller prices.
    Between the timed
    ``K`` it is interpolated linearly (a cell's last steps draft fewer tokens than its ``K``);
    past the largest, the largest's."""
    host = costs.get("t_host_s")
    if not host:
        return 0.0
    timed = sorted((int(k), float(v)) for k, v in host.items())
    return float(np.interp(K, [k for k, _ in timed], [v for _, v in timed]))


def base_cost(costs: dict[str, Any]) -> float:
    """Seconds of the baseline's token, the cost model's unit: a target pass over one token and,
    where the costs time it, the host's draw after it (:func:`host_cost` at ``K = 0``)."""
    return costs["t_target_s"][0] + host_cost(0, costs)


def step_cost(K: int, costs: dict[str, Any], tree: Any = (1,)) -> float:
    """One step's cost in baseline tokens (:func:`base_cost`): the ``K`` draft tokens
    (:func:`draft_cost`), one target pass over the last token and the drafts
    (:func:`drafted_tokens`), and the host's work around them where the costs time it
    (:func:`host_cost`):

        (draft_cost(K) + t_target(1 + drafted) + host(K)) / (t_target(1) + host(0)).
    """
    t = costs["t_target_s"]
    n = drafted_tokens(K, tree)
    if n >= len(t):
        raise ValueError(
            f"costs: t_target_s covers passes up to {len(t)} tokens, a step of K = {K} and tree "
            f"{as_tree(tree)} needs {n + 1}"
        )
    return (draft_cost(K, costs) + t[n] + host_cost(K, costs)) / base_cost(costs)


def predicted_from_costs(alpha: float, K: int, costs: dict[str, Any], tree: Any = (1,)) -> float:
    """The i.i.d. model's speedup: ``E(alpha, K)`` tokens per step (:func:`expected_tokens_per_step`,
    ``alpha`` per position with all the position's candidates counted) over :func:`step_cost`.
    A tree with alternatives has a finer model, at the rates of each depth:
    :func:`predicted_tree_speedup`."""
    return float(expected_tokens_per_step(alpha, K) / step_cost(K, costs, tree))


def tree_prediction(
    rates: dict[str, Any], K: int, tree: Any, costs: dict[str, Any]
) -> tuple[float, float]:
    """(expected tokens per step, step cost) of a step of shape ``tree`` at draft length ``K``.

    ``rates`` holds, per depth ``d = 1..`` (at least ``K``), ``beta[d-1]``, the chain's acceptance
    once the step reaches depth ``d``, and ``gamma[d-1][w-1]``, the probability that one of the
    first ``w - 1`` alternatives there is accepted once the chain's token is rejected (covering
    the tree's widths), as the benchmark's ``tree_rates`` measures them; a rate never measured
    (NaN) counts as 0."""
    widths = drafted_widths(K, tree)
    beta, gamma = _depth_rates(rates, K, tree)
    return tree_tokens_per_step(beta, gamma), step_cost(K, costs, widths)


def _depth_rates(rates: dict[str, Any], K: int, tree: Any) -> tuple[np.ndarray, list[float]]:
    """``beta`` and ``gamma`` of each depth ``1..K`` of a step of shape ``tree`` (the rates of
    :func:`tree_prediction`, the alternatives' rate at the tree's width of each depth)."""
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
    """The cost model's speedup of a step of shape ``tree`` at draft length ``K``: expected tokens
    per step (:func:`tree_tokens_per_step` at the ``rates`` of :func:`tree_prediction`) over the
    step's cost (:func:`step_cost`)."""
    E, cost = tree_prediction(rates, K, tree, costs)
    return E / cost


def tree_step_law(beta: Sequence[float], gamma: Sequence[float]) -> np.ndarray:
    """The law of the tokens one step of a chain tree yields, ``law[j]`` for ``j = 0..K+1``
    (``law[0] = 0``), at the rates of :func:`tree_tokens_per_step` (``beta``, ``gamma``: one per
    depth): a step that reaches depth ``d`` and is rejected there yields ``d + 1`` tokens with
    probability ``gamma_d`` (an alternative kept, then the target's token) and ``d`` otherwise;
    one that passes every depth yields ``K + 1``. Its mean is :func:`tree_tokens_per_step`."""
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
    """The law of the tokens one step yields (``law[j]``, ``j = 0..k+1``) and its expected cost
    (:func:`step_cost`), for a draft that stops by confidence (``bench --schedule threshold``)
    and may draft ``k`` tokens at most, ``k <= K``, the run's ``K``.

    The draft's length is a stopping time ``S``: it stops after depth ``d`` with probability
    ``rates["stop"][d-1]`` once it drafted depth ``d`` (a hazard, ``d < K``), and at ``k`` if it
    has not stopped. A step of length ``j`` costs a proposal of ``j`` tokens and a pass over the
    tree cut at depth ``j``; its tokens follow :func:`tree_step_law` at the rates of each depth's
    kind of chain token: ``rates["go"]`` at a depth the draft went on from (sure of its token),
    ``rates["last"]`` at the depth it stopped at (unsure), and at depth ``K`` reached with the
    draft unstopped, ``rates["capped"]``, the two mixed (which of them the draft was is not
    observed there). Each holds ``beta`` and ``gamma`` per depth as :func:`tree_prediction`
    takes them (NaN counts as 0). Rates measured at a larger cap than ``K`` (a hazard at depth
    ``K``) split depth ``K`` into its two kinds as they do every depth below the cap. With every
    hazard 0 this is the fixed draft's step at ``k``.
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
    """(expected tokens per step, expected step cost) of a draft that stops by confidence, up to
    ``K`` tokens, with a tree of shape ``tree`` around its chain (:func:`stopped_step_law` at
    ``k = K``): :func:`tree_prediction`'s pair for such a draft."""
    law, cost = stopped_step_law(rates, K, K, tree, costs)
    return float(np.arange(law.shape[0]) @ law), cost


def predicted_stopped_speedup(
    rates: dict[str, Any], K: int, tree: Any, costs: dict[str, Any]
) -> float:
    """The cost model's speedup of a draft that stops by confidence, up to ``K`` tokens, with a
    tree of shape ``tree`` around its chain: expected tokens per step over expected step cost
    (:func:`stopped_prediction`; steps renew, so their ratio is the speedup)."""
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
    """The cost model's speedup over cells of ``n_tokens`` new tokens, decoded as the benchmark
    decodes them, where :func:`predicted_tree_speedup` models an endless decode.

    The prompt's pass (``prefill_s``, the same on both sides) gives the first token: a draft that
    reads the target's features has nothing to draft from before it. Each later step drafts
    ``k = min(K, tokens left - 1)`` tokens with the tree cut at depth ``k``
    (:func:`tree_step_law` at the ``rates`` of :func:`tree_prediction`; ``k = 0``, one target
    pass over one token, as the baseline's), or, where the ``rates`` hold a draft's ``stop``
    hazards, up to ``k`` (:func:`stopped_step_law`). The baseline spends ``prefill_s`` and
    ``n_tokens - 1`` of its tokens (:func:`base_cost`). The expected time of the speculative cell
    is computed exactly over the tokens left (a dynamic programme), and the ratio of the two
    times tends to :func:`predicted_tree_speedup` as ``n_tokens`` grows."""
    n_tokens = positive_int(n_tokens, "n_tokens", "new tokens per cell")
    if not prefill_s >= 0:
        raise ValueError(f"prefill_s must be a time in seconds >= 0, got {prefill_s!r}")
    # each draft length a cell's steps can have: the law of its tokens and its cost
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
