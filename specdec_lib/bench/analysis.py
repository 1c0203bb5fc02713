"""What a stored benchmark run says: summaries per method and ``K``, acceptance by position and
depth, outputs against the baseline's, bootstrap intervals and frames. Reads a run's cells
(``result["cells"]``, keyed ``method|K|prompt|repeat``) and settings; the predictions are
:mod:`specdec_lib.costs`' cost model."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..checks import positive_int
from ..costs import (
    base_cost,
    draft_cost,
    drafted_tokens,
    drafted_widths,
    host_cost,
    predicted_cell_speedup,
    predicted_from_costs,
    predicted_stopped_speedup,
    predicted_tree_speedup,
    step_cost,
)
from ..results import check_same_machine, read_json
from .methods import METHODS

__all__ = [
    "DISTURBED_PACE",
    "against_baseline",
    "best_K",
    "cell_key",
    "cell_paces",
    "depth_counts",
    "disturbed_cells",
    "headline",
    "identical_outputs",
    "model_costs",
    "position_counts",
    "rates",
    "run_tree",
    "runs_frame",
    "speculative_runs",
    "speedup_interval",
    "summarize",
    "stopped_rates",
    "tree_rates",
]


def cell_key(method: str, K: int, prompt: int, repeat: int) -> str:
    """The key of one cell in a run's ``cells``."""
    return f"{method}|{K}|{prompt}|{repeat}"


def run_tree(settings: Mapping[str, Any], tuned: Mapping[str, Any] | None = None, K: int = 0):
    """A stored run's step shape: its ``tree`` (``(width,)`` for old runs), or for a run that tuned
    its tree per ``K`` (``tune_tree``), the tree of ``K`` in its ``tuned_trees`` record."""
    if tuned:
        return list(tuned["by_K"][str(K)]["tree"])
    if settings.get("tune_tree"):
        raise ValueError("a run that tuned its tree at each K: pass its tuned_trees and the K")
    return list(settings.get("tree") or [int(settings.get("width") or 1)])


# Acceptance by draft position and by depth


def position_counts(cells: Iterable[dict[str, Any]], K: int) -> tuple[np.ndarray, np.ndarray]:
    """Per draft position: (steps that reached it, steps that accepted it)."""
    reached = np.zeros(K, dtype=np.int64)
    accepted = np.zeros(K, dtype=np.int64)
    for c in cells:
        for drafted, n_acc, _ in c.get("steps", []):
            reached[: min(n_acc + 1, drafted)] += 1
            accepted[:n_acc] += 1
    return reached, accepted


def rates(reached: np.ndarray, accepted: np.ndarray) -> list[float]:
    """Acceptance at each draft position given it was judged (NaN if never)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (accepted / reached).tolist()


def tree_rates(cells: Iterable[dict[str, Any]], K: int, width: int) -> dict[str, Any]:
    """A chain tree's ``beta`` and ``gamma`` per depth (:func:`~specdec_lib.costs.tree_prediction`),
    with counts, from cells with up to ``width`` candidates per depth (``alt_index`` recorded). As
    alternatives are tried in the order drawn, one wide run measures every narrower tree."""
    positive_int(K, "K")
    positive_int(width, "width")
    reached = np.zeros(K, dtype=np.int64)
    chain = np.zeros(K, dtype=np.int64)
    rejected = np.zeros(K, dtype=np.int64)
    alt = np.zeros((K, width), dtype=np.int64)  # alt[d, j]: alternative j + 1 kept at depth d + 1
    for c in cells:
        for (drafted, n_acc, _), j in zip(c["steps"], c["alt_index"], strict=True):
            if drafted < K:
                continue
            on_chain = n_acc - 1 if j else n_acc  # chain tokens accepted
            reached[: min(on_chain + 1, K)] += 1
            chain[:on_chain] += 1
            if on_chain < K:
                rejected[on_chain] += 1
                if j:
                    alt[on_chain, j - 1] += 1
    return _depth_rates_record(reached, chain, rejected, alt)


def _depth_rates_record(
    reached: np.ndarray, chain: np.ndarray, rejected: np.ndarray, alt: np.ndarray
) -> dict[str, Any]:
    """``beta`` and ``gamma`` (as :func:`tree_rates`) from their counts, with the counts."""
    with np.errstate(invalid="ignore", divide="ignore"):
        beta = chain / reached
        first = np.zeros((alt.shape[0], 1), dtype=np.int64)
        kept = np.concatenate([first, np.cumsum(alt, axis=1)[:, :-1]], 1)
        gamma = kept / rejected[:, None]
    return {
        "beta": beta.tolist(),
        "gamma": gamma.tolist(),
        "reached": reached.tolist(),
        "chain_accepted": chain.tolist(),
        "chain_rejected": rejected.tolist(),
        "alternative_kept": alt.tolist(),
    }


def stopped_rates(
    cells: Iterable[dict[str, Any]], K: int, width: int, max_new_tokens: int
) -> dict[str, Any]:
    """The rates of :func:`~specdec_lib.costs.stopped_step_law`, with counts, from cells of at most
    ``max_new_tokens`` tokens (a step's cap: ``min(K, tokens left - 1)``): ``stop``, the hazards;
    ``go``, ``last``, ``capped``: :func:`tree_rates` at depths gone on from, stopped at, capped."""
    positive_int(K, "K")
    positive_int(width, "width")
    positive_int(max_new_tokens, "max_new_tokens")
    kinds = ("go", "last", "capped")
    reached, chain, rejected = (np.zeros((3, K), dtype=np.int64) for _ in range(3))
    alt = np.zeros((3, K, width), dtype=np.int64)
    stopped, went_on = np.zeros(K, dtype=np.int64), np.zeros(K, dtype=np.int64)
    for c in cells:
        emitted = 0
        for (drafted, n_acc, out), j in zip(c["steps"], c["alt_index"], strict=True):
            cap = min(K, max_new_tokens - emitted - 1)
            emitted += len(out)
            if drafted == 0:  # the prompt's pass, or a draft that declined
                continue
            if drafted > cap:
                raise ValueError(f"cells: a step drafted {drafted} tokens, above its cap {cap}")
            went_on[: drafted - 1] += 1
            if drafted < cap:
                stopped[drafted - 1] += 1
            last = 1 if drafted < cap else 2
            on_chain = n_acc - 1 if j else n_acc  # chain tokens accepted
            for d in range(min(on_chain + 1, drafted)):  # the depths verification reached
                kind = 0 if d < drafted - 1 else last
                reached[kind, d] += 1
                if d < on_chain:
                    chain[kind, d] += 1
                else:
                    rejected[kind, d] += 1
                    if j:
                        alt[kind, d, j - 1] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        out: dict[str, Any] = {"stop": (stopped / (stopped + went_on))[: K - 1].tolist()}
    for i, name in enumerate(kinds):
        out[name] = _depth_rates_record(reached[i], chain[i], rejected[i], alt[i])
    out["stopped"], out["went_on"] = stopped.tolist(), went_on.tolist()
    return out


def depth_counts(
    cells: Iterable[dict[str, Any]], K: int, tree: Sequence[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per depth ``1..K`` of cells run with ``tree``: steps that reached it, kept a candidate there,
    accepted the chain's token there. A kept alternative ends the step, so later depths are not
    judged; steps with fewer than ``K`` drafts are left out."""
    cells = list(cells)
    widths = drafted_widths(K, tree)
    if max(widths) == 1:
        reached, accepted = position_counts(cells, K)
        return reached, accepted, accepted
    r = tree_rates(cells, K, max(widths))
    kept = np.array([sum(r["alternative_kept"][d][: w - 1]) for d, w in enumerate(widths)])
    chain = np.array(r["chain_accepted"])
    return np.array(r["reached"]), chain + kept, chain


# Outputs against the baseline's


def against_baseline(result: dict[str, Any]):
    """Yield ``(method, K, prompt, baseline tokens, first differing position or None)`` for each
    non-baseline cell beside the autoregressive cell of the same prompt and repeat."""
    cells = {tuple(key.split("|")): cell for key, cell in sorted(result["cells"].items())}
    base = {(p, rep): c["tokens"] for (m, _k, p, rep), c in cells.items() if m == "autoregressive"}
    for (method, K, p, rep), cell in cells.items():
        if method == "autoregressive" or (p, rep) not in base:
            continue
        ref, got = base[p, rep], cell["tokens"]
        j = None
        if got != ref:
            pairs = enumerate(zip(got, ref, strict=False))
            j = next((i for i, (a, b) in pairs if a != b), min(len(got), len(ref)))
        yield method, int(K), int(p), ref, j


def identical_outputs(result: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """For a greedy run, per (method, K): how many cells emitted the autoregressive cell's tokens,
    and where the others first differ (bfloat16 rounds passes of K + 1 tokens differently, so
    near-ties can flip); ``{}`` for a sampled run."""
    if result["settings"]["temperature"] != 0:
        return {}
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for method, K, _p, _ref, j in against_baseline(result):
        rec = out.setdefault((method, K), {"cells": 0, "identical": 0, "first_divergence": []})
        rec["cells"] += 1
        if j is None:
            rec["identical"] += 1
        else:
            rec["first_divergence"].append(j)
    for rec in out.values():
        rec["fraction"] = rec["identical"] / rec["cells"]
    return out


# The summary


def model_costs(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pass costs the cost model reads: ``costs_during``, else ``costs``."""
    return result.get("costs_during") or result.get("costs")


# A cell is disturbed above this many times its run's median pace (:func:`cell_paces`).
DISTURBED_PACE = 1.5


def cell_paces(result: Mapping[str, Any]) -> dict[str, float]:
    """Each autoregressive and speculative cell's time over what the cost model charges for its own
    steps (at :func:`model_costs`), relative to the run's median, by key; acceptance is the cell's
    own, so only the machine moves a pace."""
    costs = model_costs(result)
    if not costs:
        return {}
    base_ms, passes = base_cost(costs) * 1e3, len(costs["t_target_s"])
    charged: dict[str, float] = {}
    for key, cell in result["cells"].items():
        method, K, _, _ = key.split("|")
        if method not in ("autoregressive", "speculative") or "prefill_ms" not in cell:
            continue
        if method == "autoregressive":
            drafted, tree = [0] * (cell["n_steps"] - 1), [1]
        else:
            drafted = [d for d, _, _ in cell["steps"][1:]]
            tree = run_tree(result["settings"], result.get("tuned_trees"), int(K))
            if drafted_tokens(max(drafted, default=0), tree) >= passes:
                continue  # a pass the costs did not time
        steps = sum(step_cost(d, costs, tree) for d in drafted)  # in baseline tokens
        charged[key] = cell["elapsed_s"] * 1e3 / (cell["prefill_ms"] + steps * base_ms)
    if not charged:
        return {}
    median = float(np.median(list(charged.values())))
    return {key: pace / median for key, pace in charged.items()}


def disturbed_cells(result: Mapping[str, Any], factor: float = DISTURBED_PACE) -> dict[str, float]:
    """The cells (with paces) above ``factor`` times the median pace: the machine ran slow."""
    return {key: pace for key, pace in cell_paces(result).items() if pace > factor}


def summarize(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per (method, K): throughput, speedup, alpha, tau, latencies, predicted speedup,
    per-prompt records and ``disturbed_cells``. A ``"heuristic"`` schedule has no prediction."""
    costs = model_costs(result)
    schedule = result["settings"].get("schedule", "fixed")
    stopped = result["settings"]["max_new_tokens"] if schedule == "threshold" else None
    identical = identical_outputs(result)
    disturbed = disturbed_cells(result)
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for key, cell in result["cells"].items():
        method, K, p, rep = key.split("|")
        groups.setdefault((method, int(K)), []).append(
            {**cell, "prompt": int(p), "repeat": int(rep)}
        )
    base = groups.get(("autoregressive", 0), [])
    base_tps = _tokens(base) / _seconds(base) if base else float("nan")
    runs = []
    for (method, K), cells in sorted(
        groups.items(), key=lambda g: (METHODS.index(g[0][0]), g[0][1])
    ):
        n_tok, secs = _tokens(cells), _seconds(cells)
        lat = np.array([c["elapsed_s"] * 1e3 for c in cells])
        rec: dict[str, Any] = {
            "method": method,
            "K": K,
            "n_cells": len(cells),
            "tokens": n_tok,
            "seconds": secs,
            "tokens_per_s": n_tok / secs,
            "speedup": (n_tok / secs) / base_tps,
            "latency_p50_ms": float(np.percentile(lat, 50)),
            "latency_p95_ms": float(np.percentile(lat, 95)),
            "alpha": None,
            "tau": None,
            "predicted_speedup": None,
        }
        if method == "speculative":
            tree = run_tree(result["settings"], result.get("tuned_trees"), K)
            rec["tree"] = tree
            model = costs if schedule in ("fixed", "threshold") else None
            rec |= _speculative(cells, K, tree, model, n_tok, secs, rec["speedup"], stopped)
        if (method, K) in identical:
            rec["identical_to_autoregressive"] = identical[method, K]["fraction"]
        if method in ("autoregressive", "speculative"):
            keys = (cell_key(method, K, c["prompt"], c["repeat"]) for c in cells)
            rec["disturbed_cells"] = sum(key in disturbed for key in keys)
        rec["per_prompt"] = _per_prompt(cells, result["prompts"], method)
        runs.append(rec)
    return runs


def _tokens(cells: list[dict[str, Any]]) -> int:
    return sum(len(c["tokens"]) for c in cells)


def _seconds(cells: list[dict[str, Any]]) -> float:
    return sum(c["elapsed_s"] for c in cells)


def _speculative(
    cells: list[dict[str, Any]],
    K: int,
    tree: Sequence[int],
    costs: dict[str, Any] | None,
    n_tok: int,
    secs: float,
    speedup: float,
    stopped: int | None = None,
) -> dict[str, Any]:
    """The speculative fields of a (speculative, K) record; ``stopped``: the cells'
    ``max_new_tokens`` when the draft stops by confidence."""
    proposed = sum(c["n_proposed"] for c in cells)
    accepted = sum(c["n_accepted"] for c in cells)
    judged = sum(min(a + 1, d) for c in cells for d, a, _ in c["steps"])
    rec: dict[str, Any] = {"alpha": accepted / proposed if proposed else float("nan")}
    # The i.i.d. model's maximum-likelihood alpha; accepted / proposed would underestimate it.
    rec["alpha_iid"] = accepted / judged if judged else float("nan")
    n_steps = sum(c["n_steps"] for c in cells)
    rec["tau"] = n_tok / n_steps
    rec["alpha_by_position"] = rates(*position_counts(cells, K))
    widest = max(drafted_widths(K, tree))
    if costs and stopped is not None:
        rec["stopped_rates"] = stopped_rates(cells, K, widest, stopped)
        rec["predicted_speedup"] = predicted_stopped_speedup(rec["stopped_rates"], K, tree, costs)
    elif costs and widest > 1 and all("alt_index" in c for c in cells):
        rec["tree_rates"] = tree_rates(cells, K, widest)
        rec["predicted_speedup"] = predicted_tree_speedup(rec["tree_rates"], K, tree, costs)
    elif costs:  # the chain, or a run that did not record which alternative was kept
        rec["predicted_speedup"] = predicted_from_costs(rec["alpha_iid"], K, costs, tree)
    if costs:
        rec["efficiency"] = speedup / rec["predicted_speedup"]
        rec |= _cell_prediction(cells, K, tree, costs, rec, speedup)
        if stopped is None:
            rec["predicted_speedup_from_tau"] = rec["tau"] / step_cost(K, costs, tree)
    for part in ("draft", "target", "host"):
        if all(f"{part}_ms" in c for c in cells):
            rec[f"{part}_share"] = sum(c[f"{part}_ms"] for c in cells) / (1e3 * secs)
    if "host_share" in rec:
        rec |= _parts_against_model(cells, K, tree, costs if stopped is None else None, n_steps)
    return rec


def _parts_against_model(
    cells: list[dict[str, Any]],
    K: int,
    tree: Sequence[int],
    costs: dict[str, Any] | None,
    n_steps: int,
) -> dict[str, Any]:
    """Each part's milliseconds per step as measured, and the draft's, target's and host's as the
    cost model charges a step of ``K`` drafts (``model_*_ms``)."""
    rec = {
        f"{part}_ms_per_step": sum(c[f"{part}_ms"] for c in cells) / n_steps
        for part in ("draft", "target", "host")
    }
    n = drafted_tokens(K, tree)
    if costs and n < len(costs["t_target_s"]):
        rec["model_draft_ms"] = draft_cost(K, costs) * 1e3
        rec["model_target_ms"] = costs["t_target_s"][n] * 1e3
        if costs.get("t_host_s"):
            rec["model_host_ms"] = host_cost(K, costs) * 1e3
    return rec


def _cell_prediction(
    cells: list[dict[str, Any]],
    K: int,
    tree: Sequence[int],
    costs: dict[str, Any],
    rec: dict[str, Any],
    speedup: float,
) -> dict[str, Any]:
    """``predicted_speedup_cells`` (:func:`~specdec_lib.costs.predicted_cell_speedup`) and
    ``efficiency_cells``, where every cell has the same length and drafted nothing before the
    prompt's pass; ``{}`` otherwise."""
    lengths = {len(c["tokens"]) for c in cells}
    first_empty = all(c.get("steps") and c["steps"][0][0] == 0 for c in cells)
    if len(lengths) != 1 or not first_empty or not all("prefill_ms" in c for c in cells):
        return {}
    rates = rec.get("stopped_rates", rec.get("tree_rates"))
    if rates is None:  # the chain: one rate at every depth
        if max(drafted_widths(K, tree)) > 1 or not np.isfinite(rec["alpha_iid"]):
            return {}  # a tree whose cells did not record which alternative was kept
        rates = {"beta": [rec["alpha_iid"]] * K, "gamma": [[0.0]] * K}
    prefill_s = float(np.mean([c["prefill_ms"] for c in cells])) / 1e3
    predicted = predicted_cell_speedup(rates, K, tree, costs, lengths.pop(), prefill_s)
    return {"predicted_speedup_cells": predicted, "efficiency_cells": speedup / predicted}


def _per_prompt(cells: list[dict[str, Any]], prompts: list[dict[str, Any]], method: str) -> list:
    """Per prompt of one (method, K): tokens, seconds, throughput, and for speculative cells
    acceptance and tokens per step."""
    out = []
    for p in sorted({c["prompt"] for c in cells}):
        cs = [c for c in cells if c["prompt"] == p]
        pp = {
            "prompt": p,
            "category": prompts[p]["category"],
            "tokens": _tokens(cs),
            "seconds": _seconds(cs),
        }
        pp["tokens_per_s"] = pp["tokens"] / pp["seconds"]
        if method == "speculative":
            prop = sum(c["n_proposed"] for c in cs)
            pp["alpha"] = sum(c["n_accepted"] for c in cs) / prop if prop else float("nan")
            pp["n_proposed"] = prop
            pp["n_accepted"] = sum(c["n_accepted"] for c in cs)
            pp["tau"] = pp["tokens"] / sum(c["n_steps"] for c in cs)
        out.append(pp)
    return out


# Intervals and frames


def speedup_interval(
    result: dict[str, Any],
    method: str,
    K: int,
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
    baseline: str = "autoregressive",
) -> tuple[float, float]:
    """A bootstrap interval over prompts (BCa, paired) for the speedup of ``(method, K)``: pooled
    tokens per second over the ``baseline``'s (a ``K = 0`` method) on the same prompts."""
    from scipy import stats as sps

    positive_int(n_resamples, "n_resamples")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    sums: dict[tuple[str, int], np.ndarray] = {}
    for key, cell in result["cells"].items():
        m, k, p, _rep = key.split("|")
        if (m, int(k)) in {(method, K), (baseline, 0)}:
            row = sums.setdefault((m, int(p)), np.zeros(2))
            row += (len(cell["tokens"]), cell["elapsed_s"])
    prompts = sorted({p for m, p in sums if m == method} & {p for m, p in sums if m == baseline})
    if method == baseline or len(prompts) < 2:
        raise ValueError(
            f"no ({method!r}, K={K}) cells beside {baseline!r} cells on two prompts or more"
        )
    ours = np.array([sums[method, p] for p in prompts])
    base = np.array([sums[baseline, p] for p in prompts])

    def ratio(a_tok, a_s, b_tok, b_s):
        return (a_tok.sum() / a_s.sum()) / (b_tok.sum() / b_s.sum())

    res = sps.bootstrap(
        (ours[:, 0], ours[:, 1], base[:, 0], base[:, 1]),
        ratio,
        paired=True,
        vectorized=False,
        confidence_level=confidence,
        n_resamples=n_resamples,
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def runs_frame(result: dict[str, Any], *, intervals: bool = False):
    """The ``runs`` summary as a DataFrame; with ``intervals``, ``speedup_low`` and
    ``speedup_high`` from :func:`speedup_interval`."""
    import pandas as pd

    cols = (
        "method K tokens_per_s speedup alpha alpha_iid tau predicted_speedup efficiency "
        "latency_p50_ms latency_p95_ms n_cells tokens"
    ).split()
    df = pd.DataFrame(result["runs"])
    df = df[[c for c in cols if c in df.columns]]
    if intervals:
        bounds = [
            speedup_interval(result, m, int(k)) if m != "autoregressive" else (1.0, 1.0)
            for m, k in zip(df["method"], df["K"], strict=True)
        ]
        df.insert(df.columns.get_loc("speedup") + 1, "speedup_low", [b[0] for b in bounds])
        df.insert(df.columns.get_loc("speedup") + 2, "speedup_high", [b[1] for b in bounds])
    return df


def speculative_runs(files: Mapping[tuple[str, str], Any]):
    """The speculative rows (:func:`runs_frame`, with intervals) of the runs ``files`` maps from
    ``(panel, config)``, labelled so; runs from different machines are refused."""
    import pandas as pd

    runs = {key: read_json(path) for key, path in files.items()}
    check_same_machine(runs.values(), "speculative_runs")
    frames = []
    for (panel, config), result in runs.items():
        df = runs_frame(result, intervals=True)
        frames.append(df[df.method == "speculative"].assign(panel=panel, config=config))
    return pd.concat(frames, ignore_index=True)


def best_K(result: dict[str, Any], method: str = "speculative") -> int:
    """The ``K`` of a run's highest measured speedup for ``method``."""
    runs = [r for r in result["runs"] if r["method"] == method]
    if not runs:
        raise ValueError(f"method: the run holds no {method!r} runs")
    return max(runs, key=lambda r: r["speedup"])["K"]


def _speculative_by_K(result: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """A stored run's speculative summaries by ``K``."""
    return {r["K"]: r for r in result["runs"] if r["method"] == "speculative"}


# The runs behind the headline, by their names in specdec_lib/research/campaign.toml.
HEADLINE_RUNS = {
    "T1": "recommended_T1",
    "replicate": "recommended_T1_replicate",
    "greedy": "recommended_greedy",
}


def headline(runs: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The headline from :data:`HEADLINE_RUNS`: the best ``K`` of run ``T1`` (default settings)
    among the ``K`` every headline run measured (``common_K``: a ``K`` the replicate did not run
    cannot be read again on it), and that ``K`` on the replicate and greedy runs (speedup, 95%
    interval ``low``/``high``, tokens per second); plus ``best_K_T1``, the ``T1`` run's own best
    ``K``, and ``greedy_best_K``. Runs must share a machine."""
    missing = set(HEADLINE_RUNS) - set(runs)
    if missing:
        raise ValueError(f"runs: the headline needs {', '.join(sorted(missing))} as well")
    runs = {name: runs[name] for name in HEADLINE_RUNS}
    check_same_machine(runs.values(), "headline")
    common = set.intersection(*(set(_speculative_by_K(r)) for r in runs.values()))
    if not common:
        raise ValueError("runs: the headline's runs share no K")
    t1 = runs["T1"]
    K = max(common, key=lambda k: _speculative_by_K(t1)[k]["speedup"])
    out: dict[str, Any] = {"K": K, "settings": t1["settings"], "best_K_T1": best_K(t1)}
    out |= {"common_K": sorted(common), "greedy_best_K": best_K(runs["greedy"])}
    for name, result in runs.items():
        run = _speculative_by_K(result)[K]
        low, high = speedup_interval(result, "speculative", K)
        base = next(r for r in result["runs"] if r["method"] == "autoregressive")
        out[name] = dict(
            speedup=run["speedup"], low=low, high=high, tokens_per_s=run["tokens_per_s"]
        )
        out[name]["baseline_tokens_per_s"] = base["tokens_per_s"]
    out["machine"] = runs["T1"]["provenance"]["machine"]
    return out
