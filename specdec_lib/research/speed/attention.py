"""The attention of decoding's short passes on a CPU, registered with transformers and as the
core's CPU attention (:func:`specdec_lib.lm.register_attention`) when the wing is imported."""

from __future__ import annotations

from typing import Any

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

__all__ = ["DECODE_ATTENTION", "DECODE_QUERIES", "decode_attention", "decode_queries"]


# The passes (new tokens over the cached ones) that decode_attention computes itself, by dtype;
# the others go to sdpa. Timed side by side on a Zen 4 EPYC (the attention lever of
# research.levers, at commit 5a6d19a): in bfloat16 one query took 0.77-1.0 of sdpa's pass, more
# queries as long; in float32 two queries and more (under a mask sdpa copies the keys and values
# once per query head) 0.83-0.97, one query as long.
DECODE_ATTENTION = "specdec_decode"
DECODE_QUERIES: dict[torch.dtype, range] = {torch.float32: range(2, 17)}


def decode_queries(dtype: torch.dtype) -> range:
    """The pass lengths (new tokens) :func:`decode_attention` computes itself in ``dtype``
    (the others are sdpa's): ``DECODE_QUERIES``'s entry, else one token only."""
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
    """Attention as a transformers attention function (registered as ``DECODE_ATTENTION``), for
    decoding's passes on a CPU: a few new tokens (``query`` ``[B, H, n, D]``, ``n`` one of
    :func:`decode_queries` of its dtype) over the cache (``key``, ``value`` ``[B, H_kv, m, D]``),
    computed as two float32 products and a softmax, each group of query heads against its
    key-value head (no copies of the keys and values per head).

    PyTorch's fused CPU attention (``scaled_dot_product_attention``) is built for long queries:
    measured for one query, nine heads over three key-value heads and 64 dimensions in bfloat16
    on 2 cores, it took 38, 122 and 425 us over 70, 300 and 1000 keys, where these products took
    21, 33 and 77 us: at a 1000-token context, 10 of a one-token pass's 29 ms. Longer queries
    (a prompt's pass), a causal pass without a mask, other devices, dropout and training go to
    transformers' own ``sdpa`` attention, as do the masks (:func:`transformers.masking_utils.
    sdpa_mask`). Written by hand because neither PyTorch nor transformers has a short-query CPU
    kernel. Same maths as ``sdpa``, another rounding: both sides of a comparison run it. Masks
    (a left-padded batch's, a tree's) are honoured for any ``n``."""
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
        # A masked score is the lowest finite float, not -inf: its weight is still exactly 0
        # (exp underflows) where the row sees a key, and a row that sees none (a left-padded
        # batch's padding) averages its values instead of making NaN, which later rows would
        # read through their zero weights (0 * NaN); sdpa's own softmax makes such rows 0.
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
