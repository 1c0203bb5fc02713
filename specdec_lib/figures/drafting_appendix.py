"""The figures of ``notebooks/06_drafting_appendix.ipynb`` (the drafting appendix): training curves,
acceptance by tree depth, the trees' ceiling. Its speedups use
:func:`~specdec_lib.figures.drafting_strategies.speedup_intervals`."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from .drafting_strategies import BOUND_LABEL, training_curves
from .style import COLORS, CURVE_COLORS

__all__ = [
    "full_training",
    "pilot_curves",
    "tree_acceptance",
    "tree_ceiling",
]


def pilot_curves(curves: Mapping[str, pd.DataFrame], *, title: str) -> Figure:
    """Notebook 06, ``06_pilot_curves``: each pilot's held-out acceptance bound during training
    (``curves[name]``: a training history with ``step`` and ``eval_alpha``)."""
    fig, ax = plt.subplots(figsize=(8.5, 4))
    training_curves(ax, curves, "step")
    ax.set(xlabel="training step (8 sequences each)", title=title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=9)
    return fig


def full_training(history: pd.DataFrame, *, alpha_decoding: float) -> Figure:
    """Notebook 06, ``06_full_training``: the acceptance bound of the full-data head during
    training, on the held-out shards and on the training batches (``history``: ``tokens seen``,
    ``eval_alpha``, ``train_alpha``), against the rate measured by decoding (``alpha_decoding``)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    seen = history["tokens seen"] / 1e6
    ax.plot(seen, history.eval_alpha, "o-", ms=3, color=COLORS["draft"], label="held-out shards")
    ax.plot(
        seen,
        history.train_alpha,
        ".",
        ms=3,
        color=COLORS["target"],
        alpha=0.5,
        label="training batches",
    )
    ax.axhline(
        alpha_decoding,
        color=COLORS["speculative"],
        ls="--",
        label=f"measured by decoding, held-out prompts ({alpha_decoding:.3f})",
    )
    ax.set(
        xlabel="training positions seen (millions)",
        ylabel=BOUND_LABEL.replace("held-out ", ""),
        title="The feature head during training on all the data (T = 1)",
    )
    ax.legend(loc="lower right", fontsize=9)
    return fig


def tree_acceptance(rates: pd.DataFrame, *, title: str) -> Figure:
    """Notebook 06, ``06_tree_acceptance``: P(a reached depth yields a token) against the
    candidates checked there, a line per depth, a panel per ``panel`` (``rates``: ``panel``,
    ``depth``, ``candidates``, ``rate`` and its 95% interval ``lo``-``hi``)."""
    panels = list(dict.fromkeys(rates["panel"]))
    depths = sorted(set(rates["depth"]))
    colors = dict(zip(depths, CURVE_COLORS, strict=False))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.2 * len(panels), 4.0), sharey=True, squeeze=False
    )
    for ax, panel in zip(axes[0], panels, strict=True):
        here = rates[rates["panel"] == panel]
        for i, depth in enumerate(depths):
            d = here[here["depth"] == depth].sort_values("candidates")
            x = d["candidates"].to_numpy(float) + (i - (len(depths) - 1) / 2) * 0.08
            err = np.vstack([d["rate"] - d["lo"], d["hi"] - d["rate"]]).clip(min=0)
            ax.errorbar(
                x,
                d["rate"],
                yerr=err,
                fmt="o-",
                ms=4,
                capsize=2,
                color=colors[depth],
                label=f"depth {depth}",
            )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(xlabel="candidates checked at the depth", title=panel, ylim=(0, 1))
    axes[0][0].set_ylabel("P(the depth yields a token | reached)\nbars: 95% Wilson interval")
    axes[0][0].legend(loc="lower right", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def tree_ceiling(curves: pd.DataFrame, measured: pd.DataFrame, *, title: str) -> Figure:
    """Notebook 06, ``06_tree_ceiling``: speedup against the draft tokens a pass checks, a panel
    per ``panel``: cost-model lines (``curves``: ``panel``, ``curve``, ``nodes``,
    ``predicted_speedup``; the first ``curve`` the ceiling, its maximum marked) and measured runs
    (``measured``: ``panel``, ``nodes``, ``speedup``, ``speedup_low``/``_high``, ``label``)."""
    panels = list(dict.fromkeys(curves["panel"]))
    names = list(dict.fromkeys(curves["curve"]))
    styles = [
        dict(color=COLORS["theory"], lw=2.0),
        dict(color=COLORS["other"], lw=1.6, ls="--"),
    ]
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.6 * len(panels), 4.2), sharey=True, squeeze=False
    )
    for ax, panel in zip(axes[0], panels, strict=True):
        ax.axhline(1.0, color="#bbbbbb", lw=0.8, zorder=0)
        for name, style in zip(names, styles, strict=False):
            c = curves[(curves["panel"] == panel) & (curves["curve"] == name)].sort_values("nodes")
            ax.plot(c["nodes"], c["predicted_speedup"], label=name, **style)
            if name == names[0]:
                top = c.loc[c["predicted_speedup"].idxmax()]
                ax.plot(top["nodes"], top["predicted_speedup"], "v", color=style["color"], ms=7)
                ax.annotate(
                    f"{top['predicted_speedup']:.2f}× at {top['nodes']:.0f} nodes",
                    (top["nodes"], top["predicted_speedup"]),
                    xytext=(8, 8),
                    textcoords="offset points",
                    fontsize=9,
                    color=style["color"],
                )
        m = measured[measured["panel"] == panel]
        for label, d in m.groupby("label", sort=False):
            err = np.vstack([d["speedup"] - d["speedup_low"], d["speedup_high"] - d["speedup"]])
            ax.errorbar(
                d["nodes"],
                d["speedup"],
                yerr=err.clip(min=0),
                fmt="o",
                ms=5,
                capsize=3,
                color=COLORS["speculative"],
                label=label,
            )
        ax.set(xlabel="draft tokens checked per target pass (tree nodes)", title=panel)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axes[0][0].set_ylabel("speedup over autoregressive decoding")
    axes[0][0].legend(loc="lower right", fontsize=8.5)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
