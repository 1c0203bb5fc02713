"""What makes a pass fast on one kind of CPU, kept out of the core: the library's own bfloat16
product (:mod:`.kernels`, built from ``csrc/`` at first use), and ``bench``'s start-up choice of
the dtype and weight layout a run decodes in (:mod:`.choose`).

It plugs into the core through one interface, :func:`specdec_lib.models.register_packing`:
importing this package registers the packing ``"library"`` (``load_pair(pack="library")``,
``bench --pack library``), and ``bench``'s start-up timing of dtypes and weight layouts times it
beside the core's own where it can run. The command line imports it; the core never does.
"""

from __future__ import annotations

import torch

from ...models import Packing, register_packing
from .choose import choose, choose_setting
from .kernels import Bf16Linear, pack_bf16, unavailable

__all__ = ["choose", "choose_setting"]

register_packing(
    "library",
    Packing(pack=pack_bf16, layer=Bf16Linear, dtype=torch.bfloat16, unavailable=unavailable),
)
