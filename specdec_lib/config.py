"""Paths and switches shared by the library, the CLI and the notebooks."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DATA_DIR", "FIGURES_DIR", "QUICK", "REPO_ROOT", "RESULTS_DIR", "quick"]

REPO_ROOT = Path(os.environ.get("SPECDEC_ROOT", Path(__file__).resolve().parents[1]))
DATA_DIR = REPO_ROOT / "data"
RESULTS_DIR = DATA_DIR / "results"
FIGURES_DIR = Path(os.environ.get("SPECDEC_FIGURES", REPO_ROOT / "figures"))


def quick() -> bool:
    """True when ``SPECDEC_QUICK=1``: fewer samples and smaller grids, for CI. Checked notebook
    outputs are the same in both modes."""
    return os.environ.get("SPECDEC_QUICK", "0").strip().lower() in ("1", "true", "yes", "on")


QUICK = quick()
