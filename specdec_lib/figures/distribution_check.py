"""The figures of ``notebooks/02_distribution_check.ipynb`` (the distribution check): frequencies
against the exact law, the p-values' uniformity, the tests' power, and every shipped
configuration's test."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .style import COLORS

__all__ = ["exactness_grid", "frequency_fit", "power_vs_n", "pvalue_uniformity"]


def frequency_fit(
    table: pd.DataFrame,
    *,
    title: str,
    reference_label: str,
    observed_label: str,
    color: str = "speculative",
    law_label: str | None = None,
) -> Figure:
    """Notebook 02, ``02_next_token_fit``, ``02_sequences``, ``02_prototype_bias``: observed
    frequencies against a reference law. ``table``, a row per bin: ``label``, ``reference``
    (bars), ``observed`` (points, ±2 ``se``, ``COLORS[color]``), optional ``law`` (ticks)."""
    x = np.arange(len(table))
    fig, ax = plt.subplots(figsize=(11, 4))
    ax.bar(x, table.reference, 0.8, color=COLORS["target"], alpha=0.35, label=reference_label)
    ax.errorbar(
        x,
        table.observed,
        yerr=2 * table.se,
        fmt="o",
        ms=4,
        color=COLORS[color],
        capsize=2,
        label=observed_label,
    )
    if "law" in table:
        ax.plot(x, table.law, "_", ms=12, mew=2, color=COLORS["wrong"], label=law_label)
    ax.set_xticks(x, table.label, rotation=90, fontsize=7)
    ax.set(title=title, ylabel="frequency")
    ax.legend(fontsize=8)
    return fig


def pvalue_uniformity(pvals, band: tuple[np.ndarray, np.ndarray], *, n_samples: int) -> Figure:
    """Notebook 02, ``02_pvalues``: the p-values of tests under ``H_0``: histogram (left) and QQ
    plot against ``U(0, 1)`` inside ``band``, the sorted values' pointwise 95 % band (right).
    ``n_samples``: each test's sample size, for the title."""
    pvals = np.asarray(pvals)
    n = len(pvals)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
    ax0.hist(
        pvals,
        bins=10,
        range=(0, 1),
        density=True,
        color=COLORS["speculative"],
        alpha=0.8,
        edgecolor="white",
        label=f"speculative sampling ({n} tests)",
    )
    ax0.axhline(1, color=COLORS["theory"], lw=1.2, ls="--", label="uniform")
    ax0.set(
        title=f"p-values of next-token tests (N = {n_samples:,} each)",
        xlabel="p-value",
        ylabel="density",
    )
    ax0.legend(loc="upper right")
    expected = np.arange(1, n + 1) / (n + 1)
    ax1.fill_between(
        expected, *band, color=COLORS["theory"], alpha=0.2, label="95% band under $H_0$"
    )
    ax1.plot([0, 1], [0, 1], color=COLORS["theory"], lw=1)
    ax1.plot(
        expected,
        np.sort(pvals),
        "o",
        ms=3.5,
        color=COLORS["speculative"],
        label="speculative sampling",
    )
    ax1.set(
        title="QQ plot against U(0, 1)",
        xlabel="uniform quantile",
        ylabel="sorted p-values",
        xlim=(0, 1),
        ylim=(0, 1),
    )
    ax1.legend(loc="upper left")
    fig.tight_layout()
    return fig


def power_vs_n(
    n_grid,
    curves: Mapping[str, Sequence[float]],
    *,
    tv: Mapping[str, float],
    dashed: Mapping[str, tuple[str, Sequence[float]]],
    dotted: Mapping[str, Sequence[float]],
    simulated: Mapping[str, Sequence[tuple[int, float, float]]],
    n_modes: Mapping[str, int],
    n_used: int,
    n_sim: int,
    title: str,
) -> Figure:
    """Notebook 02, ``02_power_vs_n``: a test's power against the sample size ``N``.
    ``curves[name]``: power against a bias of TV ``tv[name]``; ``dashed[label] = (name, values)``:
    a variant in that curve's colour; ``dotted[label]``: grey curves; ``simulated[name]``: ``(N,
    simulated, approximation)`` points. Vertical lines: each mode's ``N`` (``n_modes``), solid for
    ``n_used``; horizontal: power 0.9."""
    # distinct hues only (the draft's orange is too close to the vermillion of "wrong")
    palette = [COLORS[k] for k in ("target", "wrong", "speculative", "hf", "other")]
    color = dict(zip(curves, palette, strict=False))
    fig, ax = plt.subplots(figsize=(10, 4.6))
    for name, values in curves.items():
        ax.semilogx(n_grid, values, color=color[name], label=f"{name} (TV {tv[name]:.3f})")
    for label, (name, values) in dashed.items():
        ax.semilogx(n_grid, values, color=color[name], ls="--", lw=1.2, label=label)
    for label, values in dotted.items():
        ax.semilogx(n_grid, values, color=COLORS["theory"], ls=":", label=label)
    for name, pts in simulated.items():
        ax.plot(
            [n for n, _, _ in pts],
            [sim for _, sim, _ in pts],
            "o",
            ms=6,
            mfc="white",
            color=color.get(name, COLORS["theory"]),
        )
    for mode, n in n_modes.items():
        ax.axvline(n, color="black", lw=0.8, ls="-" if n == n_used else ":")
        ax.annotate(
            f"N = {n:,}\n({mode} mode)",
            (n, 0.03),
            xytext=(4, 0),
            textcoords="offset points",
            fontsize=8,
        )
    ax.axhline(0.9, color=COLORS["claimed"], lw=0.8)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(
        handles + [Line2D([], [], marker="o", mfc="white", ls="", color="black")],
        labels + [f"simulated (power.power_gof, {n_sim} runs)"],
        fontsize=8,
        loc="center left",
        bbox_to_anchor=(1.01, 0.5),
    )
    ax.set(
        title=title,
        xlabel="samples N",
        ylabel="probability of rejecting",
        ylim=(-0.02, 1.02),
    )
    return fig


def _grid_label(row: pd.Series) -> str:
    """A row's label: its name and what its steps did (transformers' generate records none)."""
    if row.must_fail:
        return f"{row['name']}  (injected bug: must fail)"
    if row.get("method") == "hf_assisted" or not row.steps:
        return f"{row['name']}  (transformers' generate: steps not recorded)"
    return f"{row['name']}  (α {row.alpha:.2f}, bonus token in {row.bonus_steps:,} of {row.steps:,} steps)"


def exactness_grid(grid: pd.DataFrame, *, level: float) -> Figure:
    """Notebook 02, ``02_shipped``: a row per configuration (``grid``: ``name``, ``p``, ``p_holm``
    (NaN where ``must_fail``), ``must_fail``, ``alpha``, ``bonus_steps``, ``steps``, optionally
    ``method``): -log10 of its chi-square p-value (Holm's for shipped rows, raw for those that
    must fail) against ``level``, a dot per row so that p = 1 shows too."""
    fig, ax = plt.subplots(figsize=(9.0, 0.42 * len(grid) + 1.8))
    y = np.arange(len(grid))[::-1]
    p = np.where(grid.must_fail, grid.p, grid.p_holm).astype(float)
    strength = -np.log10(np.clip(p, 1e-300, 1.0))
    colors = [COLORS["wrong"] if f else COLORS["speculative"] for f in grid.must_fail]
    ax.hlines(y, 0, strength, colors=colors, lw=2.5)
    ax.scatter(strength, y, color=colors, s=45, zorder=3)
    for yi, si, pi in zip(y, strength, p, strict=True):
        ax.text(si, yi, f"   p = {pi:.2g}", va="center", fontsize=8)
    ax.axvline(-np.log10(level), color="black", ls="--", lw=1)
    ax.text(-np.log10(level), y.max() + 0.55, f" level {level:.2g}", fontsize=8, va="bottom")
    ax.set_yticks(y, [_grid_label(row) for _, row in grid.iterrows()], fontsize=8.5)
    ax.set_xlim(-0.3, 1.25 * max(strength.max(), -np.log10(level)))
    ax.set_ylim(-0.7, len(grid) - 0.1)
    ax.set(
        xlabel="−log10 p  (chi-square against the target's exact law, Bonferroni over the 3 "
        "positions; shipped rows after Holm)",
        title="One configuration of each kind shipped, and three injected bugs,\n"
        "against the target's exact law (K = 2, the 3 tokens after a fixed first token)",
    )
    dot = dict(marker="o", lw=2.5, markersize=7)
    ax.legend(
        handles=[
            Line2D(
                [],
                [],
                color=COLORS["speculative"],
                label="shipped: must pass (left of the line)",
                **dot,
            ),
            Line2D(
                [],
                [],
                color=COLORS["wrong"],
                label="injected bug: must fail (right of the line)",
                **dot,
            ),
        ],
        loc="upper right",
        fontsize=8,
    )
    ax.grid(axis="y", visible=False)
    return fig
