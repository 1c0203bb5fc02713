"""The library's bfloat16 product (specdec_lib.research.speed.kernels): what it computes, bit for bit, both ways
(AVX2 and, where the CPU has it, AVX512-BF16), and a pair decoding with it as its own
autoregressive baseline does."""

import copy
import dataclasses
import os
import shutil

import numpy as np
import pytest
import torch
from torch.utils.cpp_extension import is_ninja_available

from specdec_lib.research.speed import kernels
from specdec_lib.research.speed.kernels import (
    Bf16Linear,
    bf16_linear,
    pack_bf16,
    pairs_here,
    unavailable,
)

# Skipped only where the product cannot be built for want of the CPU or the tools; where both are
# here, a build that fails is a failure (the module's import below raises it), never a skip.
_CPU = torch.backends.cpu.get_cpu_capability()
_TOOLS = shutil.which(os.environ.get("CXX", "c++")) is not None and is_ninja_available()
pytestmark = pytest.mark.skipif(
    _CPU not in ("AVX2", "AVX512") or not _TOOLS,
    reason=f"no library product here: kernels {_CPU}, compiler and ninja found: {_TOOLS}",
)
if _CPU in ("AVX2", "AVX512") and _TOOLS and unavailable() is not None:
    raise RuntimeError(f"the library's product failed to build here: {unavailable()}")
WAYS = [False] + ([True] if unavailable() is None and kernels._module().has_avx512_bf16() else [])


def _bf16_bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy()


def _reference(x: torch.Tensor, w: torch.Tensor, pairs: bool = False) -> torch.Tensor:
    """The product as specified: per output, the float32 sum of the bfloat16 products in the
    product's order, rounded once to bfloat16. A product of two bfloat16 values is exact in
    float32, so each float32 addition here is the instruction's one rounding. In order of the
    features (AVX2), or per pair, the second feature's product first (AVX512-BF16; the test's
    values are far from float32's subnormals, which that way flushes to zero)."""
    xf, wf = x.float().numpy(), w.detach().float().numpy()
    order = range(xf.shape[1])
    if pairs:
        order = [k + d for k in range(0, xf.shape[1], 2) for d in (1, 0)]
    acc = np.zeros((xf.shape[0], wf.shape[0]), dtype=np.float32)
    for k in order:
        acc = acc + np.outer(xf[:, k], wf[:, k]).astype(np.float32)
    return torch.from_numpy(acc).to(torch.bfloat16)  # torch rounds to nearest, ties to even


def _linear(n_out: int, n_in: int, seed: int, bias: bool = False) -> torch.nn.Linear:
    torch.manual_seed(seed)
    layer = torch.nn.Linear(n_in, n_out, bias=bias).to(torch.bfloat16)
    return layer.requires_grad_(False)


@pytest.mark.parametrize("pairs", WAYS, ids=lambda p: "avx512-bf16" if p else "avx2")
@pytest.mark.parametrize("n_out, n_in", [(16, 2), (48, 8), (192, 64), (1024, 40)])
def test_every_output_is_its_float32_sum_in_order_rounded_once(pairs, n_out, n_in):
    layer = _linear(n_out, n_in, seed=n_out + n_in)
    packed = Bf16Linear.pack(layer, pairs).packed  # the method alone: the layer stays a Linear
    for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 13):  # every tile and the splits of longer calls
        x = torch.randn(m, n_in).to(torch.bfloat16) * 3
        got = bf16_linear(x, packed)
        assert got.dtype == torch.bfloat16 and got.shape == (m, n_out)
        assert np.array_equal(_bf16_bits(got), _bf16_bits(_reference(x, layer.weight, pairs)))


@pytest.mark.parametrize("pairs", WAYS, ids=lambda p: "avx512-bf16" if p else "avx2")
def test_a_token_s_row_does_not_depend_on_the_call_s_other_tokens(pairs):
    layer = _linear(1536, 96, seed=1)
    packed = Bf16Linear.pack(layer, pairs).packed
    x = torch.randn(2, 9, 96).to(torch.bfloat16)
    together = bf16_linear(x, packed)
    assert together.shape == (2, 9, 1536)
    alone = torch.stack([bf16_linear(row[None], packed)[0] for row in x.reshape(18, 96)])
    assert torch.equal(alone, together.reshape(18, 1536))


def test_infinities_and_nans_come_through():
    layer = _linear(16, 8, seed=2)
    packed = Bf16Linear.pack(layer, False).packed
    x = torch.ones(3, 8, dtype=torch.bfloat16)
    x[1, 0], x[2, 0] = float("inf"), float("nan")
    y = bf16_linear(x, packed).float()
    w0 = layer.weight[:, 0].float()
    assert torch.isfinite(y[0]).all()
    assert torch.equal(torch.isinf(y[1]), w0 != 0) and torch.isnan(y[1][w0 == 0]).all()
    assert torch.isnan(y[2]).all()


def test_pack_bf16_turns_bfloat16_layers_whose_outputs_fill_blocks():
    model = torch.nn.Sequential(
        _linear(32, 8, 0, bias=True), _linear(24, 32, 1), torch.nn.Linear(24, 16)
    )
    assert pack_bf16(model) == 1  # 24 outputs are not blocks of 16; float32 is not its dtype
    assert type(model[0]) is Bf16Linear and type(model[1]) is torch.nn.Linear
    assert model[0].packed.dim() == (4 if pairs_here() else 3)  # the CPU's way
    x = torch.randn(5, 8).to(torch.bfloat16)
    product = _reference(x, model[0].weight, pairs_here()).float()
    assert torch.equal(model[0](x), (product + model[0].bias.float()).to(torch.bfloat16))
    assert pack_bf16(model) == 0  # a layer is packed once


def test_unavailable_is_a_reason_where_it_cannot_run(monkeypatch):
    kernels._built.cache_clear()
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    try:
        assert "DEFAULT" in unavailable()
        with pytest.raises(RuntimeError, match="not AVX2"):
            pack_bf16(torch.nn.Sequential(_linear(16, 8, 0)))
    finally:
        monkeypatch.undo()
        kernels._built.cache_clear()
    assert unavailable() is None


def test_kernels_limited_to_avx2_pack_for_avx2(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert not pairs_here()
    assert Bf16Linear.pack(_linear(16, 8, 0)).packed.dim() == 3


def test_a_pair_on_the_library_product_packs_both_models_in_bfloat16_only():
    from specdec_lib.models import load_pair  # it decodes as its own baseline: tests/test_lm.py

    pair = load_pair("tiny-random", dtype="bfloat16", pack="library")
    assert pair.notes["packed"] and pair.notes["pack"] == "library"
    assert any(isinstance(m, Bf16Linear) for m in pair.draft.modules())
    with pytest.raises(ValueError, match="takes torch.bfloat16"):
        load_pair("tiny-random", pack="library")  # float32
    with pytest.raises(ValueError, match="pack"):
        load_pair("tiny-random", dtype="bfloat16", pack="onednn")


def test_a_trained_head_on_the_library_product_has_its_output_rows_packed_too(tiny_pair):
    """The head's output rows (a frozen piece of the target's, not a submodule) are packed with
    its own layers, and its logits are theirs through the library's product."""
    from specdec_lib.drafters.heads import FeatureHead
    from specdec_lib.models import _pack

    torch.manual_seed(0)
    target = copy.deepcopy(tiny_pair.target).to(torch.bfloat16)
    head = FeatureHead(target, torch.arange(0, 32), init_layer=-1).eval()
    h = torch.randn(3, head.fc.out_features, dtype=torch.bfloat16)
    with torch.inference_mode():
        plain = head.logits(h)
        assert _pack(head, "library") == 9  # fc, q, k, v, o, gate, up, down and the output rows
        assert isinstance(head.output, Bf16Linear)
        packed = head.logits(h)
        assert torch.equal(packed, bf16_linear(head._norm(h), head.output.packed))
    torch.testing.assert_close(packed.float(), plain.float(), rtol=0.02, atol=0.02)


def test_a_product_that_cannot_run_is_one_line_on_the_command_line(monkeypatch, capsys):
    from specdec_lib import models
    from specdec_lib.__main__ import main

    cannot = dataclasses.replace(models.PACKINGS["library"], unavailable=lambda: "no compiler")
    monkeypatch.setitem(models.PACKINGS, "library", cannot)
    argv = ["bench", "--pair", "tiny-random", "--dtype", "bfloat16", "--pack", "library"]
    assert main([*argv, "--K", "1", "--max-new-tokens", "2", "--out", os.devnull]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no compiler" in err and "'on' or 'off'" in err


def test_a_backend_packing_not_imported_names_its_backend(monkeypatch):
    from specdec_lib import models

    monkeypatch.delitem(models.PACKINGS, "library")
    with pytest.raises(ValueError, match="specdec_lib.research.speed"):
        models.load_pair("tiny-random", dtype="bfloat16", pack="library")
