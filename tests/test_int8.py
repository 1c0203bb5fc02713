"""int8 head weights (``specdec_lib.drafters.int8``): close to bfloat16 and still exact; refused outside bfloat16 on a CPU."""

from __future__ import annotations

import copy

import pytest
import torch

from specdec_lib.decoding import (
    AutoregressiveDecoder,
    SpeculativeDecoder,
)
from specdec_lib.drafters.feature import FeatureDrafter
from specdec_lib.drafters.heads import FeatureHead
from specdec_lib.drafters.int8 import Int8Linear, quantize_int8
from specdec_lib.models import load_pair

PROMPT = torch.tensor([0, 5, 9, 3, 17, 4])


def test_int8_head_close_to_bf16_and_exact():
    """int8 weights change q a little (measured again for the committed draft); greedy
    speculative output stays the target's, and the weights are int8."""

    pair = load_pair("tiny-random", dtype=torch.bfloat16)
    torch.manual_seed(0)
    head = FeatureHead(pair.target, torch.arange(2, 26), init_layer=-1).eval()
    h = torch.randn(3, head.fc.out_features, dtype=torch.bfloat16)
    feats = torch.randn(1, 3, head.fc.out_features, dtype=torch.bfloat16)
    toks = torch.tensor([[3, 4, 5]])
    with torch.inference_mode():
        ref_logits = head.logits(h).float()
        ref_hidden = head(feats, toks)[0].float()
        quantize_int8(head)
        q_logits = head.logits(h).float()
        q_hidden = head(feats, toks)[0].float()
    assert any(isinstance(m, Int8Linear) for m in head.modules())
    assert not any(isinstance(m, torch.nn.Linear) for m in head.modules())
    assert isinstance(head.output, Int8Linear)  # the subset's output rows too
    head.refresh_frozen()  # re-read from the target (as after a move): they stay int8
    assert isinstance(head.output, Int8Linear)
    with torch.inference_mode():
        assert torch.equal(head.logits(h).float(), q_logits)
    rel = lambda a, b: float((a - b).norm() / b.norm())  # noqa: E731
    assert rel(q_logits, ref_logits) < 0.05 and rel(q_hidden, ref_hidden) < 0.05
    ar = AutoregressiveDecoder(pair.target, temperature=0)
    for width in (1, 2):
        sd = SpeculativeDecoder(FeatureDrafter(head), pair.target, K=2, width=width, temperature=0)
        assert sd.generate_ids(PROMPT, 20).tokens == ar.generate_ids(PROMPT, 20).tokens


def test_int8_needs_bfloat16(random_head):

    from specdec_lib.drafters.int8 import quantize_int8

    with pytest.raises(ValueError, match="bfloat16"):
        quantize_int8(copy.deepcopy(random_head))  # float32
