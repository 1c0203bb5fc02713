"""One figure style for the series, one way out (:func:`savefig` into ``figures/``), and the
series' figure functions.

A figure function takes data the notebook computed (arrays, DataFrames, dicts of results) and returns
the :class:`~matplotlib.figure.Figure`; it computes no statistics and reads no files. Its docstring
says what it draws and which notebook uses it. A notebook's figure cell is then a few lines::

    fig = plotting.tokens_per_step(K_grid, expected, mc, n_steps=N_STEPS)
    savefig("01_tokens_per_step", fig);
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, MaxNLocator

from .config import FIGURES_DIR
from .results import atomic_write

__all__ = [
    "COLORS",
    "TOKEN_KINDS",
    "acceptance_split",
    "alpha_by_category",
    "alpha_by_position",
    "alpha_tau_vs_K",
    "dtype_pass_costs",
    "frequency_fit",
    "full_training",
    "exactness_grid",
    "gpu_costs",
    "greedy_limit",
    "latency_throughput",
    "learning_curves",
    "mismatched_q",
    "pass_costs",
    "pilot_curves",
    "position_rates",
    "tree_acceptance",
    "tree_ceiling",
    "power_vs_n",
    "predicted_by_drafter",
    "prototype_bias",
    "pvalue_uniformity",
    "savefig",
    "set_style",
    "speedup_intervals",
    "speedup_theory",
    "speedup_vs_K",
    "token_view",
    "tokens_per_step",
]

# One meaning per colour across the series: colour-blind-safe Okabe-Ito hues for the series' lines
# and bars, pale tints for what sits behind them or carries text.
COLORS = {
    "target": "#0072B2",  # p, autoregressive, measured
    "draft": "#E69F00",  # q
    "speculative": "#009E73",
    "hf": "#CC79A7",
    "theory": "#555555",
    "wrong": "#D55E00",  # the prototype's rule, anything that should not be
    "claimed": "#999999",
    "other": "#56B4E9",  # one more series where a figure needs it
    # The untrained early-exit draft's runs, pale behind the trained draft's.
    "early exit": "#9ecae1",
    "early exit, greedy": "#c6dbef",
    # Which path produced a token (pale: text is read on them).
    "accepted": "#b7e4c7",
    "corrected": "#f4a261",
    "bonus": "#8ecae6",
    "no draft": "#d9d9d9",
}

TOKEN_KINDS = ("accepted", "corrected", "bonus", "no draft")

# The acceptance rates that notebook 01's figures share, one colour each.
_ALPHA_COLORS = {
    0.5: COLORS["other"],
    0.6: COLORS["draft"],
    0.8: COLORS["speculative"],
    0.9: COLORS["target"],
    0.95: COLORS["hf"],
}

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
    palette = [COLORS[k] for k in ("target", "draft", "speculative", "hf", "other", "wrong")]
    sns.set_theme(context="notebook", style="ticks", palette=palette, rc=_RC)


def savefig(
    name: str, fig: Figure | None = None, formats: tuple[str, ...] = ("png", "pdf")
) -> list[Path]:
    """Save ``fig`` (default: the current figure) as ``figures/<name>.<fmt>`` for each format.

    PNG at the style's dpi for slides, PDF for papers; ``SPECDEC_FIGURES`` moves the folder. Each
    file is written atomically (a unique temporary file in the same folder, then a rename), and
    without a date or software version in its metadata, so that re-running a notebook rewrites
    identical files. Returns the paths written.
    """
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
    return paths


def _as_array(x) -> np.ndarray:
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x, dtype=float)


def _outline(ax, x, p, label: str = "target $p$") -> None:
    # A distribution drawn as the outline of its bars: what the stacked bars below must fill.
    p = _as_array(p)
    ax.step(
        np.r_[x - 0.5, x[-1] + 0.5],
        np.r_[p, p[-1]],
        where="post",
        color=COLORS["target"],
        lw=2,
        label=label,
    )


def _law_split(ax, p, accepted, corrected, *, accepted_label: str, color: str, label: str) -> None:
    # Where the emitted token comes from: accepted drafts, then the correction, stacked, under p.
    x = np.arange(len(p))
    accepted = _as_array(accepted)
    ax.bar(x, accepted, 0.6, color=COLORS["draft"], alpha=0.8, label=accepted_label)
    ax.bar(x, _as_array(corrected), 0.6, bottom=accepted, color=color, label=label)
    _outline(ax, x, p)
    ax.set_xticks(x)


# ------------------------------------------------------------------------------------------------
# Notebook 01: the acceptance rule


def acceptance_split(p, q, accepted, corrected, *, alpha: float) -> Figure:
    """Notebook 01, ``01_residual``: the target ``p`` and draft ``q`` side by side (left), and the
    law the rule emits (right): the accepted drafts ``min(p, q)`` stacked under the residual's
    share ``(1 - alpha) r``, filling ``p`` (its outline)."""
    x = np.arange(len(p))
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    w = 0.4
    ax0.bar(x - w / 2, _as_array(p), w, color=COLORS["target"], label="target $p$")
    ax0.bar(x + w / 2, _as_array(q), w, color=COLORS["draft"], label="draft $q$")
    ax0.set(title="Target and draft distributions", xlabel="token $x$", ylabel="probability")
    ax0.legend()
    _law_split(
        ax1,
        p,
        accepted,
        corrected,
        accepted_label=r"accepted drafts: $q(x)\min(1, p(x)/q(x))$",
        color=COLORS["speculative"],
        label=r"after a rejection: $(1-\alpha)\,r(x)$",
    )
    ax1.set(title=rf"What the rule emits ($\alpha$ = {alpha:.2f})", xlabel="token $x$")
    ax1.legend(loc="upper right")
    fig.tight_layout()
    return fig


def prototype_bias(
    p,
    accepted,
    corrected,
    *,
    tv_example: float,
    bias: pd.DataFrame,
    summary: pd.DataFrame,
    tv_correct_max: float,
    Vs: Sequence[int] = (10, 100, 1000),
) -> Figure:
    """Notebook 01, ``01_prototype_bias``: the prototype's output law on one pair (left: accepted
    drafts and its correction stacked under ``p``), and the distribution of its total-variation
    bias over random pairs for each vocabulary size (right; ``bias`` has one row per pair with
    columns ``V`` and ``tv_prototype``, ``summary`` is indexed by ``V`` with ``pairs`` and
    ``proto_tv_mean``)."""
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [1.1, 1]})
    _law_split(
        ax0,
        p,
        accepted,
        corrected,
        accepted_label=r"accepted drafts: $\min(p, q)$",
        color=COLORS["wrong"],
        label="prototype's correction ($p$ without $x$)",
    )
    ax0.set(
        title=f"Prototype's output law: TV from $p$ = {tv_example:.3f}",
        xlabel="token $x$",
        ylabel="probability",
    )
    ax0.legend(loc="upper right")

    bins = np.linspace(0, 0.3, 31)
    for V, color in zip(
        Vs, (COLORS["draft"], COLORS["speculative"], COLORS["target"]), strict=False
    ):
        ax1.hist(
            bias.loc[bias.V == V, "tv_prototype"],
            bins=bins,
            density=True,
            histtype="step",
            lw=2,
            color=color,
            label=f"V = {V} (mean {summary.loc[V, 'proto_tv_mean']:.3f}, "
            f"{summary.loc[V, 'pairs']} pairs)",
        )
    ax1.set(
        title="Bias of the prototype on random pairs\n($p, q$ ~ Dirichlet(1), exact laws)",
        xlabel="TV(prototype output law, $p$)",
        ylabel="density",
    )
    ax1.text(
        0.03,
        0.97,
        f"correct rule: max TV = {tv_correct_max:.0e}",
        transform=ax1.transAxes,
        va="top",
        fontsize=9,
        color=COLORS["theory"],
    )
    ax1.legend(loc="upper left", bbox_to_anchor=(0, 0.9))
    fig.tight_layout()
    return fig


def mismatched_q(p, law_wrong, law_right, x_star: int) -> Figure:
    """Notebook 01, ``01_mismatched_q``: the output law of a greedy draft scored with its softmax
    (``law_wrong``) and scored as one-hot (``law_right``), against the target ``p``; an arrow marks
    the draft's argmax ``x_star``, accepted every time under the wrong scoring."""
    x = np.arange(len(p))
    law_wrong = _as_array(law_wrong)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    w = 0.27
    ax.bar(x - w, _as_array(p), w, color=COLORS["target"], label="target $p$ (T = 1)")
    ax.bar(x, law_wrong, w, color=COLORS["wrong"], label="greedy draft scored with its softmax")
    ax.bar(
        x + w,
        _as_array(law_right),
        w,
        color=COLORS["speculative"],
        label="greedy draft scored as one-hot",
    )
    ax.annotate(
        "draft's argmax $x^*$: always accepted",
        xy=(x_star - 0.15, law_wrong[x_star]),
        xytext=(0.5, 0.85),
        arrowprops={"arrowstyle": "->", "color": "black"},
        va="center",
    )
    ax.set(
        title="Output law when the ratio uses the wrong draft distribution",
        xlabel="token $x$",
        ylabel="probability",
    )
    ax.set_xticks(x)
    ax.legend(loc="center left")
    return fig


def tokens_per_step(
    K_grid, expected: Mapping[float, np.ndarray], mc: pd.DataFrame, *, n_steps: int
) -> Figure:
    """Notebook 01, ``01_tokens_per_step``: expected tokens per speculative step against ``K``, the
    closed form ``expected[alpha]`` (lines) under the ceiling ``K + 1`` (every draft accepted), and
    the Monte Carlo means of ``verify`` (``mc``: columns ``alpha``, ``K``, ``mean``, ``se``; ±2 SE
    bars). A speedup claim such as the prototype's ``K alpha`` belongs on a speedup axis
    (:func:`speedup_theory`), not here."""
    K_grid = np.asarray(K_grid)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(K_grid, K_grid + 1, ls="--", lw=1.2, color=COLORS["theory"])
    for alpha, curve in expected.items():
        col = _ALPHA_COLORS[alpha]
        ax.plot(
            K_grid, curve, color=col, label=rf"$\alpha$ = {alpha}: $(1-\alpha^{{K+1}})/(1-\alpha)$"
        )
        sub = mc[mc.alpha == alpha]
        ax.errorbar(sub.K, sub["mean"], yerr=2 * sub.se, fmt="o", ms=5, color=col, capsize=3)
    handles, labels = ax.get_legend_handles_labels()
    handles += [
        Line2D([], [], marker="o", ls="", color=COLORS["theory"]),
        Line2D([], [], ls="--", lw=1.2, color=COLORS["theory"]),
    ]
    labels += [
        f"verify, Monte Carlo ({n_steps} steps, ±2 SE)",
        r"$K + 1$: every draft accepted ($\alpha$ = 1)",
    ]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9)
    ax.set(
        title="Tokens emitted per speculative step (i.i.d. acceptance)",
        xlabel="draft length $K$",
        ylabel="E[tokens per step] (tokens)",
        ylim=(0, None),
    )
    ax.set_xticks(K_grid)
    return fig


def _star(ax, K, speedup, color) -> None:
    ax.plot(K, speedup, "*", ms=13, color=color, mec="black", mew=0.6)


def speedup_theory(curves: pd.DataFrame, optima: pd.DataFrame, *, claimed_alpha: float) -> Figure:
    """Notebook 01, ``01_speedup_vs_K``: Leviathan et al.'s expected walltime speedup against ``K``.

    ``curves`` (columns ``alpha``, ``c``, ``K``, ``speedup``) and ``optima`` (the optimal ``K`` of
    each ``(alpha, c)`` with ``c > 0``, same columns). Left: every ``alpha`` other than
    ``claimed_alpha``, one colour each, one line style per draft cost ``c``, stars at the optima.
    Right: ``claimed_alpha`` for each ``c``, against the prototype's ``K x alpha``.
    """
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.2))
    left = curves[curves.alpha != claimed_alpha]
    alphas, costs = sorted(left.alpha.unique()), sorted(left.c.unique())
    styles = dict(zip(costs, ("-", "--", ":"), strict=False))
    for (alpha, c), sub in left.groupby(["alpha", "c"]):
        ax0.plot(sub.K, sub.speedup, ls=styles[c], color=_ALPHA_COLORS[alpha])
    for o in optima[optima.alpha != claimed_alpha].itertuples():
        _star(ax0, o.K, o.speedup, _ALPHA_COLORS[o.alpha])
    ax0.axhline(1, color=COLORS["theory"], lw=1)
    ax0.legend(
        [Patch(color=_ALPHA_COLORS[a]) for a in alphas]
        + [Line2D([], [], color="black", ls=styles[c]) for c in costs]
        + [Line2D([], [], marker="*", ls="", ms=12, color="white", mec="black")],
        [rf"$\alpha$ = {a}" for a in alphas] + [f"$c$ = {c}" for c in costs] + ["optimal $K$"],
        loc="upper left",
        ncols=2,
        fontsize=9,
    )
    ax0.set(
        title=r"Expected walltime speedup $\frac{1-\alpha^{K+1}}{(1-\alpha)(cK+1)}$",
        xlabel="draft length $K$",
        ylabel="speedup over autoregressive",
    )

    right = curves[curves.alpha == claimed_alpha]
    colors = (COLORS["target"], COLORS["speculative"], COLORS["draft"])
    for (c, sub), col in zip(right.groupby("c"), colors, strict=False):
        ax1.plot(sub.K, sub.speedup, color=col, label=f"Theorem 3.8, $c$ = {c}")
        for o in optima[(optima.alpha == claimed_alpha) & (optima.c == c)].itertuples():
            _star(ax1, o.K, o.speedup, col)
    K_grid = np.sort(right.K.unique())
    ax1.plot(
        K_grid,
        K_grid * claimed_alpha,
        ":",
        color=COLORS["claimed"],
        lw=2,
        label=rf"$K \times {claimed_alpha}$ (claimed by the prototype)",
    )
    ax1.axhline(1, color=COLORS["theory"], lw=1)
    ax1.set(
        title=rf"At $\alpha$ = {claimed_alpha}: theory vs the prototype's formula",
        xlabel="draft length $K$",
        ylabel="speedup over autoregressive",
        ylim=(0, 6),
    )
    ax1.legend(loc="upper left", fontsize=9)
    fig.tight_layout()
    return fig


def greedy_limit(
    tempered: Mapping[float, np.ndarray],
    T_grid,
    tv_onehot,
    *,
    bound,
    alpha_agree,
    alpha_differ,
) -> Figure:
    """Notebook 01, ``01_greedy_limit``: greedy decoding as the limit ``T -> 0``, in three panels.

    Left: the tempered softmax at a few temperatures (``tempered[T]``, tokens sorted by logit).
    Middle: its total-variation distance to the one-hot argmax against ``T``, under ``bound``
    (``(V - 1) exp(-gap / T)``). Right: the acceptance rate ``alpha(T)`` of a draft whose argmax
    agrees with the target's, and of one whose argmax differs.
    """
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    shades = np.linspace(0.35, 1.0, len(tempered))
    for (T, probs), shade in zip(tempered.items(), shades, strict=True):
        probs = _as_array(probs)
        axes[0].plot(
            np.arange(len(probs)),
            probs,
            "o-",
            ms=4,
            color=COLORS["target"],
            alpha=shade,
            label=f"T = {T}",
        )
    axes[0].set(
        title=r"softmax($\ell / T$), tokens sorted by logit",
        xlabel="token rank",
        ylabel="probability",
    )
    axes[0].legend()

    axes[1].loglog(
        T_grid, np.maximum(tv_onehot, 1e-30), color=COLORS["target"], label="TV to one-hot"
    )
    axes[1].loglog(
        T_grid, bound, "--", color=COLORS["theory"], label=r"bound $(V-1)\,e^{-\Delta/T}$"
    )
    axes[1].set(
        title="Tempered softmax → one-hot (greedy)",
        xlabel="temperature $T$",
        ylabel="TV(softmax($\\ell/T$), one-hot)",
        ylim=(1e-12, 3),
    )
    axes[1].legend(loc="lower right")

    axes[2].semilogx(
        T_grid, alpha_agree, color=COLORS["speculative"], label="draft and target argmax agree"
    )
    axes[2].semilogx(T_grid, alpha_differ, color=COLORS["wrong"], label="argmaxes differ")
    axes[2].set(
        title=r"$\alpha(T) = \sum_x \min(p_T(x), q_T(x))$",
        xlabel="temperature $T$",
        ylabel=r"acceptance rate $\alpha$",
        ylim=(-0.03, 1.03),
    )
    axes[2].legend(loc="center left")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------
# Notebook 02: the distribution check


def frequency_fit(
    table: pd.DataFrame,
    *,
    title: str,
    reference_label: str,
    observed_label: str,
    color: str = "speculative",
    law_label: str | None = None,
) -> Figure:
    """Notebook 02, ``02_next_token_fit``, ``02_sequences`` and ``02_prototype_bias``: observed
    frequencies against a reference law, bin by bin.

    ``table`` has one row per bin (the most probable tokens or sequences, then the pooled rest):
    ``label``, ``reference`` (bars), ``observed`` (points, ±2 ``se`` bars, in ``COLORS[color]``) and
    optionally ``law``, a second law drawn as horizontal ticks (labelled ``law_label``).
    """
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
    """Notebook 02, ``02_pvalues``: are the p-values of tests under ``H_0`` uniform? Their
    histogram against the uniform density (left), and their QQ plot against ``U(0, 1)`` inside
    ``band``, the pointwise 95 % band of the sorted values (right). ``n_samples``: the sample size
    of each test, for the title."""
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
    """Notebook 02, ``02_power_vs_n``: the power of a test against the sample size ``N``.

    ``curves[name]``: power against each bias (labelled with its total variation ``tv[name]``),
    one colour each; ``dashed[label] = (name, values)``: a variant of curve ``name``, in its colour;
    ``dotted[label]``: further curves, grey; ``simulated[name]``: ``(N, simulated power,
    approximation)`` points, in the colour of the curve of that name (grey if none). Vertical lines
    mark the ``N`` of each mode (``n_modes``), solid for ``n_used``; the horizontal line is power
    0.9.
    """
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
        labels + [f"simulated (stats.power_gof, {n_sim} runs)"],
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


def exactness_grid(grid: pd.DataFrame, *, level: float) -> Figure:
    """Notebook 02, ``02_shipped``: one row per configuration (``grid``: ``name``, ``p``,
    ``p_holm`` (NaN for the arms that must fail), ``must_fail``, ``alpha``, ``bonus_steps``,
    ``steps``): the chi-square p-value against the target's exact law on a log scale (after Holm
    for the shipped configurations, raw for the arms that must fail), and the family-wise ``level``
    the shipped configurations must stay above and the failing arms must fall below."""
    fig, ax = plt.subplots(figsize=(9.0, 0.42 * len(grid) + 1.6))
    y = np.arange(len(grid))[::-1]
    p = np.where(grid.must_fail, grid.p, grid.p_holm).astype(float)
    strength = -np.log10(np.clip(p, 1e-300, 1.0))
    colors = [COLORS["wrong"] if f else COLORS["speculative"] for f in grid.must_fail]
    ax.barh(y, np.maximum(strength, 0.02), color=colors, height=0.6)
    for yi, si, pi in zip(y, strength, p, strict=True):
        ax.text(si, yi, f"  p = {pi:.2g}", va="center", fontsize=8)
    ax.axvline(-np.log10(level), color="black", ls="--", lw=1)
    ax.text(-np.log10(level), y.max() + 0.55, f" level {level:.2g}", fontsize=8, va="bottom")
    labels = [
        f"{n}  (must fail)" if f else f"{n}  (α {a:.2f}, bonus in {b}/{s} steps)"
        for n, a, b, s, f in zip(
            grid.name, grid.alpha, grid.bonus_steps, grid.steps, grid.must_fail, strict=True
        )
    ]
    ax.set_yticks(y, labels, fontsize=8.5)
    ax.set_xlim(0, 1.25 * max(strength.max(), -np.log10(level)))
    ax.set_ylim(-0.7, len(grid) - 0.1)
    ax.set(
        xlabel="−log10 p  (chi-square against the exact law, Bonferroni over positions; "
        "shipped rows after Holm)",
        title="Every shipped configuration against the target's exact law (K = 2, each of 3 tokens)",
    )
    ax.legend(
        handles=[
            Patch(color=COLORS["speculative"], label="shipped: must pass (bar left of the line)"),
            Patch(color=COLORS["wrong"], label="injected bug: must fail (bar right of the line)"),
        ],
        loc="upper right",
        fontsize=8,
    )
    ax.grid(axis="y", visible=False)
    return fig


# ------------------------------------------------------------------------------------------------
# Notebook 03: speedup against K


def pass_costs(relative, *, c: float) -> Figure:
    """Notebook 03, ``03_pass_costs``: the measured cost of one target pass over ``n`` tokens
    relative to a 1-token pass (``relative[n - 1]``), against the theory's free verification (1)
    and one draft pass (``c``)."""
    relative = np.asarray(relative)
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(
        np.arange(1, len(relative) + 1),
        relative,
        "o-",
        color=COLORS["target"],
        label="target, measured (this CPU, float32)",
    )
    ax.axhline(
        1.0, color=COLORS["theory"], ls="--", label="the theory's assumption: free verification"
    )
    ax.axhline(c, color=COLORS["draft"], ls=":", label=f"one draft pass (c = {c:.2f})")
    ax.set(
        xlabel="tokens in one target pass (K + 1)",
        ylabel="cost relative to a 1-token pass",
        title="Verification is not free on a CPU",
        ylim=(0, None),
    )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9)
    return fig


def speedup_vs_K(
    panels: Mapping[str, pd.DataFrame],
    *,
    claim: Mapping[str, Sequence[float]] | None = None,
    hf_label: str = "HF assisted, measured",
    target: float | None = None,
    ylabel: str = "speedup over autoregressive",
    ylim: tuple[float, float | None] = (0, 2.2),
    legend_loc: str = "upper right",
    panel_size: tuple[float, float] = (6.0, 4.2),
    suptitle: str | None = None,
) -> Figure:
    """Notebooks 03 and 05, ``03_speedup_vs_K``, ``03_speedup_vs_K_trained`` and
    ``05_speedup_vs_K``: speedup over autoregressive decoding against ``K``, one panel per run (its
    title the key of ``panels``).

    Each panel's DataFrame is indexed by ``K``: ``speedup`` (measured: pooled tokens/s over the
    baseline's) with, where present, its 95 % interval ``speedup_low``-``speedup_high`` (error
    bars) or else its band ``q25``-``q75`` across prompts, ``predicted_speedup`` (the cost model),
    and optionally ``ideal`` (Leviathan et al.'s formula, verification free) and ``hf_speedup``
    (Hugging Face assisted generation, with ``hf_low``-``hf_high`` error bars where present).
    ``claim``: the prototype's claimed curve (``K``, ``speedup``), dashed grey; ``target``: a speed
    target, dotted. ``legend_loc="below"`` puts one legend under the panels, clear of the data.
    """
    width, height = panel_size
    fig, axes = plt.subplots(
        1, len(panels), figsize=(width * len(panels), height), sharey=True, squeeze=False
    )
    for ax, (title, d) in zip(axes[0], panels.items(), strict=True):
        Ks = d.index.values
        if "speedup_low" in d:
            ax.errorbar(
                Ks,
                d.speedup,
                yerr=np.vstack([d.speedup - d.speedup_low, d.speedup_high - d.speedup]),
                fmt="o-",
                capsize=3,
                color=COLORS["speculative"],
                label="specdec, measured (95% bootstrap interval over prompts)",
            )
        else:
            ax.fill_between(Ks, d.q25, d.q75, color=COLORS["speculative"], alpha=0.2, lw=0)
            ax.plot(
                Ks,
                d.speedup,
                "o-",
                color=COLORS["speculative"],
                label="specdec, measured (band: IQR over prompts)",
            )
        ax.plot(
            Ks,
            d.predicted_speedup,
            "s--",
            color=COLORS["target"],
            ms=4,
            label="predicted from measured costs and α",
        )
        if "ideal" in d:
            ax.plot(
                Ks,
                d.ideal,
                ":",
                color=COLORS["theory"],
                label="Leviathan et al., verification free",
            )
        if "hf_speedup" in d and d.hf_speedup.notna().any():
            hf = d.dropna(subset=["hf_speedup"])
            yerr = None
            if "hf_low" in hf:
                yerr = np.vstack([hf.hf_speedup - hf.hf_low, hf.hf_high - hf.hf_speedup])
            ax.errorbar(
                hf.index,
                hf.hf_speedup,
                yerr=yerr,
                fmt="^-",
                capsize=3,
                color=COLORS["hf"],
                label=hf_label,
            )
        if claim is not None:
            ax.plot(
                claim["K"],
                claim["speedup"],
                "--",
                color=COLORS["claimed"],
                label="claimed by the prototype (T4; not measured)",
            )
        ax.axhline(1.0, color="black", lw=0.8)
        if target is not None:
            ax.axhline(target, color="grey", lw=0.8, ls=":")
        ax.set(xlabel="draft length K", title=title, ylim=ylim)
    axes[0][0].set_ylabel(ylabel)
    if legend_loc == "below":
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(
            handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=9
        )
    else:
        axes[0][0].legend(loc=legend_loc, fontsize=8)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def alpha_tau_vs_K(runs: Mapping[str, pd.DataFrame]) -> Figure:
    """Notebook 03, ``03_alpha_tau_vs_K``: acceptance and tokens per step against ``K``, one line
    style per run (``runs[name]``, the speculative rows of a runs table: ``K``, ``alpha_iid`` =
    accepted / judged, ``alpha`` = accepted / proposed, ``tau`` = tokens per target pass, and
    ``tau_iid``, the i.i.d. formula at the measured ``alpha_iid``)."""
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 3.8))
    for (name, d), marker, ls in zip(runs.items(), "osD^", ("-", "--", ":", "-."), strict=False):
        ax0.plot(
            d.K,
            d.alpha_iid,
            marker=marker,
            color=COLORS["speculative"],
            ls=ls,
            label=f"{name}: accepted / judged (α of the model)",
        )
        ax0.plot(
            d.K,
            d.alpha,
            marker=marker,
            color=COLORS["draft"],
            ls=ls,
            label=f"{name}: accepted / proposed",
        )
        ax1.plot(
            d.K,
            d.tau,
            marker=marker,
            color=COLORS["speculative"],
            ls=ls,
            label=f"{name}, measured τ",
        )
        ax1.plot(d.K, d.tau_iid, "x", color=COLORS["theory"], label=f"{name}, (1-α^(K+1))/(1-α)")
    ax0.set(
        xlabel="draft length K",
        ylabel="acceptance rate α",
        title="Acceptance rate vs K",
        ylim=(0, None),
    )
    ax1.set(
        xlabel="draft length K",
        ylabel="tokens per target pass (tokens)",
        title="Tokens per step vs K",
        ylim=(0.9, None),
    )
    for ax in (ax0, ax1):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8.5)
    return fig


def latency_throughput(
    runs: pd.DataFrame,
    *,
    setting: str,
    n_tokens: int,
    methods: Sequence[str] = ("speculative", "hf_assisted"),
) -> Figure:
    """Notebook 03, ``03_latency_throughput``: throughput (left) and request latency, p50 and p95
    (right), against ``K`` for each of ``methods`` (speculative decoding, HF assisted generation),
    against the autoregressive baseline (``runs``: a runs table with ``method``, ``K``,
    ``tokens_per_s``, ``latency_p50_ms``, ``latency_p95_ms``). Pass only methods measured side by
    side in the run of ``runs``."""
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 3.8))
    method_colors = {"speculative": COLORS["speculative"], "hf_assisted": COLORS["hf"]}
    for method in methods:
        color = method_colors[method]
        sub = runs[runs.method == method]
        ax0.plot(sub.K, sub.tokens_per_s, "o-", color=color, label=method)
        ax1.plot(sub.K, sub.latency_p50_ms / 1e3, "o-", color=color, label=f"{method} p50")
        ax1.plot(sub.K, sub.latency_p95_ms / 1e3, "o:", color=color, label=f"{method} p95")
    base = runs[runs.method == "autoregressive"].iloc[0]
    ax0.axhline(base.tokens_per_s, color=COLORS["target"], ls="--", label="autoregressive")
    for q, ls in (("p50", "--"), ("p95", ":")):
        ax1.axhline(
            base[f"latency_{q}_ms"] / 1e3,
            color=COLORS["target"],
            ls=ls,
            label=f"autoregressive {q}",
        )
    ax0.set(
        xlabel="draft length K",
        ylabel="throughput (tokens / s)",
        title=f"Throughput ({setting}, {n_tokens}-token requests)",
        ylim=(0, None),
    )
    ax1.set(
        xlabel="draft length K",
        ylabel=f"latency (s per {n_tokens}-token request)",
        title=f"Request latency ({setting})",
        ylim=(0, None),
    )
    for ax in (ax0, ax1):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=9)
    return fig


def gpu_costs(
    passes: Mapping[str, Sequence[float]],
    predicted: pd.DataFrame,
    measured_cpu: pd.DataFrame,
    *,
    title: str,
) -> Figure:
    """Notebook 03, ``03_gpu``: what a GPU changes. Left, the cost of one target pass over ``n``
    tokens relative to a 1-token pass (``passes[device]``, ``n = 1..``); right, the speedup
    predicted from those costs against ``K`` (``predicted``: ``device``, ``width``, ``K``,
    ``predicted_speedup``; one colour per device, solid width 1, dashed width 2), with the
    speedups measured on this CPU (``measured_cpu``: ``width``, ``K``, ``speedup``, and where
    present its 95 % interval ``speedup_low``-``speedup_high``; open markers with error bars).
    Each later device is drawn thinner on top, so that curves that coincide stay visible.
    ``title`` says whether the GPU costs are measured or modelled."""
    from matplotlib.lines import Line2D

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11.0, 4.4))
    palette = [COLORS["target"], COLORS["speculative"], COLORS["hf"], COLORS["draft"]]
    colors = dict(zip(passes, palette, strict=False))
    widths = {d: 3.4 - 0.8 * i for i, d in enumerate(passes)}
    for device, t in passes.items():
        t = np.asarray(t, dtype=float)
        ax0.plot(
            np.arange(1, len(t) + 1), t / t[0], "o-", ms=3, lw=widths[device], color=colors[device]
        )
    ax0.axhline(1.0, color=COLORS["theory"], ls=":", lw=1)
    ax0.set(
        xlabel="tokens in one target pass (K + width)",
        ylabel="time relative to a 1-token pass",
        title="The cost of verification",
        ylim=(0, None),
    )
    ax0.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    for (device, width), sub in predicted.groupby(["device", "width"], sort=False):
        ls = "-" if width == 1 else "--"
        ax1.plot(
            sub.K,
            sub.predicted_speedup,
            ls,
            lw=widths.get(device, 1.8),
            color=colors.get(device, COLORS["theory"]),
        )
    for width, sub in measured_cpu.groupby("width"):
        marker = "o" if width == 1 else "s"
        yerr = None
        if "speedup_low" in sub:
            yerr = np.vstack([sub.speedup - sub.speedup_low, sub.speedup_high - sub.speedup])
        ax1.errorbar(
            sub.K + (0.08 if width == 2 else 0.0),
            sub.speedup,
            yerr=yerr,
            fmt=marker,
            mfc="white",
            capsize=2,
            color=COLORS["target"],
        )
    ax1.axhline(1.0, color="black", lw=0.8)
    ax1.set(
        xlabel="draft length K", ylabel="speedup over autoregressive", title="Predicted speedup"
    )
    ax1.set_ylim(0, None)
    ax1.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    handles = [Line2D([], [], color=c, lw=widths[d], label=d) for d, c in colors.items()]
    handles += [
        Line2D([], [], color="black", ls="-", label="width 1 (predicted)"),
        Line2D([], [], color="black", ls="--", label="width 2 (predicted)"),
        Line2D(
            [],
            [],
            color=COLORS["target"],
            marker="o",
            mfc="white",
            ls="none",
            label="this CPU, measured, width 1",
        ),
        Line2D(
            [],
            [],
            color=COLORS["target"],
            marker="s",
            mfc="white",
            ls="none",
            label="this CPU, measured, width 2",
        ),
    ]
    if "speedup_low" in measured_cpu:
        handles[-2].set_label("this CPU, measured, width 1 (95% interval)")
        handles[-1].set_label("this CPU, measured, width 2 (95% interval)")
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10.5)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    return fig


# ------------------------------------------------------------------------------------------------
# Notebook 04: acceptance by prompt type


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


def position_rates(rates: pd.DataFrame, *, title: str) -> Figure:
    """Notebook 06, ``06_ttt_by_position``: the acceptance probability of each draft position given
    that it was reached, one line per draft (``rates``: ``draft``, ``position`` (1-based),
    ``rate``, ``lo``, ``hi``: its 95% interval, drawn as error bars; points dodged sideways)."""
    drafts = list(dict.fromkeys(rates["draft"]))
    colors = dict(zip(drafts, _CURVE_COLORS, strict=False))
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, name in enumerate(drafts):
        d = rates[rates["draft"] == name].sort_values("position")
        x = d["position"].to_numpy(float) + (i - (len(drafts) - 1) / 2) * 0.08
        err = np.vstack([d["rate"] - d["lo"], d["hi"] - d["rate"]]).clip(min=0)
        ax.errorbar(
            x, d["rate"], yerr=err, fmt="o-", ms=5, capsize=3, color=colors[name], label=name
        )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(
        xlabel="position in the draft",
        ylabel="P(accept | position reached)\nbars: 95% Wilson interval",
        ylim=(0, min(1.0, 1.3 * float(rates["hi"].max()))),
        title=title,
    )
    ax.legend(loc="lower left", fontsize=9)
    fig.tight_layout()
    return fig


def tree_acceptance(rates: pd.DataFrame, *, title: str) -> Figure:
    """Notebook 06, ``06_tree_acceptance``: the probability that a draft depth yields a token once
    the step reaches it, against the candidates checked there, one line per depth, one panel per
    value of ``panel`` (``rates``: ``panel``, ``depth``, ``candidates``, ``rate``, ``lo``, ``hi``:
    its 95% interval, drawn as error bars; points dodged sideways)."""
    panels = list(dict.fromkeys(rates["panel"]))
    depths = sorted(set(rates["depth"]))
    colors = dict(zip(depths, _CURVE_COLORS, strict=False))
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
    """Notebook 06, ``06_tree_ceiling``: predicted speedup against the draft tokens a target pass
    checks, one panel per value of ``panel``. ``curves`` (``panel``, ``curve``, ``nodes``,
    ``predicted_speedup``) are cost-model lines, the first ``curve`` drawn as the ceiling (its
    maximum marked); ``measured`` (``panel``, ``nodes``, ``speedup``, ``speedup_low``,
    ``speedup_high``, ``label``) are measured runs with their 95% intervals."""
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


# ------------------------------------------------------------------------------------------------
# Notebooks 05 and 06: drafting strategies, and the appendix of drafting experiments

# The held-out acceptance that training records: sum_x min(p, q) over the target's top 64 tokens
# only, so a lower bound on the per-token acceptance sum_x min(p, q).
_BOUND_LABEL = (
    "held-out acceptance, lower bound\n" + r"($\sum_x \min(p, q)$ over the target's top 64)"
)

# One colour per curve, from the series' palette (there are at most seven curves).
_CURVE_COLORS = [
    COLORS[k] for k in ("target", "draft", "speculative", "hf", "other", "wrong", "theory")
]


def _training_curves(ax, curves: Mapping[str, pd.DataFrame], x: str, scale: float = 1.0) -> None:
    for (name, h), color in zip(curves.items(), _CURVE_COLORS, strict=False):
        ax.plot(h[x] / scale, h.eval_alpha, marker="o", ms=3, color=color, label=name)
    ax.set(ylabel=_BOUND_LABEL)


def pilot_curves(curves: Mapping[str, pd.DataFrame], *, title: str) -> Figure:
    """Notebook 06, ``06_pilot_curves``: the held-out acceptance bound of each pilot draft during
    training (``curves[name]``: a training history with ``step`` and ``eval_alpha``); the legend
    sits beside the axes, where it covers no curve."""
    fig, ax = plt.subplots(figsize=(8.5, 4))
    _training_curves(ax, curves, "step")
    ax.set(xlabel="training step (8 sequences each)", title=title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=9)
    return fig


def full_training(history: pd.DataFrame, *, alpha_decoding: float) -> Figure:
    """Notebook 05, ``05_full_training``: the acceptance bound of the full-data head during
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
        ylabel=_BOUND_LABEL.replace("held-out ", ""),
        title="The feature head during training on all the data (T = 1)",
    )
    ax.legend(loc="lower right", fontsize=9)
    return fig


def learning_curves(curve: pd.DataFrame, curves: Mapping[str, pd.DataFrame]) -> Figure:
    """Notebook 05, ``05_learning_curves``: acceptance against training data (left; ``curve``: one
    row per run, ``train tokens`` and ``alpha`` measured by decoding) and the held-out bound against
    training time (right; ``curves[run]``: a training history with ``seconds``, ``eval_alpha``)."""
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.4))
    ax0.plot(curve["train tokens"], curve.alpha, "o-", color=COLORS["draft"])
    for _, r in curve.iterrows():
        ax0.annotate(
            f"{r.alpha:.3f}",
            (r["train tokens"], r.alpha),
            textcoords="offset points",
            xytext=(-8, 8),
            ha="right",
            fontsize=9,
        )
    lo, hi = curve.alpha.min(), curve.alpha.max()
    ax0.set(
        xscale="log",
        xlabel="training positions (generated by the target; log scale)",
        ylabel="α at K = 1, T = 1\n(measured by decoding, held-out prompts)",
        title="Acceptance vs training data",
        ylim=(lo - 0.1 * (hi - lo), hi + 0.15 * (hi - lo)),
        xlim=(curve["train tokens"].min() / 1.4, curve["train tokens"].max() * 1.4),
    )
    ax0.set_xticks([1e5, 2e5, 5e5, 1e6, 2e6], ["100k", "200k", "500k", "1M", "2M"])
    ax0.minorticks_off()
    _training_curves(ax1, curves, "seconds", scale=60)
    ax1.set(
        xlabel="training time (minutes, this CPU)", title="Held-out acceptance vs training time"
    )
    ax1.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    return fig


def predicted_by_drafter(predicted: pd.DataFrame) -> Figure:
    """Notebook 05, ``05_predicted_by_drafter``: the speedup that each drafter's ``alpha`` and
    ``c`` predict against ``K`` (``predicted``: ``drafter`` (the legend label), ``K``,
    ``speedup``); the legend sits below the axes."""
    fig, ax = plt.subplots(figsize=(7, 4))
    groups = predicted.groupby("drafter", sort=False)
    for (name, d), color in zip(groups, _CURVE_COLORS, strict=False):
        ax.plot(d.K, d.speedup, "o-", ms=4, color=color, label=name)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(sorted(predicted.K.unique()))
    ax.set(
        xlabel="draft length K",
        ylabel="predicted speedup over\nautoregressive decoding (×)",
        title="What each drafter's α and c predict (i.i.d. model, T = 1, bf16)",
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=9, ncol=1)
    return fig


def dtype_pass_costs(costs: pd.DataFrame) -> Figure:
    """Notebook 06, ``06_dtype_pass_costs``: the cost of a cached target pass over ``n`` tokens
    relative to one token, in float32 and in bfloat16 (``costs``, indexed by ``n``:
    ``float32 / one token``, ``bfloat16 / one token``)."""
    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.plot(
        costs.index, costs["float32 / one token"], "o-", color=COLORS["target"], label="float32"
    )
    ax.plot(
        costs.index, costs["bfloat16 / one token"], "s-", color=COLORS["draft"], label="bfloat16"
    )
    ax.axhline(1, color="black", lw=0.8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(
        xlabel="tokens in one cached target pass (K + 1)",
        ylabel="time relative to a 1-token pass (×)",
        title="Verification cost, SmolLM2-135M on this CPU (one thread)",
        ylim=(0, None),
    )
    ax.legend(loc="lower right")
    return fig


def speedup_intervals(
    runs: pd.DataFrame, *, title: str, panel_size: tuple[float, float] = (5.2, 4.0)
) -> Figure:
    """Notebooks 05 and 06, ``05_speedup_vs_K`` and ``06_width``: measured speedup over
    autoregressive decoding against ``K`` with its 95% interval over prompts (error bars), one
    line per configuration, one panel per value of ``panel``.

    ``runs``: one row per (``panel``, ``config``, ``K``) with ``speedup``, ``speedup_low``,
    ``speedup_high`` and optionally ``predicted_speedup`` (the cost model: crosses on a dotted line
    of the same colour). A configuration keeps its colour across panels; its points are dodged a
    little along ``K`` so that intervals do not hide each other. The legend sits below the panels."""
    panels = list(dict.fromkeys(runs["panel"]))
    configs = list(dict.fromkeys(runs["config"]))
    colors = dict(zip(configs, _CURVE_COLORS, strict=False))
    width, height = panel_size
    fig, axes = plt.subplots(
        1, len(panels), figsize=(width * len(panels), height), sharey=True, squeeze=False
    )
    step = 0.1
    for ax, panel in zip(axes[0], panels, strict=True):
        here = runs[runs["panel"] == panel]
        names = [c for c in configs if c in set(here["config"])]
        for i, name in enumerate(names):
            d = here[here["config"] == name].sort_values("K")
            x = d["K"].to_numpy(float) + (i - (len(names) - 1) / 2) * step
            y = d["speedup"].to_numpy(float)
            err = np.vstack([y - d["speedup_low"].to_numpy(float), d["speedup_high"] - y])
            ax.errorbar(x, y, yerr=err, fmt="o-", ms=5, capsize=3, color=colors[name])
            if "predicted_speedup" in d and d["predicted_speedup"].notna().any():
                ax.plot(x, d["predicted_speedup"], "x:", ms=6, color=colors[name], lw=1.2)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(
            xlabel="draft length K",
            title=panel,
            xlim=(runs["K"].min() - 0.5, runs["K"].max() + 0.5),
        )
    axes[0][0].set_ylabel("speedup over autoregressive (×)\nbars: 95% interval over prompts")
    handles = [Line2D([], [], color=colors[c], marker="o", label=f"{c}, measured") for c in configs]
    if "predicted_speedup" in runs and runs["predicted_speedup"].notna().any():
        handles.append(
            Line2D([], [], color="grey", marker="x", ls=":", label="predicted by the cost model")
        )
    handles.append(Line2D([], [], color="black", lw=0.8, label="autoregressive (1×)"))
    fig.suptitle(title)
    fig.tight_layout()
    fig.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=2 if len(handles) > 3 else len(handles),
        fontsize=9,
    )
    return fig


set_style()
