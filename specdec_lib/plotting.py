"""One figure style for the series and one way out: :func:`savefig` into ``figures/``."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt

from .config import FIGURES_DIR

__all__ = ["COLORS", "savefig", "set_style"]

# Colour-blind-safe (Okabe-Ito), one meaning per colour across the series.
COLORS = {
    "target": "#0072B2",  # p, autoregressive, measured
    "draft": "#E69F00",  # q
    "speculative": "#009E73",
    "hf": "#CC79A7",
    "theory": "#555555",
    "wrong": "#D55E00",  # the prototype's rule, anything that should not be
    "claimed": "#999999",
}


def set_style() -> None:
    """The series' matplotlib style: readable when pasted into a report without the notebook."""
    matplotlib.rcParams.update(
        {
            "figure.figsize": (6.4, 4.0),
            "figure.dpi": 110,
            "savefig.dpi": 220,
            "savefig.bbox": "tight",
            "font.size": 10,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "legend.frameon": False,
            "lines.linewidth": 1.8,
            "svg.hashsalt": "specdec",
            "pdf.fonttype": 42,
        }
    )


def savefig(name: str, fig=None, formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """Save ``fig`` (default: the current figure) as ``figures/<name>.<fmt>`` for each format.

    PNG at the style's dpi for slides, PDF for papers. Returns the paths written.
    """
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"name must be a plain file stem like '01_residual', got {name!r}")
    fig = fig or plt.gcf()
    FIGURES_DIR.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = FIGURES_DIR / f"{name}.{fmt}"
        tmp = path.with_suffix(f".tmp.{fmt}")
        metadata = (
            {"CreationDate": None}
            if fmt == "pdf"
            else ({"Software": None} if fmt == "png" else None)
        )
        fig.savefig(tmp, format=fmt, metadata=metadata)
        tmp.replace(path)
        paths.append(path)
    return paths


set_style()
