"""The device-cost run (``specdec_lib.research.device_costs``), dry on this CPU with tiny settings: the
default target's architecture with random weights, the committed head, costs, generate's per-token
time, and the predicted curves built from the campaign's acceptance of the chain."""

import json

import pytest

from specdec_lib.__main__ import main
from specdec_lib.research.device_costs import (
    CostSettings,
    measure_device_costs,
    predicted_curves,
)

TINY = dict(device="cpu", n_max=4, K_max=2, context=8, reps=1, generate_tokens=2)


def test_dry_run_on_this_cpu(tmp_path, capsys):
    argv = ["device-costs", "--out", str(tmp_path)]
    for k, v in TINY.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    assert main(argv) == 0
    res = json.loads((tmp_path / "device_costs_cpu.json").read_text())
    assert len(res["costs"]["t_target_s"]) == 4 and res["costs"]["t_draft_s"] > 0
    assert "int8" in res["draft_costs"] and res["generate"]["eager_s_per_token"] > 0
    assert {(r["width"], r["K"]) for r in res["predicted"]} == {(1, 1), (1, 2)}
    assert res["label"].startswith("costs measured on this CPU")
    assert res["provenance"]["settings"]["n_max"] == 4
    assert "predicted" in capsys.readouterr().out


def test_predictions_follow_the_cost_model():
    costs = {"t_target_s": [1.0, 1.0, 1.5, 2.0], "t_draft_s": 0.1}
    acc = {1: {"alpha_by_position": [0.5]}, 2: {"alpha_by_position": [0.6, 0.4]}}
    rows = {(r["width"], r["K"]): r for r in predicted_curves(costs, acc, 2)}
    assert rows[1, 1]["predicted_speedup"] == pytest.approx(1.5 / 1.1)
    assert rows[1, 2]["tokens_per_step"] == pytest.approx(1.75)  # the last rate repeats
    assert rows[1, 2]["extrapolated"] and not rows[2, 2]["extrapolated"]
    assert rows[2, 2]["predicted_speedup"] == pytest.approx((1 + 0.6 + 0.24) / 2.2)


def test_settings_refuse_too_few_pass_sizes():
    with pytest.raises(ValueError, match="n_max must be at least K_max \\+ 2"):
        measure_device_costs(CostSettings(**{**TINY, "n_max": 3}))
