"""The figures of ``notebooks/01_acceptance_rule.ipynb`` (the acceptance rule): the law the rule
emits against the prototype's, tokens per step and speedup against ``K`` in theory, and greedy
decoding as ``T -> 0``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .style import COLORS

__all__ = [
    "acceptance_split",
    "greedy_limit",
    "mismatched_q",
    "prototype_bias",
    "speedup_theory",
    "tokens_per_step",
]

# The acceptance rates that notebook 01's figures share, one colour each.
_ALPHA_COLORS = {
    0.5: COLORS["other"],
    0.6: COLORS["draft"],
    0.8: COLORS["speculative"],
    0.9: COLORS["target"],
    0.95: COLORS["hf"],
}


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
    """Notebook 01, ``01_prototype_bias``: the prototype's output law on one pair (left, stacked
    under ``p``) and histograms of its TV bias over random pairs per vocabulary size (right;
    ``bias``: a row per pair, ``V``, ``tv_prototype``; ``summary`` by ``V``: ``pairs``,
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
    """Notebook 01, ``01_tokens_per_step``: expected tokens per step against ``K``, the closed
    form ``expected[alpha]`` (lines) under the ceiling ``K + 1``, and Monte Carlo means of
    ``verify`` (``mc``: ``alpha``, ``K``, ``mean``, ``se``; ±2 SE bars)."""
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
    """Notebook 01, ``01_speedup_vs_K``: Leviathan et al.'s expected speedup against ``K``
    (``curves``: ``alpha``, ``c``, ``K``, ``speedup``; ``optima``, starred: the best ``K`` per
    ``(alpha, c)``, same columns). Left: the other ``alpha``, a line style per cost ``c``.
    Right: ``claimed_alpha`` per ``c``, against the prototype's ``K x alpha``."""
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
    """Notebook 01, ``01_greedy_limit``: greedy decoding as ``T -> 0``. Left: ``tempered[T]``,
    the tempered softmax, tokens sorted by logit. Middle: its TV to the one-hot argmax against
    ``T``, under ``bound``. Right: ``alpha(T)`` for drafts whose argmax agrees with the target's
    and differs from it."""
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
