"""The figures of notebook 04, acceptance by prompt type
(``notebooks/04_acceptance_by_prompt_type.ipynb``): acceptance by prompt category and by
position in the draft, and which path produced each generated token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from ..style import COLORS

__all__ = ["TOKEN_KINDS", "alpha_by_category", "alpha_by_position", "token_view"]

# The paths a generated token can come from, in the legend's order (colours in COLORS).
TOKEN_KINDS = ("accepted", "corrected", "bonus", "no draft")


def alpha_by_category(
    tables: Mapping[str, pd.DataFrame],
    *,
    categories: Sequence[str],
    claim: Mapping[str, float],
    per_prompt: pd.DataFrame | None = None,
) -> Figure:
    """Notebook 04, ``04_alpha_by_category``: the acceptance rate by prompt category, one bar per
    run (``tables[run]``, indexed by category: ``alpha`` with its 95 % interval ``lo``-``hi``),
    each prompt's own rate as a dot on its run's bar (``per_prompt``: ``run``, ``category``,
    ``alpha``), and the prototype's claimed rates (``claim``, diamonds)."""
    fig, ax = plt.subplots(figsize=(9.0, 4.2))
    x = np.arange(len(categories))
    width = 0.8 / len(tables)
    colors = [COLORS[k] for k in ("early exit", "early exit, greedy", "speculative", "target")]
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


def alpha_by_position(rates: pd.DataFrame) -> Figure:
    """Notebook 04, ``04_alpha_by_position``: the acceptance probability of each draft position
    given that it was reached, one panel per run and one line per ``K`` (``rates``: ``run``, ``K``,
    ``position``, ``rate``, and where present its 95 % interval ``lo``-``hi``, drawn as error
    bars). Each panel has its own y-range (the early exit's rates are a tenth of the trained
    draft's); the lines of different ``K`` are offset sideways and differ in marker and line style,
    so that identical curves stay visible."""
    runs = list(dict.fromkeys(rates.run))
    Ks = sorted(rates.K.unique())
    palette = [COLORS["target"], COLORS["draft"], COLORS["speculative"], COLORS["hf"]]
    styles = {
        K: (palette[i % len(palette)], "osD^v"[i % 5], ("-", "--", ":", "-.")[i % 4])
        for i, K in enumerate(Ks)
    }
    n_cols = min(2, len(runs))
    n_rows = -(-len(runs) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.6 * n_cols, 3.6 * n_rows), squeeze=False)
    for ax in axes.flat[len(runs) :]:
        ax.set_visible(False)
    for ax, run in zip(axes.flat, runs, strict=False):
        sub_run = rates[rates.run == run]
        ks = sorted(sub_run.K.unique())
        for j, (K, d) in enumerate(sub_run.groupby("K")):
            color, marker, ls = styles[K]
            shift = (j - (len(ks) - 1) / 2) * 0.08
            yerr = None
            if "lo" in d:
                yerr = np.vstack([d.rate - d.lo, d.hi - d.rate]).clip(min=0)
            ax.errorbar(
                d.position + shift,
                d.rate,
                yerr=yerr,
                fmt=marker,
                ls=ls,
                ms=5,
                capsize=2,
                color=color,
                label=f"K = {K}",
            )
        # The y-range follows the rates; intervals of rarely reached positions run off the top.
        top = min(1.0, max(0.2, 1.4 * float(sub_run.rate.max())))
        ax.set(xlabel="position in the draft", title=run, ylim=(0, top))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize=8.5)
    for row in axes:
        row[0].set_ylabel("P(accept | position reached)")
    fig.suptitle(
        "Acceptance by position in the draft\n(error bars: 95% Wilson interval over judged drafts)",
        fontsize=11,
    )
    fig.tight_layout()
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
