"""The figures of ``notebooks/04_acceptance_by_prompt_type.ipynb`` (acceptance by prompt type):
acceptance by prompt category, and which path produced each generated token."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .style import COLORS

__all__ = ["TOKEN_KINDS", "alpha_by_category", "token_view"]

# The paths a generated token can come from, in the legend's order (colours in COLORS).
TOKEN_KINDS = ("accepted", "corrected", "bonus", "no draft")


def alpha_by_category(
    tables: Mapping[str, pd.DataFrame],
    *,
    categories: Sequence[str],
    claim: Mapping[str, float],
    per_prompt: pd.DataFrame | None = None,
) -> Figure:
    """Notebook 04, ``04_alpha_by_category``: acceptance by prompt category, one bar per run
    (``tables[run]`` by category: ``alpha``, 95 % interval ``lo``-``hi``), prompts as dots
    (``per_prompt``: ``run``, ``category``, ``alpha``), the prototype's ``claim`` as diamonds."""
    fig, ax = plt.subplots(figsize=(9.0, 4.2))
    x = np.arange(len(categories))
    width = 0.8 / len(tables)
    # four hues a reader tells apart in print: the untrained draft pale, the trained head's runs full
    colors = [COLORS[k] for k in ("early exit", "draft", "speculative", "target")]
    for j, (name, t) in enumerate(tables.items()):
        t = t.loc[list(categories)]
        err = np.vstack([t.alpha - t.lo, t.hi - t.alpha]).clip(min=0)
        ax.bar(
            x + (j - (len(tables) - 1) / 2) * width,
            t.alpha,
            width,
            yerr=err,
            capsize=2,
            color=colors[j % len(colors)],
            label=f"measured, {name}",
        )
    handles = []
    if per_prompt is not None:
        sns.stripplot(
            data=per_prompt,
            x="category",
            y="alpha",
            hue="run",
            order=list(categories),
            hue_order=list(tables),
            palette=dict.fromkeys(tables, "white"),
            dodge=True,
            jitter=0.05,
            size=3,
            linewidth=0.6,
            edgecolor="black",
            legend=False,
            ax=ax,
        )
        handles = [Line2D([], [], marker="o", ms=3, mew=0.6, ls="", mfc="white", mec="black")]
    ax.plot(
        x,
        [claim[c] for c in categories],
        "D",
        color=COLORS["claimed"],
        ls="none",
        label="claimed by the prototype (gpt2 → gpt2-medium; not measured)",
    )
    ax.set_xticks(x, [c.replace(" ", "\n") for c in categories])
    ax.set(
        xlabel=None,
        ylabel="acceptance rate α",
        ylim=(0, 1.0),
        yticks=np.linspace(0, 1, 6),
        title="Acceptance by prompt category (SmolLM2-135M; bars: 95% prompt bootstrap"
        + ("; dots: prompts)" if handles else ")"),
    )
    h, labels = ax.get_legend_handles_labels()
    ax.legend(
        h + handles,
        labels + ["one prompt"] * len(handles),
        loc="upper center",
        bbox_to_anchor=(0.5, -0.2),
        ncol=2,
        fontsize=8.5,
    )
    return fig


def token_view(
    views: Mapping[str, Sequence[tuple[str, Sequence[str]]]], *, n_tokens: int
) -> Figure:
    """Notebook 04, ``04_token_view``: which path produced each generated token, one panel per
    run (titled by the key of ``views``), one row per prompt (``(label, kinds)``: a kind from
    :data:`TOKEN_KINDS` per token), one box per token."""
    n_rows = max(len(rows) for rows in views.values())
    fig, axes = plt.subplots(
        len(views), 1, figsize=(10, (0.55 * n_rows + 0.9) * len(views)), squeeze=False
    )
    for ax, (title, rows) in zip(axes[:, 0], views.items(), strict=True):
        for row, (_, kinds) in enumerate(rows):
            for i, kind in enumerate(kinds):
                ax.add_patch(plt.Rectangle((i, -row - 0.4), 0.9, 0.8, color=COLORS[kind]))
        ax.set_yticks([-r for r in range(len(rows))], [label for label, _ in rows])
        ax.set(xlim=(0, n_tokens), ylim=(-len(rows) + 0.4, 0.6), title=title)
        ax.grid(False)
    axes[-1, 0].set_xlabel("generated token")
    axes[-1, 0].legend(
        [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in TOKEN_KINDS],
        list(TOKEN_KINDS),
        ncol=4,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.35),
    )
    return fig
