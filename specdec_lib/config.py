"""Paths, and every ``SPECDEC_*`` switch, read in this one place.

=====================  ===================================================================
``SPECDEC_QUICK``      ``1``: fewer samples and smaller grids (CI). Checked notebook outputs
                       are the same in both modes.
``SPECDEC_REMEASURE``  ``1``: notebooks re-run their benchmarks instead of plotting the
                       committed results (default ``0``; ``make bench`` re-measures).
``SPECDEC_ROOT``       the repository root (default: the folder above this package).
``SPECDEC_FIGURES``    where ``style.savefig`` writes (default ``<root>/figures``).
``SPECDEC_CACHE``      local cache of the teacher pass and training checkpoints (default
                       ``.cache/specdec``; never committed).
=====================  ===================================================================
"""

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
# The embedded model converted once from its GGUF file (local, not committed; see models.py).
MODEL_CACHE = Path(os.environ.get("SPECDEC_MODEL_CACHE", REPO_ROOT / ".cache" / "models"))
DEFAULT_PROMPTS = DATA_DIR / "prompts.json"
DEFAULT_HEAD = DATA_DIR / "drafter" / "feature_head.safetensors"


def tree_rates_path(head: str | Path | None = None) -> Path:
    """Where a head's tree rates are committed: beside its weights, ``<head>.tree_rates.json``
    (the record of ``eval-drafter --tree 8 8``)."""
    return Path(head if head is not None else DEFAULT_HEAD).with_suffix(".tree_rates.json")


def stopped_rates_path(head: str | Path | None = None) -> Path:
    """Where a head's rates with its draft stopped by confidence are committed: beside its
    weights, ``<head>.stopped_rates.json`` (the record of ``eval-drafter --tree 8 8
    --threshold T``)."""
    return Path(head if head is not None else DEFAULT_HEAD).with_suffix(".stopped_rates.json")
