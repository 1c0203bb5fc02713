"""The step's shape tuned on the machine at hand (``bench --tune-tree``): at each ``K``, the draft
tree the cost model ranks fastest (:func:`best_chain_tree`) from the head's committed tree rates
and the target's pass costs timed at the start of the run."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...checks import positive_int
from ...config import stopped_rates_path, tree_rates_path
from ...costs import drafted_tokens, stopped_prediction, tree_prediction
from ...models import ModelPair
from ...results import read_json, repo_relative

__all__ = [
    "MAX_ALTERNATIVES",
    "best_chain_tree",
    "head_tree_rates",
    "monotone_costs",
    "pass_tokens",
    "stopped_rates_path",
    "tree_rates_path",
    "tune",
    "tuned_trees",
]

# A tuned step drafts at most this many alternatives beside its chain of K tokens: the pass costs
# are timed up to K + MAX_ALTERNATIVES + 1 tokens, and wider trees are not ranked.
MAX_ALTERNATIVES = 7


def pass_tokens(K_max: int) -> int:
    """The largest target pass a tuned run can make at draft lengths up to ``K_max``."""
    return K_max + MAX_ALTERNATIVES + 1


def _rates_command(
    out: str | Path, head: str | Path | None = None, threshold: float | None = None
) -> str:
    """The ``eval-drafter`` command that measures a head's tree (or stopped) rates into ``out``."""
    flags = (f" --head {head}" if head is not None else "") + " --tree 8 8 --K 8 --temperatures 1 0"
    flags += f" --threshold {threshold:g}" if threshold is not None else ""
    return f"`python -m specdec_lib eval-drafter --draft trained-int8{flags} --out {repo_relative(out)}`"


def head_tree_rates(
    pair: ModelPair, temperature: float, path: str | Path, key: str = "tree_rates"
) -> dict[str, Any]:
    """The rates under ``key`` in ``path`` (an ``eval-drafter`` record) at ``temperature``:
    greedy's for greedy decoding, else the nearest sampled temperature's. Raises ``ValueError``
    where they are missing or were measured with other head weights."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"tune_tree: no tree rates for this head at {repo_relative(path)}; measure them with "
            f"{_rates_command(path)}"
        )
    record = read_json(path)
    want, have = pair.notes.get("head_sha256"), record.get("pair", {}).get("head_sha256")
    if want is None or want != have:
        raise ValueError(
            f"tune_tree: {repo_relative(path)} holds the rates of head {have}, this run's draft is "
            f"{want or pair.draft_name!r}; measure its own with eval-drafter --tree 8 8"
        )
    measured = {T: r for T, r in record["by_temperature"].items() if key in r}
    greedy = [T for T in measured if float(T) == 0]
    sampled = [T for T in measured if float(T) > 0]
    pool = greedy if temperature == 0 else sampled
    if not pool:
        raise ValueError(
            f"tune_tree: {repo_relative(path)} has no tree rates "
            f"{'in greedy decoding' if temperature == 0 else 'at a sampled temperature'}"
        )
    T = min(pool, key=lambda t: abs(float(t) - temperature))
    return measured[T][key] | {
        "file": repo_relative(path),
        "temperature": float(T),
        "draft": record["pair"]["draft"],
        "head_sha256": have,
    }


def tuned_trees(rates: dict[str, Any], Ks: list[int], costs: dict[str, Any]) -> dict[str, Any]:
    """The record a tuned run keeps: :func:`best_chain_tree` for each ``K`` in ``Ks``, ranked on
    :func:`monotone_costs`; ``pays``: whether any shape is predicted to beat autoregressive
    decoding."""
    smooth = monotone_costs(costs)
    by_K = {str(K): best_chain_tree(rates, K, smooth, max_drafted=K + MAX_ALTERNATIVES) for K in Ks}
    return {
        "rates": {
            k: rates[k]
            for k in ("file", "temperature", "draft", "head_sha256", "widths", "threshold")
            if k in rates
        },
        "max_alternatives": MAX_ALTERNATIVES,
        "costs": "monotone",
        "pays": any(t["predicted_speedup"] > 1 for t in by_K.values()),
        "by_K": by_K,
    }


def tune(pair: ModelPair, settings: Any, costs: dict[str, Any]) -> dict[str, Any]:
    """The tuned trees of a run of ``settings`` (a validated ``BenchSettings``) on ``pair`` from
    the ``costs`` it timed. A draft stopped by confidence is ranked with the head's stopped rates
    at its threshold (:func:`stopped_rates_path`) where committed, else with the rates of ``K``
    drafts a step, which the record says (``note``)."""
    path, missing = stopped_rates_path(settings.head), None
    if getattr(settings, "schedule", "fixed") == "threshold":
        missing = f"no stopped rates at {repo_relative(path)}"
        if path.is_file():
            rates = head_tree_rates(pair, settings.temperature, path, "stopped_rates")
            if rates.get("threshold") == settings.threshold:
                return tuned_trees(rates, settings.K, costs)
            missing = f"{repo_relative(path)} holds them at threshold {rates.get('threshold')}"
    rates = head_tree_rates(pair, settings.temperature, tree_rates_path(settings.head))
    tuned = tuned_trees(rates, settings.K, costs)
    if missing:  # said in the record and by the command line: the ranking assumes K drafts
        tuned["note"] = (
            f"the draft stops by confidence below {settings.threshold:g}, but its trees are "
            f"ranked with the rates of K drafts a step ({missing}; measure them with "
            f"{_rates_command(path, settings.head, settings.threshold)})"
        )
    return tuned


def best_chain_tree(
    rates: dict[str, Any],
    K: int,
    costs: dict[str, Any],
    widths: Sequence[int] | None = None,
    *,
    max_drafted: int | None = None,
) -> dict[str, Any]:
    """The draft tree along the chain of depth ``K`` with the highest predicted speedup
    (:func:`~specdec_lib.costs.predicted_tree_speedup`; on a tie, fewer drafted tokens), of every
    shape with at most ``widths[d]`` candidates at depth ``d + 1`` (default: the ``rates``'
    ``widths``, else every width they cover) that ``costs`` cover and that drafts at most
    ``max_drafted`` tokens. Rates with ``stop`` hazards rank drafts stopped by confidence
    (:func:`~specdec_lib.costs.stopped_prediction`). Returns ``tree`` (trailing single candidates
    dropped), ``drafted``, ``tokens_per_step``, ``step_cost``, ``predicted_speedup``."""
    K = positive_int(K, "K", "draft tokens per step")
    predict = stopped_prediction if "stop" in rates else tree_prediction
    chain = rates["go"] if "stop" in rates else rates
    if widths is None:
        widths = rates.get("widths") or [np.asarray(chain["gamma"]).shape[1]] * len(chain["beta"])
    if len(chain["beta"]) < K:
        raise ValueError(f"rates cover {len(chain['beta'])} depths, K = {K} needs {K}")
    cap = len(costs["t_target_s"]) - 1
    if max_drafted is not None:
        cap = min(cap, positive_int(max_drafted, "max_drafted", "draft tokens in a pass"))
    options = [range(1, int(w) + 1) for w in list(widths)[:K]]
    best = None
    for shape in itertools.product(*options):
        n = drafted_tokens(K, shape)
        if n > cap:
            continue
        E, cost = predict(rates, K, shape, costs)
        key = (E / cost, -n)
        if best is None or key > best[0]:
            best = (key, shape, n, E, cost)
    if best is None:
        raise ValueError(
            f"costs: t_target_s covers no step of K = {K} within {cap} drafted tokens (the "
            f"chain needs {K + 1} tokens in a pass)"
        )
    _, shape, n, E, cost = best
    shape = list(shape)
    while len(shape) > 1 and shape[-1] == 1:
        shape.pop()
    return {
        "tree": shape,
        "drafted": n,
        "tokens_per_step": E,
        "step_cost": cost,
        "predicted_speedup": E / cost,
    }


def monotone_costs(costs: dict[str, Any]) -> dict[str, Any]:
    """``costs`` with ``t_target_s`` made non-decreasing in the pass's tokens (isotonic least
    squares): a dip between neighbouring sizes is timing noise a maximum over trees would chase."""
    from scipy.optimize import isotonic_regression

    t = np.asarray(costs["t_target_s"], dtype=float)
    return {**costs, "t_target_s": isotonic_regression(t).x.tolist()}
