"""specdec_lib: speculative decoding derived, proven exact and measured.

Modules, in the order data flows: :mod:`~specdec_lib.sampling` (the math) ->
:mod:`~specdec_lib.decoding` (models and KV caches) -> :mod:`~specdec_lib.bench` (measured runs) ->
the notebooks. :mod:`~specdec_lib.stats` and :mod:`~specdec_lib.theory` hold the exact laws, the tests
and the closed-form predictions; :mod:`~specdec_lib.models` the named model pairs;
:mod:`~specdec_lib.drafters` drafters other than a plain second model (prompt lookup, dynamic K).
"""

from .decoding import (
    AutoregressiveDecoder,
    Drafter,
    GenerationResult,
    ModelDrafter,
    SpeculativeDecoder,
    StepRecord,
)
from .drafters import DynamicK, NgramDrafter
from .models import ModelPair, ModelUnavailableError, load_pair
from .sampling import Verdict, Warp, acceptance_rate, residual, verify

__version__ = "0.1.0"

__all__ = [
    "AutoregressiveDecoder",
    "Drafter",
    "DynamicK",
    "GenerationResult",
    "ModelDrafter",
    "ModelPair",
    "ModelUnavailableError",
    "NgramDrafter",
    "SpeculativeDecoder",
    "StepRecord",
    "Verdict",
    "Warp",
    "acceptance_rate",
    "load_pair",
    "residual",
    "verify",
]
