"""The drafts: the :class:`Drafter` protocol and what implements it.

:mod:`~.base` the protocol, its defaults and a plain second model (:class:`ModelDrafter`);
:mod:`~.ngram` prompt lookup; :mod:`~.dynamic` a dynamic draft length around any drafter;
:mod:`~.heads` the trained drafts (a feature head, small layer drafts; saved and loaded),
:mod:`~.feature` the head as a drafter, :mod:`~.int8` int8 weights for a loaded draft.
"""

from .base import BaseDrafter, Drafter
from .dynamic import DynamicK
from .feature import FeatureDrafter, drafter_for
from .heads import FeatureHead, LayerDraft, load_head, save_head
from .int8 import quantize_int8
from .model import ModelDrafter, as_drafter
from .ngram import NgramDrafter

__all__ = [
    "BaseDrafter",
    "Drafter",
    "ModelDrafter",
    "DynamicK",
    "FeatureDrafter",
    "FeatureHead",
    "LayerDraft",
    "NgramDrafter",
    "as_drafter",
    "drafter_for",
    "load_head",
    "quantize_int8",
    "save_head",
]
