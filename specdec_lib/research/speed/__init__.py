"""Fast CPU passes, kept out of the core: a bfloat16 product (:mod:`.kernels`), a KV cache written
in place (:mod:`.cache`), short-pass attention (:mod:`.attention`), ``bench``'s dtype choice
(:mod:`.choose`) and tree tuning (:mod:`.tuning`). Importing it registers them with the core
(packing ``"library"``, cache, attention, tree tuner); the core never imports it."""

from __future__ import annotations

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import sdpa_mask

from ...bench.settings import register_tree_tuner
from ...lm import register_attention, register_cache
from ...models import Packing, register_packing
from . import tuning
from .attention import DECODE_ATTENTION, decode_attention, decode_queries
from .cache import BufferCache
from .choose import choose, choose_setting
from .kernels import Bf16Linear, pack_bf16, unavailable

__all__ = ["choose", "choose_setting"]

register_packing(
    "library",
    Packing(pack=pack_bf16, layer=Bf16Linear, dtype=torch.bfloat16, unavailable=unavailable),
)
register_cache(BufferCache)
AttentionInterface.register(DECODE_ATTENTION, decode_attention)
AttentionMaskInterface.register(DECODE_ATTENTION, sdpa_mask)
register_attention(DECODE_ATTENTION, decode_queries)
register_tree_tuner(tuning)
