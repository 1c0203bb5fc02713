"""The figures of ``notebooks/03_speedup_vs_k.ipynb`` (speedup against ``K``): measured and
predicted speedups, latency and throughput."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .style import COLORS

__all__ = ["absolute_speed", "latency_throughput", "speedup_vs_K"]


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
    """Notebook 03, ``03_speedup_vs_K`` and ``03_speedup_vs_K_trained``: speedup against ``K``,
    a panel per run (``panels[title]``, indexed by ``K``): ``speedup`` with its 95 % interval
    ``speedup_low``-``speedup_high`` or else its band ``q25``-``q75``, ``predicted_speedup``, and
    optionally ``ideal`` (Leviathan et al.) and ``hf_speedup`` (with ``hf_low``-``hf_high``).
    ``claim``: the prototype's (``K``, ``speedup``), dashed; ``target``: a speed target, dotted;
    ``legend_loc="below"``: one legend under the panels."""
    width, height = panel_size
    fig, axes = plt.subplots(
        1, len(panels), figsize=(width * len(panels), height), sharey=True, squeeze=False
    )
    for ax, (title, d) in zip(axes[0], panels.items(), strict=True):
        _speedup_panel(ax, d, claim, hf_label)
        ax.axhline(1.0, color="black", lw=0.8)
        if target is not None:
            ax.axhline(target, color="grey", lw=0.8, ls=":")
        ax.set(xlabel="draft length K", title=title, ylim=ylim)
    axes[0][0].set_ylabel(ylabel)
    if legend_loc == "below":  # every series of every panel, once
        entries: dict[str, Any] = {}
        for ax in axes[0]:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                entries.setdefault(label, handle)
        fig.legend(
            entries.values(),
            entries.keys(),
            loc="upper center",
            bbox_to_anchor=(0.5, 0.0),
            ncol=2,
            fontsize=9,
        )
    else:
        axes[0][0].legend(loc=legend_loc, fontsize=8)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def _speedup_panel(
    ax: Any, d: pd.DataFrame, claim: Mapping[str, Sequence[float]] | None, hf_label: str
) -> None:
    """One panel of :func:`speedup_vs_K`."""
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


def latency_throughput(
    runs: pd.DataFrame,
    *,
    setting: str,
    n_tokens: int,
    methods: Sequence[str] = ("speculative", "hf_assisted"),
) -> Figure:
    """Notebook 03, ``03_latency_throughput``: throughput (left) and request latency p50 and p95
    (right) against ``K`` for each of ``methods``, against the autoregressive baseline (``runs``:
    ``method``, ``K``, ``tokens_per_s``, ``latency_p50_ms``, ``latency_p95_ms``)."""
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


def absolute_speed(
    panels: Mapping[str, pd.DataFrame], *, lines: Mapping[str, float], machine: str
) -> Figure:
    """Notebook 03, ``03_absolute_speed``: tokens per second of every method, one panel per
    decoding mode (``panels[title]``: ``label``, ``engine``, ``tokens_per_s`` with its 95 %
    interval ``low``-``high``, ``decode_tokens_per_s`` where measured), beside vertical ``lines``
    (``{label: tokens/s}``: llama.cpp's own benchmark and each engine's roofline)."""
    n = len(next(iter(panels.values())))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(6.2 * len(panels), 1.1 + 0.55 * n), sharey=True, squeeze=False
    )
    engine_colors = {"llama.cpp": COLORS["hf"], "this library": COLORS["speculative"],
                     "transformers": COLORS["other"]}  # fmt: skip
    line_styles = [("--", COLORS["hf"]), (":", COLORS["hf"]), (":", COLORS["speculative"])]
    top = max(lines.values()) * 1.08
    for ax, (title, df) in zip(axes[0], panels.items(), strict=True):
        y = np.arange(len(df))[::-1]
        colors = [engine_colors[e] for e in df.engine]
        err = [df.tokens_per_s - df.low, df.high - df.tokens_per_s]
        ax.barh(y, df.tokens_per_s, xerr=err, color=colors, height=0.6, capsize=3)
        has = df.decode_tokens_per_s.notna()
        ax.plot(df.decode_tokens_per_s[has], y[has.to_numpy()], "k|", ms=14, mew=2)
        for (label, value), (ls, color) in zip(lines.items(), line_styles, strict=False):
            ax.axvline(value, ls=ls, color=color, lw=1.6, label=f"{label}: {value:.0f}")
        for yi, v in zip(y, df.tokens_per_s, strict=True):
            ax.text(v * 0.98, yi, f"{v:.0f}", va="center", ha="right", color="white", fontsize=9)
        ax.set(xlim=(0, top), xlabel="tokens / s (bars: whole requests; | : after the prompt)",
               title=title)  # fmt: skip
        ax.set_yticks(y, df.label)
    axes[0][-1].legend(loc="lower right", fontsize=8.5, framealpha=0.95)
    fig.suptitle(f"Absolute speed on the same GGUF file, {machine}", fontsize=11)
    fig.tight_layout()
    return fig
