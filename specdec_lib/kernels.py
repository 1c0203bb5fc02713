"""A bfloat16 linear layer for CPUs with AVX2 and FMA, built from ``csrc/bf16_linear.cpp`` at
first use.

Why by hand: where a CPU has neither AVX512-BF16 nor AMX (an AVX2-only CPU, or any CPU whose
kernels are limited to AVX2), PyTorch's bfloat16 products compute every token of a pass after the
first in emulated arithmetic: a pass over 8 tokens costs about four one-token passes, and no
library we know of offers another bfloat16 product for such CPUs. This one reads each weight
once per pass, widens it to float32 in registers and multiplies it into every token of the pass
with fused multiply-adds; its cost per pass grows with the tokens only where the CPU's float32
arithmetic, not its memory, is the bound.

Its rounding: every output is the float32 sum of its bfloat16 products, accumulated in order of
the input features in one float32 lane and rounded once to bfloat16 (to nearest, ties to even).
That sum does not depend on how many tokens a call holds: a token's row is the same bit for bit
in a pass over one token and in a pass over eight (the product is batch invariant; the rest of a
pass, attention included, need not be). A model whose linear layers run it is another
floating-point rounding of the same model, as a model prepacked for oneDNN is
(:class:`~specdec_lib.lm.PackedLinear`), and decoding with it is exact with respect to it: both
sides of every comparison run the same layers.

Where oneDNN packs bfloat16 for this CPU (its arithmetic is native: AVX512-BF16 or AMX), oneDNN's
product is the faster one for passes over many tokens, and an :class:`AVX2Linear` hands the
passes of ``ONEDNN_FROM`` tokens or more to it (its weight then held in both layouts): measured
on an AMD EPYC (Zen 4, 2 cores, the 135M target in bfloat16), a pass over 1-4 tokens took 18-27
ms with this product against 28-29 with oneDNN's, and one over 5-10 tokens 31-49 against 28-32.

It is compiled by ``torch.utils.cpp_extension`` (a C++ compiler and ninja; about 30 s, once per
machine and source, cached under ``TORCH_EXTENSIONS_DIR``). :func:`unavailable` says why it cannot
run where it cannot (no AVX2, no compiler), and nothing else changes there.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "AVX2Linear",
    "ONEDNN_FROM",
    "SOURCE",
    "avx2_linear",
    "onednn_packs_bfloat16",
    "pack_avx2",
    "unavailable",
]

SOURCE = Path(__file__).with_name("csrc") / "bf16_linear.cpp"
_FLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp"]  # OpenMP: ATen's thread pool, as PyTorch's own
# Passes over this many tokens or more go to oneDNN's product where it packs bfloat16 here.
ONEDNN_FROM = 5


def unavailable() -> str | None:
    """Why the AVX2 product cannot run here (a sentence), or ``None`` where it can (it is built
    on the first call)."""
    return _built()[1]


@functools.cache
def _built() -> tuple[Any, str | None]:
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in ("AVX2", "AVX512"):
        return None, f"this CPU's kernels are {capability}, not AVX2 or AVX-512"
    try:
        from torch.utils.cpp_extension import load

        module = load(
            name="specdec_bf16_linear",
            sources=[str(SOURCE)],
            extra_cflags=_FLAGS,
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )
    except Exception as e:  # no compiler, no ninja, a failed build: say so, run without it
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, f"the AVX2 bfloat16 product could not be built here ({first[:200]})"
    return module, None


def _module() -> Any:
    module, why = _built()
    if module is None:
        raise RuntimeError(why)
    return module


def avx2_linear(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """``x @ W.T`` for a bfloat16 ``x [..., K]`` and ``packed`` = :meth:`AVX2Linear.pack`'s form of a
    bfloat16 weight ``W [N, K]``: ``[..., N]`` in bfloat16, float32 arithmetic."""
    return _module().linear(x, packed)


class AVX2Linear(torch.nn.Linear):
    """A bfloat16 linear layer on a CPU whose product is the AVX2 kernel of this module, its
    weight held packed once in blocks of 16 outputs (``[N / 16, K, 16]``) beside the loaded one
    (which training, saving and other devices still read); where ``onednn_from`` is set, passes
    over that many tokens or more run oneDNN's product on the weight prepacked for it."""

    onednn_from: int | None = None

    def pack(self, onednn_from: int | None = None) -> AVX2Linear:
        self.packed = _module().pack(self.weight.detach())
        if onednn_from is not None:
            self.onednn = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach())
            self.onednn_from = onednn_from
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.onednn_from is not None and x.numel() >= self.onednn_from * self.in_features:
            return torch.ops.mkldnn._linear_pointwise(x, self.onednn, self.bias, "none", [], "")
        y = _module().linear(x, self.packed)
        return y if self.bias is None else y + self.bias


def onednn_packs_bfloat16() -> bool:
    """Whether oneDNN packs bfloat16 weights on this CPU (its bfloat16 arithmetic is native)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(16, 16, dtype=torch.bfloat16))
    except RuntimeError:
        return False
    return True


def pack_avx2(model: torch.nn.Module, onednn_from: int | None = ONEDNN_FROM) -> int:
    """Turn every bfloat16 ``nn.Linear`` of ``model`` on a CPU whose outputs are a multiple of
    16 into an :class:`AVX2Linear`, in place; returns how many. Passes over ``onednn_from``
    tokens or more go to oneDNN's product where it packs bfloat16 on this CPU (``None``: every
    pass runs this module's). Raises ``RuntimeError`` with :func:`unavailable`'s reason where the
    product cannot run."""
    layers = [
        m
        for m in model.modules()
        if type(m) is torch.nn.Linear
        and m.weight.device.type == "cpu"
        and m.weight.dtype == torch.bfloat16
        and m.out_features % 16 == 0
    ]
    if not layers:
        return 0
    _module()
    handover = onednn_from if onednn_from is not None and onednn_packs_bfloat16() else None
    for m in layers:
        m.__class__ = AVX2Linear
        m.pack(handover)
    return len(layers)
