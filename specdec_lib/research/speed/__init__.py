"""What makes a pass fast on one kind of CPU, kept out of the core: the library's own bfloat16
product (:mod:`.kernels`, built from ``csrc/`` at first use), the KV cache in buffers written in
place (:mod:`.cache`), the attention of decoding's short passes (:mod:`.attention`), and ``bench``'s start-up choice of the dtype and weight layout a run
decodes in (:mod:`.choose`).

It plugs into the core through its registries: importing this package registers the packing
``"library"`` (:func:`specdec_lib.models.register_packing`; ``load_pair(pack="library")``,
``bench --pack library``), which ``bench``'s start-up timing of dtypes and weight layouts times
beside the core's own where it can run, the buffers as every ``KVState``'s cache
(:func:`specdec_lib.lm.register_cache`), the attention of every pair loaded for a CPU
(:func:`specdec_lib.lm.register_attention`), and the tuning of a run's draft tree at each ``K``
from the pass costs it times (:mod:`.tuning`; :func:`specdec_lib.bench.settings.register_tree_tuner`).
The command line imports it; the core never does.
"""

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
