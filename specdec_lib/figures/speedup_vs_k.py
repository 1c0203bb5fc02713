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

from ..bench import runs_frame
from .style import COLORS
from .words import interval, span

__all__ = [
    "MAIN_RUNS",
    "absolute_speed",
    "findings",
    "k_choice",
    "latency_throughput",
    "speedup_vs_K",
]


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


# The page's findings, in words rendered from the campaign: the first thing notebook 03 shows.

MAIN_RUNS = {
    "recommended, T = 1": "recommended_T1",
    "recommended, greedy": "recommended_greedy",
    "chain, T = 1": "chain_T1",
    "early exit, T = 1": "early_exit_T1",
}


def findings(campaign: Any, gpu_run: dict[str, Any] | None = None) -> str:
    """Notebook 03's findings in Markdown, from ``campaign`` (a
    :class:`~specdec_lib.research.campaign.Campaign`) and the stored GPU run, if any: the
    headline with its interval, the cost model's fit, the early exit, llama.cpp, the GPU."""
    h = campaign.headline()
    results = campaign.runs(MAIN_RUNS)
    tables = {name: runs_frame(res, intervals=True) for name, res in results.items()}
    spec = {n: t[t.method == "speculative"].set_index("K") for n, t in tables.items()}
    main = results["recommended, T = 1"]
    n_prompts, n_tokens = len(main["prompts"]), main["settings"]["max_new_tokens"]
    efficiency = pd.concat([s.efficiency for s in spec.values()])
    out = [
        f"""**Findings.** On {campaign.machine}, the recommended configuration decodes
{_at(h, "T1")} as fast as the autoregressive baseline at $K = {h["K"]}$ ($T = 1$, {n_prompts}
prompts × {n_tokens} tokens; 95 % bootstrap interval over prompts){k_choice(h, spec["recommended, T = 1"])}. Read
again on a replicate with other sampling seeds, that $K$ gives {_at(h, "replicate")}, and
greedy decoding gives {_at(h, "greedy")} there (greedy's own best: $K = {h["greedy_best_K"]}$).""",
        f"""The cost model of §1, fed each run's own pass costs and acceptance, accounts for the
measurements: measured / predicted speedup lies in {span(efficiency)} for every run and $K$ of
this page.""",
        _early_finding(tables["early exit, T = 1"]),
        _peer_finding(campaign.runs({"T = 1": "peers_T1", "greedy": "peers_greedy"})),
        _gpu_finding(gpu_run),
    ]
    return out[0] + "\n\n" + "\n".join(f"- {line}" for line in out[1:])


def _at(h: dict[str, Any], run: str) -> str:
    return interval(h[run]["speedup"], h[run]["low"], h[run]["high"])


def _row(table: pd.DataFrame, K: int, method: str = "speculative") -> str:
    row = table[(table.method == method) & (table.K == K)].iloc[0]
    return interval(row.speedup, row.speedup_low, row.speedup_high)


def k_choice(h: dict[str, Any], main: pd.DataFrame) -> str:
    """How the headline ``h`` (``Campaign.headline()``) chose its K, where the T = 1 run's own best
    (in ``main``, its speculative rows indexed by K) lies outside the K its replicate ran."""
    if h["best_K_T1"] == h["K"]:
        return ", the best of that run"
    k, row = h["best_K_T1"], main.loc[h["best_K_T1"]]
    best = interval(row.speedup, row.speedup_low, row.speedup_high)
    return (
        f", the best of the {len(h['common_K'])} draft lengths its replicate also ran "
        f"(the run's own best, {best} at $K = {k}$, has no replicate)"
    )


def _early_finding(table: pd.DataFrame) -> str:
    early = table[table.method == "speculative"].set_index("K")
    best = int(early.speedup.idxmax())
    slower = bool((early.speedup_high < 1).all())
    text = (
        "The untrained early exit is "
        + ("slower than autoregressive decoding at every $K$ measured" if slower else "no faster")
        + f" (best: {_row(table, best)} at $K = {best}$)"
    )
    if (table.method == "hf_assisted").any():
        text += (
            "; transformers' assisted generation on the same draft gives "
            f"{_row(table, best, 'hf_assisted')} at that $K$"
        )
    return text + "."


def _peer_finding(peers: Mapping[str, dict[str, Any]]) -> str:
    """§9 in one sentence: the recommended configuration against llama.cpp on the same file."""
    out = []
    for mode, res in peers.items():
        rows = {r["method"]: r for r in res["summary"]}
        lcp, spec = rows["llamacpp_autoregressive"], rows["speculative"]
        ratio = spec["tokens_per_s"] / lcp["tokens_per_s"]
        where = "at $T = 1$" if mode == "T = 1" else "in greedy decoding"
        out.append(f"{interval(ratio, *spec['vs_llamacpp_ci'])} llama.cpp's tokens/s {where}")
    return (
        "**Against what a user would run** (§9): llama.cpp decoding the same GGUF file one token a "
        "pass, with the same prompts, seeds and threads. The recommended configuration decodes at "
        + " and ".join(out)
        + "; each engine's roofline, the bandwidth over the bytes of its weights, is drawn beside it."
    )


def _gpu_finding(gpu_run: dict[str, Any] | None) -> str:
    """What §8 rests on: a GPU's measured pass costs where its run is stored, else a model."""
    if gpu_run is None:
        return (
            "Section 8 predicts what a GPU changes from a roofline-plus-launch model of its pass "
            "costs; those numbers are predictions, not measurements."
        )
    name = gpu_run["provenance"].get("gpu", "a GPU")
    return (
        f"Section 8 sets pass costs measured on an {name} (the default target's shapes with "
        "random weights: a pass's time depends on the shapes, not the values) beside this CPU's "
        "acceptance; the pass costs are measured, the GPU speedups they give are predictions."
    )
