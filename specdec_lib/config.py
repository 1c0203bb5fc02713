"""Paths and every ``SPECDEC_*`` switch, read in this one place: ``SPECDEC_QUICK=1``, fewer
samples and smaller grids (same checked notebook outputs); ``SPECDEC_REMEASURE=1``, notebooks
re-run their benchmarks; ``SPECDEC_ROOT``, ``SPECDEC_FIGURES``, ``SPECDEC_CACHE`` and
``SPECDEC_MODEL_CACHE`` override the paths below."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "CACHE_DIR",
    "DATA_DIR",
    "DEFAULT_HEAD",
    "DEFAULT_PROMPTS",
    "FIGURES_DIR",
    "MODEL_CACHE",
    "REPO_ROOT",
    "RESULTS_DIR",
    "stopped_rates_path",
    "tree_rates_path",
    "quick",
    "remeasure",
]


def _flag(name: str, default: str = "0") -> bool:
    return os.environ.get(name, default).strip().lower() in ("1", "true", "yes", "on")


def quick() -> bool:
    """True when ``SPECDEC_QUICK=1``."""
    return _flag("SPECDEC_QUICK")


def remeasure() -> bool:
    """True when ``SPECDEC_REMEASURE=1``."""
    return _flag("SPECDEC_REMEASURE")


REPO_ROOT = Path(os.environ.get("SPECDEC_ROOT", Path(__file__).resolve().parents[1]))
DATA_DIR = REPO_ROOT / "data"
RESULTS_DIR = DATA_DIR / "results"
FIGURES_DIR = Path(os.environ.get("SPECDEC_FIGURES", REPO_ROOT / "figures"))
CACHE_DIR = Path(os.environ.get("SPECDEC_CACHE", ".cache/specdec"))
# The embedded model converted once from its GGUF file (see models.py).
MODEL_CACHE = Path(os.environ.get("SPECDEC_MODEL_CACHE", REPO_ROOT / ".cache" / "models"))
DEFAULT_PROMPTS = DATA_DIR / "prompts.json"
DEFAULT_HEAD = DATA_DIR / "drafter" / "feature_head.safetensors"


def tree_rates_path(head: str | Path | None = None) -> Path:
    """A head's committed tree rates, ``<head>.tree_rates.json`` (``eval-drafter --tree 8 8``)."""
    return Path(head if head is not None else DEFAULT_HEAD).with_suffix(".tree_rates.json")


def stopped_rates_path(head: str | Path | None = None) -> Path:
    """A head's committed rates with its draft stopped by confidence,
    ``<head>.stopped_rates.json`` (``eval-drafter --tree 8 8 --threshold T``)."""
    return Path(head if head is not None else DEFAULT_HEAD).with_suffix(".stopped_rates.json")
