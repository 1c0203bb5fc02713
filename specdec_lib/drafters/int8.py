"""int8 weights for a loaded draft (inference in bfloat16 on a CPU): half the bytes per step.
The draft's ``q`` changes slightly; sampling stays exact, since drafts are drawn from that ``q``.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Int8Linear", "int8_mm", "quantize_int8"]


def _int8_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per output row: ``weight ~= w8 * scale[:, None]``."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127
    w8 = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return w8.contiguous(), scale.to(torch.bfloat16)


def int8_mm(x: torch.Tensor, w8: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x @ (w8 * scale[:, None]).T`` through the weight-only int8 kernel."""
    shape = x.shape
    y = torch._weight_int8pack_mm(x.reshape(-1, shape[-1]).contiguous(), w8, scale)
    return y.view(*shape[:-1], w8.shape[0])


class Int8Linear(nn.Module):
    """A bias-free linear layer with int8 weights (one bfloat16 scale per output row) over bfloat16
    activations, through torch's weight-only int8 kernel."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if linear.bias is not None:
            raise ValueError("Int8Linear: only bias-free layers are quantised")
        w8, scale = _int8_rows(linear.weight)
        self.register_buffer("w8", w8)
        self.register_buffer("scale", scale)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return int8_mm(x, self.w8, self.scale)


def quantize_int8(head: nn.Module) -> nn.Module:
    """Store a loaded draft's linear layers and subset output rows as int8, in place."""
    dtype = head._w_subset.dtype
    if dtype != torch.bfloat16 or head._w_subset.device.type != "cpu":
        raise ValueError(
            f"int8 weights need a bfloat16 draft on a CPU, got {dtype} on {head._w_subset.device}"
        )
    if not hasattr(torch, "_weight_int8pack_mm"):
        raise ValueError("int8 weights need torch._weight_int8pack_mm (torch >= 2.3)")
    for module in list(head.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, child_name, Int8Linear(child))
    object.__setattr__(head, "output", Int8Linear(head.output))
    return head
