"""The library's bfloat16 linear layer for CPUs, built from ``csrc/bf16_linear.cpp`` at first use
(AVX512-BF16 where :func:`pairs_here`, else AVX2). Each weight is read once a pass; each output sums
in float32 in a fixed order of the features and is rounded once to bfloat16, so it is batch
invariant: a token's row is the same bit for bit in a pass over one token or eight."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

__all__ = ["Bf16Linear", "SOURCE", "bf16_linear", "pack_bf16", "pairs_here", "unavailable"]

SOURCE = Path(__file__).with_name("csrc") / "bf16_linear.cpp"
# AVX2 for the file (its AVX512-BF16 functions say so themselves); OpenMP: ATen's thread pool.
_FLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp"]


def unavailable() -> str | None:
    """Why the library's product cannot run here (a sentence), or ``None`` (built on first call)."""
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
