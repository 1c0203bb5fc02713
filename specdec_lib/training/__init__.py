"""Offline code that makes a trained draft: data (:mod:`.data`), distillation (:mod:`.distill`),
evaluation (:mod:`.evaluate`), model cards (:mod:`.card`). The core never imports it."""

from .card import model_card
from .data import DataSettings, generate_onpolicy, iter_sequences, load_manifest, summary
from .distill import TrainSettings, teacher_pass, train_drafter
from .evaluate import EvalSettings, acceptance, evaluate_drafter

__all__ = [
    "DataSettings",
    "EvalSettings",
    "TrainSettings",
    "acceptance",
    "evaluate_drafter",
    "generate_onpolicy",
    "iter_sequences",
    "load_manifest",
    "model_card",
    "summary",
    "teacher_pass",
    "train_drafter",
]
