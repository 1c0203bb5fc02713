"""The figures of ``notebooks/04_acceptance_by_prompt_type.ipynb`` (acceptance by prompt type):
acceptance by prompt category, and which path produced each generated token."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..bench.analysis import depth_counts, run_tree
from .style import COLORS
from .words import span

__all__ = [
    "PROTOTYPE_CLAIM",
    "RUNS",
    "TOKEN_KINDS",
    "alpha_by_category",
    "at_depth",
    "depths_frame",
    "findings",
    "rate",
    "token_view",
]

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


# The page's data and findings: the first thing notebook 04 shows.

RUNS = {  # the campaign's runs read by notebook 04, by the names of its plan
    "early exit, T = 1": "early_exit_T1",
    "chain, T = 1": "chain_T1",
    "recommended, T = 1": "recommended_T1",
    "recommended, greedy": "recommended_greedy",
}
# The prototype's acceptance by category, for its own pair (gpt2 -> gpt2-medium), never measured.
PROTOTYPE_CLAIM = {
    "continuation": 0.84,
    "code completion": 0.79,
    "creative writing": 0.68,
    "question answering": 0.73,
    "technical explanation": 0.76,
}


def depths_frame(results: Mapping[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per run, ``K``, prompt and draft depth of the speculative cells in ``results``
    (stored bench runs by name): how many drafts were ``judged`` at that depth, ``accepted``,
    and ``chain_accepted`` (the chain's own token kept; the same as ``accepted`` for a chain)."""
    rows = []
    for name, res in results.items():
        for key, cell in res["cells"].items():
            method, K, p, _rep = key.split("|")
            if method != "speculative":
                continue
            tree = run_tree(res["settings"], res.get("tuned_trees"), int(K))
            counts_by_depth = depth_counts([cell], int(K), tree)
            for d, counts in enumerate(zip(*counts_by_depth, strict=True), start=1):
                rows.append(
                    {"run": name, "K": int(K), "prompt": int(p),
                     "category": res["prompts"][int(p)]["category"], "depth": d,
                     "judged": int(counts[0]), "accepted": int(counts[1]),
                     "chain_accepted": int(counts[2])}
                )  # fmt: skip
    return pd.DataFrame(rows)


def rate(df: pd.DataFrame, col: str = "accepted") -> float:
    """Accepted (or ``chain_accepted``) over judged, pooled over the rows of ``df``."""
    return df[col].sum() / df.judged.sum()


def at_depth(depths: pd.DataFrame, name: str, depth: int, col: str = "accepted") -> float:
    """The rate of run ``name`` at one draft depth, every K that drafts it pooled."""
    d = depths[(depths.run == name) & (depths.depth == depth) & (depths.K >= depth)]
    return rate(d, col)


def findings(campaign: Any) -> str:
    """Notebook 04's findings in Markdown, from ``campaign`` (a
    :class:`~specdec_lib.research.campaign.Campaign`): acceptance pooled, by category and
    along the draft, beside the prototype's claim."""
    results = campaign.runs(RUNS)
    depths = depths_frame(results)
    pooled = {name: rate(depths[depths.run == name]) for name in results}
    main = depths[depths.run == "recommended, T = 1"].groupby("category")
    by_cat = main.accepted.sum() / main.judged.sum()
    main_, chain = "recommended, T = 1", "chain, T = 1"
    return f"""**Findings.** Measured on {campaign.machine}, every $K$ pooled:

- the recommended configuration accepts {pooled[main_]:.2f} of the draft depths it judges at
  $T = 1$ ({span(by_cat)} across the five prompt categories) and
  {pooled["recommended, greedy"]:.2f} in greedy decoding;
- the chain (one candidate per position, {results[chain]["settings"]["draft"]} draft) accepts
  {pooled[chain]:.2f}, and the untrained early exit {pooled["early exit, T = 1"]:.2f}, far from
  the {span(PROTOTYPE_CLAIM.values())} claimed by the prototype for its own pair;
- along the draft the acceptance falls: at $T = 1$ the tree keeps a candidate at its first depth
  {at_depth(depths, main_, 1):.2f} of the time (the chain's token alone:
  {at_depth(depths, main_, 1, "chain_accepted"):.2f}) and at its second
  {at_depth(depths, main_, 2):.2f} ({at_depth(depths, main_, 2, "chain_accepted"):.2f}); the chain
  accepts {at_depth(depths, chain, 1):.2f} at its first position and
  {at_depth(depths, chain, 2):.2f} at its second."""
