"""Levers measured side by side (``specdec_lib.research.levers``), on the tiny pair: the record's
shape only (speed is a benchmark, not a test)."""

from specdec_lib.research.levers import packing_costs


def test_packing_costs_time_both_variants_at_every_pass_size():
    r = packing_costs("float32", pair="tiny-random", n_max=3, reps=1)
    assert r["pack_applied"] is True and r["dtype"] == "float32"
    for variant in ("plain", "packed"):
        assert len(r[variant]["t_target_s"]) == 3 and r[variant]["t_draft_s"] > 0
        assert r[variant]["t_n_over_t_1"][0] == 1.0
    assert len(r["packed_over_plain"]) == 3 and all(x > 0 for x in r["packed_over_plain"])
