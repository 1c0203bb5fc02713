"""The attention of decoding's short passes on a CPU (:func:`decode_attention`)."""

from __future__ import annotations

from typing import Any

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

__all__ = ["DECODE_ATTENTION", "DECODE_QUERIES", "decode_attention", "decode_queries"]


# Pass lengths (new tokens) by dtype that decode_attention computes itself, where it timed faster
# than sdpa; other dtypes: one token (decode_queries).
DECODE_ATTENTION = "specdec_decode"
DECODE_QUERIES: dict[torch.dtype, range] = {torch.float32: range(2, 17)}


def decode_queries(dtype: torch.dtype) -> range:
    """The pass lengths :func:`decode_attention` computes itself in ``dtype`` (else sdpa does)."""
    return DECODE_QUERIES.get(dtype, range(1, 2))


def decode_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """A transformers attention function (``DECODE_ATTENTION``) for decoding's short passes on a
    CPU: ``query`` ``[B, H, n, D]`` (``n`` in :func:`decode_queries`) over ``key``, ``value``
    ``[B, H_kv, m, D]``, as two float32 products and a softmax, each group of query heads against
    its key-value head. Other passes, devices, dropout and training go to transformers' ``sdpa``.
    Same maths as ``sdpa``, another rounding; masks (padding, trees) are honoured for any ``n``.
    Returns ``([B, n, H, D], None)``."""
    B, H, n, D = query.shape
    H_kv, m = key.shape[1], key.shape[-2]
    if (
        n not in decode_queries(query.dtype)
        or query.device.type != "cpu"
        or (attention_mask is None and n > 1)  # causal: sdpa's is_causal
        or dropout
        or module.training
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    g = H // H_kv  # query heads h * g .. h * g + g - 1 read key-value head h
    scores = torch.matmul(query.reshape(B, H_kv, g * n, D).float(), key.float().transpose(-1, -2))
    scores.mul_(D**-0.5 if scaling is None else scaling)
    if attention_mask is not None:  # [B or 1, 1, n, m]: bool (True: attend) or additive
        # The lowest finite float, not -inf: a row that sees no key (padding) averages its values
        # instead of making NaN, which later rows would read through zero weights (0 * NaN).
        lowest = torch.finfo(torch.float32).min
        mask = attention_mask.view(attention_mask.shape[0], 1, 1, n, m)
        scores = scores.view(B, H_kv, g, n, m)
        if mask.dtype == torch.bool:
            scores.masked_fill_(~mask, lowest)
        else:
            scores.add_(mask).clamp_(min=lowest)
        scores = scores.view(B, H_kv, g * n, m)
    out = torch.matmul(torch.softmax(scores, dim=-1), value.float())
    return out.to(query.dtype).view(B, H, n, D).transpose(1, 2).contiguous(), None
