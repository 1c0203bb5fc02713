"""The series' figure style (:func:`set_style`, applied on import), its colours (:data:`COLORS`)
and :func:`savefig`."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import seaborn as sns
from matplotlib.figure import Figure

from ..config import FIGURES_DIR
from ..results import atomic_write

__all__ = ["COLORS", "CURVE_COLORS", "savefig", "set_style"]

# One meaning per colour: Okabe-Ito hues for lines and bars, pale tints behind them or under text.
COLORS = {
    "target": "#0072B2",  # p, autoregressive, measured
    "draft": "#E69F00",  # q
    "speculative": "#009E73",
    "hf": "#CC79A7",
    "theory": "#555555",
    "wrong": "#D55E00",  # the prototype's rule, anything that should not be
    "claimed": "#999999",
    "other": "#56B4E9",
    "early exit": "#9ecae1",
    "early exit, greedy": "#c6dbef",
    # Which path produced a token.
    "accepted": "#b7e4c7",
    "corrected": "#f4a261",
    "bonus": "#8ecae6",
    "no draft": "#d9d9d9",
}

# One colour per curve, from the series' palette (there are at most seven curves).
CURVE_COLORS = [
    COLORS[k] for k in ("target", "draft", "speculative", "hf", "other", "wrong", "theory")
]

# The series' rcParams: readable when a figure is pasted into a report without the notebook.
_RC = {
    "figure.figsize": (6.4, 4.0),
    "figure.dpi": 110,
    "savefig.dpi": 220,
    "savefig.bbox": "tight",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "legend.title_fontsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.frameon": False,
    "lines.linewidth": 1.8,
    "patch.force_edgecolor": False,  # seaborn's white bar edges would split stacked bars
    "svg.hashsalt": "specdec",
    "pdf.fonttype": 42,
}

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]*")


def set_style() -> None:
    """The series' style: seaborn's ``ticks`` theme with the series' palette and rcParams."""
    palette = CURVE_COLORS[:-1]  # the theory's grey is drawn on purpose, never by default
    sns.set_theme(context="notebook", style="ticks", palette=palette, rc=_RC)


class Saved(list):
    """The paths :func:`savefig` wrote: a list that a notebook does not display."""

    def _ipython_display_(self) -> None:
        pass


def savefig(
    name: str, fig: Figure | None = None, formats: tuple[str, ...] = ("png", "pdf")
) -> list[Path]:
    """Save ``fig`` (default: the current figure) as ``figures/<name>.<fmt>`` for each format
    (``SPECDEC_FIGURES`` moves the folder), atomically and with no date or version in the metadata,
    so a rerun rewrites identical files. Returns the paths (:class:`Saved`); raises ``ValueError``
    for a ``name`` that is not a plain file stem."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"name must be a plain file stem of letters, digits, '_' and '-' like '01_residual', "
            f"got {name!r}"
        )
    fig = fig or plt.gcf()
    paths = []
    for fmt in formats:
        metadata = {"pdf": {"CreationDate": None}, "png": {"Software": None}}.get(fmt)

        def write(f, fmt=fmt, metadata=metadata) -> None:
            fig.savefig(f, format=fmt, metadata=metadata)

        paths.append(atomic_write(FIGURES_DIR / f"{name}.{fmt}", write, binary=True))
    return Saved(paths)


set_style()
