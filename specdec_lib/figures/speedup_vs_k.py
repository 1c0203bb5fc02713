"""The figures of notebook 03, speedup against ``K`` (``notebooks/03_speedup_vs_k.ipynb``): the
cost of a verification pass, measured and predicted speedups, acceptance and tokens per step,
latency and throughput, and what a GPU changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from ..style import COLORS

__all__ = ["alpha_tau_vs_K", "gpu_costs", "latency_throughput", "pass_costs", "speedup_vs_K"]


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
    """Notebook 03, ``03_speedup_vs_K`` and ``03_speedup_vs_K_trained``: speedup over
    autoregressive decoding against ``K``, one panel per run (its title the key of ``panels``).

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
