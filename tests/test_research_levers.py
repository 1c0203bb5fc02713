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


def test_support_lever_decodes_with_the_subset_named_and_hidden(tiny_pair, random_head):
    from types import SimpleNamespace

    import torch

    from specdec_lib.drafters import FeatureDrafter
    from specdec_lib.research.levers import support_costs, without_support

    draft = FeatureDrafter(random_head)
    assert without_support(draft).support is None and draft.support is not None
    pair = SimpleNamespace(target=tiny_pair.target, draft=draft)
    r = support_costs(pair, [torch.tensor([0, 5, 9, 3]), torch.tensor([1, 2])], max_new_tokens=8)
    for name in ("support", "whole vocabulary"):
        assert r[name]["host_ms_per_step"] > 0 and r[name]["tokens_per_s"] > 0
