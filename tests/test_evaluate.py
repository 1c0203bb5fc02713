"""A draft's acceptance by decoding (``specdec_lib.training.evaluate``) on the tiny pair; the whole
evaluation runs through ``eval-drafter`` in ``tests/test_cli.py``."""

import pytest

from specdec_lib.drafters.feature import FeatureDrafter
from specdec_lib.training import acceptance


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
