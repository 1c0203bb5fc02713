"""The library's bfloat16 linear layer for CPUs, built from ``csrc/bf16_linear.cpp`` at first use.

Why by hand: PyTorch's bfloat16 products on a CPU either emulate the arithmetic of every token of
a pass after the first (where the CPU has neither AVX512-BF16 nor AMX: a pass over 8 tokens costs
about four one-token passes), or, where they do not, read the weights well below the memory's
pace in the passes decoding makes (measured on an AMD EPYC, Zen 4, 2 cores: oneDNN's prepacked
product at 17-25 GB/s over 1-8 tokens, a sum over the same weights at 25-30). No library we know
of offers another. This product reads each weight once per pass and multiplies it into every
token of the pass: with AVX512-BF16, two bfloat16 products a lane an instruction (``VDPBF16PS``);
with AVX2 and FMA only, each weight widened to float32 in registers and one fused multiply-add a
token, where a pass over more tokens costs more only where the CPU's float32 arithmetic, not its
memory, is the bound. On that Zen 4 it read the weights at 26-32 GB/s over 1-4 tokens and 22-26
over 6-8 with AVX512-BF16, and with AVX2 at 27-30 over one token, down to 10-14 over 6-8.

Its rounding: every output accumulates its products in float32 in a fixed order of the input
features, in one lane (with AVX2: one fused multiply-add a feature, in order; with AVX512-BF16:
per pair of features, the second's product then the first's, each addition rounded to float32,
subnormals flushed to zero), and is rounded once to bfloat16 (to nearest, ties to even). That sum
does not depend on how many tokens a call holds: a token's row is the same bit for bit in a pass
over one token and in a pass over eight (the product is batch invariant; the rest of a pass,
attention included, need not be). A model whose linear layers run it is another floating-point
rounding of the same model, as a model prepacked for oneDNN is
(:class:`~specdec_lib.lm.PackedLinear`), and decoding with it is exact with respect to it: both
sides of every comparison run the same layers.

It is compiled by ``torch.utils.cpp_extension`` (a C++ compiler and ninja; about 30 s, once per
machine and source, cached under ``TORCH_EXTENSIONS_DIR``). :func:`unavailable` says why it cannot
run where it cannot (no AVX2, no compiler), and nothing else changes there. Which of its two ways
a layer runs is decided when it is packed (:func:`pairs_here`): AVX512-BF16 where the CPU has it
and PyTorch's own kernels are not limited below AVX-512 (``ATEN_CPU_CAPABILITY``), so that a run
limited to AVX2 imitates an AVX2 CPU here too.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

__all__ = ["Bf16Linear", "SOURCE", "bf16_linear", "pack_bf16", "pairs_here", "unavailable"]

SOURCE = Path(__file__).with_name("csrc") / "bf16_linear.cpp"
# AVX2 for the file; its AVX512-BF16 functions say so themselves (run only where the CPU has it).
# OpenMP: ATen's thread pool, as PyTorch's own kernels use it.
_FLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp"]


def unavailable() -> str | None:
    """Why the library's product cannot run here (a sentence), or ``None`` where it can (it is
    built on the first call)."""
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
        return None, f"the library's bfloat16 product could not be built here ({first[:200]})"
    return module, None


def _module() -> Any:
    module, why = _built()
    if module is None:
        raise RuntimeError(why)
    return module


def pairs_here() -> bool:
    """Whether layers packed here run the AVX512-BF16 way (pairs of features a lane): the CPU
    has AVX512-BF16 and PyTorch's kernels run at AVX-512 (not limited to AVX2)."""
    return torch.backends.cpu.get_cpu_capability() == "AVX512" and _module().has_avx512_bf16()


def bf16_linear(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """``x @ W.T`` for a bfloat16 ``x [..., K]`` and ``packed`` = :meth:`Bf16Linear.pack`'s form
    of a bfloat16 weight ``W [N, K]``: ``[..., N]`` in bfloat16, float32 accumulation."""
    return _module().linear(x, packed)


class Bf16Linear(torch.nn.Linear):
    """A bfloat16 linear layer on a CPU whose product is this module's, its weight held packed
    once in blocks of 16 outputs (``[N / 16, K, 16]``, or ``[N / 16, K / 2, 16, 2]`` for
    AVX512-BF16) beside the loaded one (which training, saving and other devices still read)."""

    def pack(self, pairs: bool | None = None) -> Bf16Linear:
        """Pack the weight, in pairs of features (AVX512-BF16) where ``pairs`` says so (default:
        :func:`pairs_here`, where the number of features is even)."""
        if pairs is None:
            pairs = pairs_here() and self.in_features % 2 == 0
        self.packed = _module().pack(self.weight.detach(), pairs)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _module().linear(x, self.packed)
        return y if self.bias is None else y + self.bias


def pack_bf16(model: torch.nn.Module) -> int:
    """Turn every bfloat16 ``nn.Linear`` of ``model`` on a CPU whose outputs are a multiple of
    16 into a :class:`Bf16Linear`, in place; returns how many. Raises ``RuntimeError`` with
    :func:`unavailable`'s reason where the product cannot run."""
    layers = [
        m
        for m in model.modules()
        if type(m) is torch.nn.Linear
        and m.weight.device.type == "cpu"
        and m.weight.dtype == torch.bfloat16
        and m.out_features % 16 == 0
    ]
    if layers:
        _module()
    for m in layers:
        m.__class__ = Bf16Linear
        m.pack()
    return len(layers)
