"""specdec_lib: speculative decoding derived, proven exact and measured (see the README's
"Architecture" for the layers: the maths, decoding, drafters, pairs and measurement, training)."""

from .decoding import AutoregressiveDecoder, GenerationResult, SpeculativeDecoder
from .drafters import BaseDrafter, Drafter, ModelDrafter
from .models import ModelPair, ModelUnavailableError, load_pair
from .sampling import Verdict, Warp, acceptance_rate, residual, verify
from .trees import verify_tree

__version__ = "0.1.0"

__all__ = [
    "AutoregressiveDecoder",
    "BaseDrafter",
    "Drafter",
    "GenerationResult",
    "ModelDrafter",
    "ModelPair",
    "ModelUnavailableError",
    "SpeculativeDecoder",
    "Verdict",
    "Warp",
    "acceptance_rate",
    "load_pair",
    "residual",
    "verify",
    "verify_tree",
]
