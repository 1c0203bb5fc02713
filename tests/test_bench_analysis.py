"""What a stored run says (``specdec_lib.bench.analysis``): acceptance by depth of a tree, outputs
against the baseline's, bootstrap intervals, pooled repeats, and the summary of runs stored before
the tree was a step's only shape."""

import numpy as np
import pytest

from specdec_lib.bench import (
    DISTURBED_PACE,
    cell_paces,
    depth_counts,
    disturbed_cells,
    identical_outputs,
    speedup_interval,
    summarize,
    tree_rates,
)
from specdec_lib.config import RESULTS_DIR
from specdec_lib.results import machine_info, read_json


def test_tree_rates_count_by_depth():
    # steps of a tree [3, 3] at K = 2: (drafted, accepted, emitted) and the alternative kept
    steps = [[2, 2, []], [2, 1, []], [2, 1, []], [2, 0, []], [2, 2, []], [1, 0, []]]
    alt_index = [0, 0, 2, 0, 1, 0]
    r = tree_rates([{"steps": steps, "alt_index": alt_index}], K=2, width=3)
    # depth 1: 5 steps reach it (the clamped last one is not this tree), the chain's token is
    # kept in 3 (steps 0, 1, 4); of the 2 rejections one keeps alternative 2 (step 2)
    assert r["reached"] == [5, 3] and r["chain_accepted"] == [3, 1]
    assert r["chain_rejected"] == [2, 2] and r["alternative_kept"] == [[0, 1, 0], [1, 0, 0]]
    np.testing.assert_allclose(r["gamma"], [[0, 0, 0.5], [0, 0.5, 0.5]])
    np.testing.assert_allclose(r["beta"], [3 / 5, 1 / 3])
    # per depth: judged, kept (the chain's token or an alternative), the chain's token kept
    reached, kept, chain = depth_counts([{"steps": steps, "alt_index": alt_index}], 2, [3, 3])
    assert reached.tolist() == [5, 3] and kept.tolist() == [4, 2] and chain.tolist() == [3, 1]
    # a chain counts every step, the clamped one included: a position is judged once reached
    reached, kept, chain = depth_counts([{"steps": steps}], 2, [1])
    assert reached.tolist() == [6, 4] and kept.tolist() == chain.tolist() == [4, 2]


def test_identical_outputs_counts_cells_equal_to_the_baseline():
    result = {
        "settings": {"temperature": 0},
        "cells": {
            "autoregressive|0|0|0": {"tokens": [1, 2, 3]},
            "autoregressive|0|1|0": {"tokens": [4, 5, 6]},
            "speculative|2|0|0": {"tokens": [1, 2, 3]},
            "speculative|2|1|0": {"tokens": [4, 7, 6]},
        },
    }
    got = identical_outputs(result)[("speculative", 2)]
    assert got == {"cells": 2, "identical": 1, "first_divergence": [1], "fraction": 0.5}
    assert identical_outputs({**result, "settings": {"temperature": 1.0}}) == {}


def test_speedup_interval_brackets_the_pooled_speedup():
    rng = np.random.default_rng(0)
    cells = {}
    for p in range(12):
        base = rng.uniform(0.8, 1.2)
        cells[f"autoregressive|0|{p}|0"] = {"tokens": [0] * 20, "elapsed_s": 2.0 * base}
        cells[f"speculative|2|{p}|0"] = {"tokens": [0] * 20, "elapsed_s": 1.6 * base}
    low, high = speedup_interval({"cells": cells}, "speculative", 2, n_resamples=500)
    assert low <= 1.25 <= high and high - low < 1e-6  # the same ratio on every prompt
    cells["speculative|2|0|0"]["elapsed_s"] = 4.0  # one slow prompt widens the interval
    low, high = speedup_interval({"cells": cells}, "speculative", 2, n_resamples=500)
    assert low < high
    with pytest.raises(ValueError, match="two prompts"):
        speedup_interval({"cells": cells}, "speculative", 3)
    # against another K = 0 method: a baseline 1.25x slower than the first
    for p in range(12):
        slower = 1.25 * cells[f"autoregressive|0|{p}|0"]["elapsed_s"]
        cells[f"slow|0|{p}|0"] = {"tokens": [0] * 20, "elapsed_s": slower}
    low, high = speedup_interval({"cells": cells}, "autoregressive", 0, baseline="slow")
    assert low <= 1.25 <= high and high - low < 1e-6
    with pytest.raises(ValueError, match="'slow'"):
        speedup_interval({"cells": cells}, "slow", 0, baseline="slow")


@pytest.mark.parametrize(
    "name",
    [
        "campaign/bench_chain_T1.json",  # the chain: the i.i.d. model
        "campaign/bench_recommended_T1.json",  # a tree: the model by depth
        "campaign/bench_tree8-8_T1.json",  # a wide tree
    ],
)
def test_stored_runs_summarize_as_they_were_stored(name):
    path = RESULTS_DIR / name
    if not path.exists():
        pytest.skip(f"{name} is not committed")
    res = read_json(path)
    runs = {(r["method"], r["K"]): r for r in summarize(res)}
    for stored in res["runs"]:
        got = runs[stored["method"], stored["K"]]
        for key in ("speedup", "alpha", "tau", "predicted_speedup", "predicted_speedup_from_tau"):
            if stored.get(key) is not None:
                assert got[key] == pytest.approx(stored[key], rel=1e-9), (key, stored["K"])


@pytest.mark.parametrize("name", ["bench_chain_T1.json", "bench_early_exit_T1.json"])
def test_a_run_whose_draft_length_follows_the_steps_before_has_no_prediction(name):
    """HF's heuristic schedule sets each step's length from the steps before, outside the cost
    model, so its records carry no prediction rather than a wrong one. A draft that stops by
    confidence has its own model: on steps that never stopped below their cap (a fixed run read
    as one) it predicts what the fixed draft's model predicts, within the difference of their
    rates (one rate per depth, against the i.i.d. rate of the chain's model)."""
    path = RESULTS_DIR / "campaign" / name
    if not path.exists():
        pytest.skip(f"the campaign's {name} is not committed")
    res = read_json(path)
    assert res["settings"]["schedule"] == "fixed", f"{name}: a run that drafts K tokens a step"
    fixed = {(r["method"], r["K"]): r for r in summarize(res)}
    for schedule in ("heuristic", "threshold"):
        res["settings"] = {**res["settings"], "schedule": schedule}
        for r in summarize(res):
            if r["method"] != "speculative":
                continue
            want = fixed[r["method"], r["K"]]
            assert want["predicted_speedup"] > 0 and r["speedup"] == want["speedup"]
            if schedule == "heuristic":
                assert r["predicted_speedup"] is None and "efficiency" not in r
            else:
                assert r["stopped_rates"]["stop"] == [0.0] * (r["K"] - 1)
                assert r["predicted_speedup"] == pytest.approx(want["predicted_speedup"], rel=0.05)
                if "efficiency_cells" in want:  # cells that drafted nothing before the prompt
                    assert r["efficiency_cells"] == pytest.approx(
                        want["efficiency_cells"], rel=0.05
                    )


def _timed_run(seconds_at_K, rng, jitter=0.1):
    """A stored run of 6 prompts: autoregressive cells of 1 s and speculative cells at each K
    taking ``seconds_at_K[K]`` (times ``1 +- jitter``), summarised, on this machine."""
    cells = {}
    for p in range(6):
        cells[f"autoregressive|0|{p}|0"] = {"tokens": [0] * 10, "elapsed_s": 1.0}
        for K, sec in seconds_at_K.items():
            cells[f"speculative|{K}|{p}|0"] = {
                "tokens": [0] * 10,
                "elapsed_s": sec * rng.uniform(1 - jitter, 1 + jitter),
                "n_proposed": 5,
                "n_accepted": 3,
                "n_steps": 6,
                "steps": [[K, 1, 2]] * 3 + [[K, 0, 1]] * 2,
                "draft_ms": 1.0,
            }
    settings = {"seed": 0, "repeats": 1, "width": 1, "temperature": 1.0, "K": list(seconds_at_K)}
    res = {"settings": settings, "prompts": [{"category": "x"}] * 6, "cells": cells}
    return {**res, "runs": summarize(res), "provenance": {"machine": machine_info()}}


def test_headline_chooses_K_on_the_first_run_and_reads_the_replicate_there():
    from specdec_lib.bench import HEADLINE_RUNS, best_K, headline

    rng = np.random.default_rng(0)

    here = {"machine": machine_info()}
    # The first run is fastest at K = 1, the replicate at K = 2: the headline keeps K = 1.
    speeds = {"T1": {1: 0.5, 2: 0.8}, "replicate": {1: 0.8, 2: 0.5}, "greedy": {1: 0.6, 2: 0.7}}
    runs = {name: _timed_run(at_K, rng) for name, at_K in speeds.items()}
    h = headline(runs)
    assert h["K"] == 1 and h["greedy_best_K"] == 1
    assert best_K(runs["replicate"]) == 2
    assert h["replicate"]["speedup"] < h["T1"]["speedup"]
    assert h["T1"]["low"] <= h["T1"]["speedup"] <= h["T1"]["high"]
    there = {"machine": {**here["machine"], "cpu": "AMD EPYC 7B13", "isa": ["avx2"]}}
    with pytest.raises(ValueError, match="headline: the results come from 2 machines"):
        headline({**runs, "greedy": {**runs["greedy"], "provenance": there}})
    with pytest.raises(ValueError, match="runs: the headline needs greedy"):
        headline({k: v for k, v in runs.items() if k != "greedy"})
    assert set(HEADLINE_RUNS) == set(speeds)


def test_the_headline_keeps_to_the_K_every_run_measured():
    from specdec_lib.bench import headline

    rng = np.random.default_rng(0)
    # T1 is fastest at K = 3, which the replicate did not run: the headline reads K = 2 on all
    # three runs and names K = 3 as T1's own best.
    speeds = {
        "T1": {1: 0.8, 2: 0.6, 3: 0.5},
        "replicate": {1: 0.8, 2: 0.6},
        "greedy": {1: 0.6, 2: 0.7, 3: 0.5},
    }
    h = headline({name: _timed_run(at_K, rng) for name, at_K in speeds.items()})
    assert (h["K"], h["best_K_T1"], h["common_K"], h["greedy_best_K"]) == (2, 3, [1, 2], 3)
    with pytest.raises(ValueError, match="share no K"):
        headline({n: _timed_run({K: 0.5}, rng) for n, K in zip(speeds, (1, 2, 2), strict=True)})


def test_cells_run_while_the_machine_ran_slow_are_flagged():
    # a chain's pass costs: one-token pass 30 ms, the draft 2 ms (+1 ms a further token), host work
    costs = {
        "t_target_s": [0.030, 0.031, 0.032],
        "t_draft_by_k_s": [0.002, 0.003],
        "t_host_s": {"0": 0.0005, "1": 0.001, "2": 0.0015},
    }
    steps = [[0, 0, [1]], [2, 2, [1, 2, 3]], [2, 0, [4]], [1, 1, [5, 6]], [0, 0, [7]]]
    # what the model charges each cell: its prompt's pass, then each step (a baseline token
    # where it drafted none)
    spec_ms = 40 + (3 + 1.5 + 32) * 2 + (2 + 1 + 31) + 30.5
    ar_ms = 40 + 6 * 30.5
    paces = {"autoregressive": [1.0, 1.6, 1.02, 0.98, 1.0], "speculative": [1.0, 1.4, 0.97, 2.0, 1]}
    ar = {"n_steps": 7, "n_proposed": 0, "n_accepted": 0}
    spec = {"n_steps": 5, "n_proposed": 5, "n_accepted": 3, "steps": steps}
    cells = {}
    for p in range(5):
        for key, ms, fields in (
            (f"autoregressive|0|{p}|0", ar_ms, ar),
            (f"speculative|2|{p}|0", spec_ms, spec),
        ):
            rate = paces[key.split("|")[0]][p]
            cells[key] = {"tokens": [0] * 7, "elapsed_s": ms * rate / 1e3, "prefill_ms": 40.0}
            cells[key] |= fields
    settings = {"seed": 0, "repeats": 1, "tree": [1], "temperature": 1.0, "K": [2]}
    res = {"settings": settings, "prompts": [{"category": "x"}] * 5, "cells": cells, "costs": costs}
    pace = cell_paces(res)
    assert pace["autoregressive|0|0|0"] == pytest.approx(1.0)  # the median: 1.0
    assert pace["speculative|2|3|0"] == pytest.approx(2.0)
    assert disturbed_cells(res) == pytest.approx(
        {"autoregressive|0|1|0": 1.6, "speculative|2|3|0": 2.0}
    )
    assert DISTURBED_PACE == 1.5 and disturbed_cells(res, factor=1.3).keys() == {
        "autoregressive|0|1|0",
        "speculative|2|1|0",
        "speculative|2|3|0",
    }
    assert {(r["method"], r["disturbed_cells"]) for r in summarize(res)} == {
        ("autoregressive", 1),
        ("speculative", 1),
    }
    # nothing to charge: no pass costs, or cells of transformers' generation
    assert cell_paces({**res, "costs": None}) == {}
    hf = {"hf_assisted|2|0|0": {**cells["speculative|2|0|0"]}}
    assert cell_paces({**res, "cells": hf}) == {}
