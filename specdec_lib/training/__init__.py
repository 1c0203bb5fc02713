"""Offline research code that makes a trained draft: on-policy data (:mod:`.data`), the teacher
pass and distillation (:mod:`.distill`), a draft's evaluation by decoding (:mod:`.evaluate`), model
cards (:mod:`.card`). Notebook 05 tells the story; nothing in the core imports this package."""

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
