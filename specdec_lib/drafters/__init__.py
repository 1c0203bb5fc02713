"""The drafts: the :class:`Drafter` protocol (:mod:`~.base`), a second model (:mod:`~.model`),
prompt lookup (:mod:`~.ngram`), a dynamic length (:mod:`~.dynamic`), trained heads
(:mod:`~.heads`, :mod:`~.feature`) and their int8 weights (:mod:`~.int8`)."""

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
