"""The library's AVX2 bfloat16 product (specdec_lib.kernels): what it computes, bit for bit, and
a pair decoding with it as its own autoregressive baseline does."""

import numpy as np
import pytest
import torch

from specdec_lib import kernels
from specdec_lib.kernels import (
    ONEDNN_FROM,
    AVX2Linear,
    avx2_linear,
    onednn_packs_bfloat16,
    pack_avx2,
    unavailable,
)

pytestmark = pytest.mark.skipif(
    unavailable() is not None, reason=f"no AVX2 product here: {unavailable()}"
)


def _bf16_bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy()


def _reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The product as specified: per output, the float32 sum of the bfloat16 products in order of
    the input features, rounded once to bfloat16. A product of two bfloat16 values is exact in
    float32, so each float32 addition here is the fused multiply-add's one rounding."""
    xf, wf = x.float().numpy(), w.detach().float().numpy()
    acc = np.zeros((xf.shape[0], wf.shape[0]), dtype=np.float32)
    for k in range(xf.shape[1]):
        acc = acc + np.outer(xf[:, k], wf[:, k]).astype(np.float32)
    return torch.from_numpy(acc).to(torch.bfloat16)  # torch rounds to nearest, ties to even


def _linear(n_out: int, n_in: int, seed: int, bias: bool = False) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(n_in, n_out, bias=bias).to(torch.bfloat16).requires_grad_(False)


@pytest.mark.parametrize("n_out, n_in", [(16, 1), (48, 7), (192, 64), (1024, 40)])
def test_every_output_is_its_float32_sum_in_order_rounded_once(n_out, n_in):
    layer = _linear(n_out, n_in, seed=n_out + n_in)
    packed = AVX2Linear.pack(layer).packed  # the method alone: the layer itself stays a Linear
    for m in (1, 2, 3, 4, 5, 6, 7, 8, 13):  # every tile and the splits of longer calls
        x = torch.randn(m, n_in).to(torch.bfloat16) * 3
        got = avx2_linear(x, packed)
        assert got.dtype == torch.bfloat16 and got.shape == (m, n_out)
        assert np.array_equal(_bf16_bits(got), _bf16_bits(_reference(x, layer.weight)))


def test_a_token_s_row_does_not_depend_on_the_call_s_other_tokens():
    layer = _linear(1536, 96, seed=1)
    packed = AVX2Linear.pack(layer).packed
    x = torch.randn(2, 8, 96).to(torch.bfloat16)
    together = avx2_linear(x, packed)
    assert together.shape == (2, 8, 1536)
    alone = torch.stack([avx2_linear(row[None], packed)[0] for row in x.reshape(16, 96)])
    assert torch.equal(alone, together.reshape(16, 1536))


def test_infinities_and_nans_come_through():
    layer = _linear(16, 8, seed=2)
    packed = AVX2Linear.pack(layer).packed
    x = torch.ones(3, 8, dtype=torch.bfloat16)
    x[1, 0], x[2, 0] = float("inf"), float("nan")
    y = avx2_linear(x, packed).float()
    w0 = layer.weight[:, 0].float()
    assert torch.isfinite(y[0]).all()
    assert torch.equal(torch.isinf(y[1]), w0 != 0) and torch.isnan(y[1][w0 == 0]).all()
    assert torch.isnan(y[2]).all()


def test_pack_avx2_turns_bfloat16_layers_whose_outputs_fill_blocks():
    model = torch.nn.Sequential(
        _linear(32, 8, 0, bias=True), _linear(24, 32, 1), torch.nn.Linear(24, 16)
    )
    assert pack_avx2(model, onednn_from=None) == 1  # 24 outputs; float32 is not its dtype
    assert type(model[0]) is AVX2Linear and type(model[1]) is torch.nn.Linear
    x = torch.randn(5, 8).to(torch.bfloat16)
    expected = (_reference(x, model[0].weight).float() + model[0].bias.float()).to(torch.bfloat16)
    assert torch.equal(model[0](x), expected)
    assert pack_avx2(model) == 0  # a layer is packed once


@pytest.mark.skipif(not onednn_packs_bfloat16(), reason="oneDNN does not pack bfloat16 here")
def test_passes_over_many_tokens_go_to_onednn_where_it_packs_bfloat16():
    from specdec_lib.lm import PackedLinear

    layer, onednn = _linear(64, 32, 3), _linear(64, 32, 3)
    assert pack_avx2(torch.nn.Sequential(layer)) == 1 and layer.onednn_from == ONEDNN_FROM
    onednn.__class__ = PackedLinear
    onednn.pack()
    for m in range(1, ONEDNN_FROM + 3):
        x = torch.randn(m, 32).to(torch.bfloat16)
        expected = onednn(x) if m >= ONEDNN_FROM else _reference(x, layer.weight)
        assert torch.equal(layer(x), expected)


def test_unavailable_is_a_reason_where_it_cannot_run(monkeypatch):
    kernels._built.cache_clear()
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    try:
        assert "DEFAULT" in unavailable()
        with pytest.raises(RuntimeError, match="not AVX2"):
            pack_avx2(torch.nn.Sequential(_linear(16, 8, 0)))
    finally:
        monkeypatch.undo()
        kernels._built.cache_clear()
    assert unavailable() is None


def test_a_pair_packed_for_avx2_decodes_greedily_as_its_own_autoregressive_baseline():
    from specdec_lib.decoding import AutoregressiveDecoder, SpeculativeDecoder
    from specdec_lib.models import load_pair

    pair = load_pair("tiny-random", dtype="bfloat16", pack="avx2")
    assert pair.notes["packed"] and pair.notes["pack"] == "avx2"
    assert any(isinstance(m, AVX2Linear) for m in pair.draft.modules())
    ids = torch.tensor([0, 5, 9, 3])
    ar = AutoregressiveDecoder(pair.target, temperature=0).generate_ids(ids, 12)
    for tree in ((1,), (3, 2)):
        spec = SpeculativeDecoder(pair.draft, pair.target, K=3, tree=tree, temperature=0)
        assert spec.generate_ids(ids, 12).tokens == ar.tokens
    with pytest.raises(ValueError, match="bfloat16 product"):
        load_pair("tiny-random", pack="avx2")  # float32
    with pytest.raises(ValueError, match="pack"):
        load_pair("tiny-random", dtype="bfloat16", pack="onednn")
