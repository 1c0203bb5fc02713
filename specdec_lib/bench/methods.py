"""The methods a benchmark run measures, in the order its summary lists them: the autoregressive
baseline every speedup is relative to, this library's speculative decoding, and transformers'
assisted and plain ``generate`` on the same pair."""

__all__ = ["DEFAULT_METHODS", "METHODS"]

METHODS = ("autoregressive", "speculative", "hf_assisted", "hf_autoregressive")
DEFAULT_METHODS = METHODS
