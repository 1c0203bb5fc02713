"""A draft's acceptance by decoding (``specdec_lib.training.evaluate``) on the tiny pair; the whole
evaluation runs through ``eval-drafter`` in ``tests/test_cli.py``."""

import pytest

from specdec_lib.drafters.feature import FeatureDrafter
from specdec_lib.training import EvalSettings, acceptance


def test_acceptance_counts_every_proposal_at_K1(tiny_pair, random_head):
    prompts = [{"text": "abc abc abc"}, {"text": "hello"}]
    res = acceptance(
        tiny_pair, prompts, K=1, max_new_tokens=12, seeds=(0, 1), draft=FeatureDrafter(random_head)
    )
    # 12 tokens: the first step has no features, then one draft per step while there is room.
    assert 0 < res["proposed"] <= 4 * 10 and res["proposed"] == sum(
        c["proposed"] for c in res["per_prompt"]
    )
    assert 0 <= res["alpha"] <= 1 and res["by_position"][0] == pytest.approx(res["alpha"])
    same = acceptance(
        tiny_pair, prompts, K=1, max_new_tokens=12, seeds=(0, 1), draft=FeatureDrafter(random_head)
    )
    assert same["accepted"] == res["accepted"]  # seeded


def test_a_wide_tree_measures_the_rates_of_every_narrower_one(tiny_pair, random_head):
    prompts = [{"text": "abc abc abc"}, {"text": "hello"}]
    kw = dict(max_new_tokens=16, seeds=(0, 1), draft=FeatureDrafter(random_head))
    res = acceptance(tiny_pair, prompts, K=2, tree=[3, 2], **kw)
    r = res["tree_rates"]
    assert r["widths"] == [3, 2] and res["settings"]["tree"] == [3, 2]
    assert len(r["beta"]) == 2 and len(r["gamma"][0]) == 3
    assert all(0 <= g <= 1 for row in r["gamma"] for g in row if g == g)
    # the chain measures no alternatives
    assert "tree_rates" not in acceptance(tiny_pair, prompts, K=2, **kw)
    with pytest.raises(ValueError, match="width=2 and tree"):
        EvalSettings(width=2, tree=[2, 2])
    # a draft stopped by confidence: the rates of every narrower tree around the drafts it makes
    res = acceptance(tiny_pair, prompts, K=3, tree=[3, 2], threshold=0.5, **kw)
    r = res["stopped_rates"]
    assert "tree_rates" not in res and res["settings"]["threshold"] == 0.5
    assert (r["widths"], r["threshold"], len(r["stop"]), len(r["go"]["gamma"][0])) == (
        [3, 2, 1],
        0.5,
        2,
        3,
    )
    assert sum(r["stopped"]) > 0  # it stopped below its cap
    with pytest.raises(ValueError, match="threshold"):
        EvalSettings(threshold=1.5)


def test_saved_head_weights_only_for_trained_drafts_that_exist(tmp_path):
    with pytest.raises(ValueError, match="head: saved weights are for the trained drafts"):
        EvalSettings(draft="early-exit", head="data/drafter/feature_head.safetensors")
    with pytest.raises(ValueError, match="head: no saved draft weights"):
        EvalSettings(draft="trained-int8", head=str(tmp_path / "missing.safetensors"))
    s = EvalSettings(draft="trained-int8", head="data/drafter/feature_head.safetensors")
    assert s.head.endswith("feature_head.safetensors")
