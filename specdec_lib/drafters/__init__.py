"""Drafters beyond a plain second model, each a :class:`~specdec_lib.decoding.Drafter`.

:mod:`~.ngram` prompt lookup; :mod:`~.dynamic` a dynamic draft length around any drafter;
:mod:`~.heads` the trained drafts (a feature head, small layer drafts; saved and loaded),
:mod:`~.feature` the head as a drafter, :mod:`~.int8` int8 weights for a loaded draft.
"""

from .dynamic import DynamicK
from .feature import FeatureDrafter, drafter_for
from .heads import FeatureHead, LayerDraft, load_head, save_head
from .int8 import quantize_int8
from .ngram import NgramDrafter

__all__ = [
    "DynamicK",
    "FeatureDrafter",
    "FeatureHead",
    "LayerDraft",
    "NgramDrafter",
    "drafter_for",
    "load_head",
    "quantize_int8",
    "save_head",
]
