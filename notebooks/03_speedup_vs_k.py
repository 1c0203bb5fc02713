# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.17.3
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Speedup vs K: measured, predicted, and what a GPU changes
#
# How much faster speculative decoding is than decoding one token a pass, on one CPU, at each draft
# length $K$; why, by a cost model; and what a GPU would change. What this page finds, rendered from
# the campaign it reads (`data/results/campaign/`):

# %%
from IPython.display import Markdown

from specdec_lib.config import RESULTS_DIR
from specdec_lib.figures import speedup_vs_k as figs
from specdec_lib.research.campaign import Campaign
from specdec_lib.results import read_json

CAMPAIGN = Campaign.read(RESULTS_DIR / "campaign")
GPU_PATH = RESULTS_DIR / "gpu_run_cuda.json"  # §8: a GPU's measured pass costs, where stored
Markdown(figs.findings(CAMPAIGN, read_json(GPU_PATH) if GPU_PATH.exists() else None))

# %% [markdown]
# **Aim.** Notebooks 01 and 02 showed that speculative sampling is *exact*. Here we ask whether it is
# *fast*. We take up the original prototype's experiment — 20 prompts in five categories, 50 new
# tokens each, a grid of draft lengths $K$, temperature 1.0, plus greedy decoding — with
# measurements on one machine, the methods side by side in one process:
#
# * **autoregressive**: the target alone, one pass per token, with the same warps, sampler and KV
#   cache as the speculative decoder (the fair baseline; the prototype's baseline used `generate`'s
#   default `top_k=50` while its speculative path sampled the full softmax, and had no KV cache);
# * **speculative**: `specdec_lib.SpeculativeDecoder` at each $K$;
# * **hf_autoregressive**: transformers' plain `generate` (with `top_k=0`), to check that our
#   baseline is not slow;
# * **hf_assisted**: transformers' assisted generation (`assistant_model=`,
#   `num_assistant_tokens=K`, constant schedule, confidence threshold off). Its assistant must be a
#   causal language model of its own, so it runs beside the untrained early exit below, on the same
#   draft as our decoder.
#
# **The configuration.** The main runs measure the *recommended configuration* as the campaign
# ran it: `python -m specdec_lib bench` without flags at the campaign's commit, which resolves its
# choices on the machine at start-up and records them (printed below the setup cell). Its draft is
# a small head trained on the target's own samples; notebook 05 builds it, and all this notebook
# needs of it is its cost $c$ (one draft proposal, in target passes over one token) and its
# acceptance. Three choices are the machine's:
#
# * **the dtype and the weights' layout**: the target's passes over one token and over a step's
#   tokens are timed in float32 and bfloat16, as loaded and packed, and the fastest is kept (on
#   CPUs with AVX512-BF16, bfloat16 on the library's own bfloat16 product, which reads each weight
#   once per pass);
# * **a draft tree at each $K$**: several candidate tokens at the first draft positions, one at
#   each deeper position, all verified in one target pass. At each depth the candidates are
#   judged one after the other by recursive rejection and at most one is kept, so a step still
#   emits an exact sample of the target (notebook 02 tests the shipped configurations); a kept
#   alternative has no children, so the step ends after it. The shape is the one the cost model
#   of §1 ranks fastest from the pass costs timed at start-up and the head's measured acceptance
#   of every such tree;
# * **a draft that stops by confidence**: the head stops drafting after a token it was unsure of
#   (confidence below 0.4), so $K$ caps the draft's length instead of fixing it. Stopping on the
#   drafts so far is a stopping time, and the output stays exact.
#
# Two contrasts, measured in the same campaign: the **chain** (one candidate per position, $K$
# drafts every step, the preset `chain`: speculative decoding as Leviathan et al. state it; its
# dtype and weights are printed below too) and the **early exit**, an untrained draft
# made of the target's first layers and its output head.
#
# Then we compare with the theory through a **cost model** fed the run's own measured pass costs,
# and explain the gap; and finally *what a GPU changes*: the same acceptance with a GPU's pass
# costs, measured where a GPU run is present, otherwise a roofline-plus-launch model of three
# GPUs, every number of which is a prediction.
#
# From earlier notebooks this page needs the acceptance rule and the expected tokens per step
# (notebook 01) and the exactness of the decoders (notebook 02). The trained draft is built later,
# in notebook 05; here only its cost and its acceptance matter, and this page measures both.
#
# The prototype printed hard-coded numbers (a T4 GPU, 1.87× at $K=5$, acceptance 0.71, a
# speedup-vs-$K$ list). We quote them only as **claimed by the prototype**; nothing in them was
# measured by its code.
#
# **How the numbers are made.** `python -m specdec_lib bench` (`specdec_lib.bench`) measures every
# (method, $K$, prompt) *cell* in an order rotated from prompt to prompt, so that slow drift of the
# machine spreads over all methods; warm-up runs are excluded; each cell is written atomically to a
# JSON file with its provenance (device, versions, git commit, date, seed, settings). Every run
# read here belongs to one *campaign* (`data/results/campaign/`): one machine, one commit, and a
# manifest with each run's command and why it is measured. The runs of this page are re-measured
# into a new folder by
#
# ```bash
# python -m specdec_lib campaign --out FOLDER --only recommended_T1 recommended_T1_replicate \
#     recommended_greedy chain_T1 early_exit_T1 pass_costs
# ```
#
# **Intervals.** A speedup is the pooled tokens/s of a method over the pooled tokens/s of the
# autoregressive baseline on the same prompts, in the same run. Its 95 % interval
# (`speedup_low`–`speedup_high`, `bench.speedup_interval`) is a paired bootstrap over prompts: a
# prompt's cells of both methods, repeats pooled, are resampled together. It speaks of prompts like
# these on this machine, at its timing noise. The headline's $K$ is chosen on one run, among the $K$
# its replicate also ran, and read again on that replicate with other sampling seeds
# (`Campaign.headline`), so the number quoted is not the best of several draws.

# %%
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from specdec_lib.bench import runs_frame
from specdec_lib.bench.analysis import depth_counts, model_costs, run_tree, tree_rates
from specdec_lib.config import DATA_DIR
from specdec_lib.costs import (
    base_cost,
    draft_cost,
    drafted_tokens,
    drafted_widths,
    expected_tokens_per_step,
    predicted_stopped_speedup,
    predicted_tree_speedup,
    step_cost,
    stopped_prediction,
    tree_prediction,
)
from specdec_lib.figures import speedup_vs_k as figs
from specdec_lib.figures.provenance import data_read
from specdec_lib.figures.style import COLORS, CURVE_COLORS, savefig
from specdec_lib.figures.words import interval as fmt_ci
from specdec_lib.figures.words import span as rng_
from specdec_lib.research import gpu_model
from specdec_lib.research.gpu_model import GPUS, gpu_pass_time
from specdec_lib.results import check_same_machine, read_json

pd.set_option("display.precision", 3)
PLAN = figs.MAIN_RUNS  # the page's names for the campaign's runs, as its findings read them
MAIN, GREEDY, CHAIN, EARLY = PLAN
results = CAMPAIGN.runs(PLAN)  # refused if the runs come from two machines
HEADLINE = CAMPAIGN.headline()  # the best K of the T = 1 run among the K the replicate ran too
PEERS = CAMPAIGN.runs({"T = 1": "peers_T1", "greedy": "peers_greedy"})  # §9: llama.cpp beside us
MACHINE, MACHINE_SHORT = CAMPAIGN.machine, CAMPAIGN.machine_short
tables = {name: runs_frame(res, intervals=True) for name, res in results.items()}


def spec_rows(name):
    # the speculative rows of a run's table, indexed by K
    df = tables[name]
    return df[df.method == "speculative"].set_index("K")


def has_method(name, method):
    return bool((tables[name].method == method).any())


def cells_at(res, K):
    return [c for key, c in res["cells"].items() if key.startswith(f"speculative|{K}|")]


def tree_at(res, K):
    # the step's shape of a run at K: its tree, or the tree it tuned for K at start-up
    return run_tree(res["settings"], res.get("tuned_trees"), K)


LAYOUTS = {"library": ", the library's bfloat16 product", "on": ", prepacked for oneDNN"}


def describe_run(res, short=False):
    s = res["settings"]
    trees = {K: tuple(tree_at(res, K)) for K in s["K"]}
    if len(set(trees.values())) == 1:
        tree = next(iter(trees.values()))
        shape = "chain" if tree == (1,) else f"tree {tree}"
        shape += " (tuned)" if s.get("tune_tree") else ""
    elif short:
        shape = "a tree tuned per K"
    else:
        shape = "trees tuned per K: " + ", ".join(f"{t} at K = {K}" for K, t in trees.items())
    stop = (
        f", stopped below confidence {s['threshold']}" if s.get("schedule") == "threshold" else ""
    )
    layout = LAYOUTS.get(res["pair"].get("pack"), "")
    return f"{s['draft']} draft, {shape}{stop}, {s['dtype']}{layout}"


print(f"machine: {MACHINE}")
print(f"the campaign's code: commit {CAMPAIGN.commit}")
for name, res in results.items():
    prov = res["provenance"]
    print(
        f"{name}: {res['status']}, {len(res['cells'])} cells; {describe_run(res)}; "
        f"torch {prov['torch']}, transformers {prov['transformers']}, "
        f"{prov['torch_threads']} threads"
    )


# %%
def with_ci(name, K, method="speculative"):
    row = tables[name].query("method == @method and K == @K").iloc[0]
    return fmt_ci(row.speedup, row.speedup_low, row.speedup_high)


H = HEADLINE
n_prompts = len(results[MAIN]["prompts"])
n_tokens = results[MAIN]["settings"]["max_new_tokens"]

# %%
# NBVAL_CHECK_OUTPUT
# What was measured (the same in quick and full mode).
for name, res in results.items():
    s = res["settings"]
    methods = sorted({r["method"] for r in res["runs"]})
    print(
        name,
        "| complete:",
        res["status"] == "complete",
        "| prompts:",
        len(res["prompts"]),
        "| K:",
        s["K"],
        "| tokens per prompt:",
        s["max_new_tokens"],
        "| methods:",
        methods,
    )

# %% [markdown]
# ## 1. The cost model
#
# Leviathan et al.'s walltime formula (notebook 01, §6) assumes that a target pass over $K+1$ tokens
# costs the same as over one token — true on a GPU that is bound by reading the weights, and to be
# measured on a CPU. So each run measures, in the same process as its cells, the time of one cached
# target pass over $n$ new tokens, $t_\text{target}(n)$, and of the draft's proposals
# ($t_\text{draft}$ for one token, $t_\text{draft,next}$ for each further one; medians of 15
# interleaved rounds at a 64-token context). A step that drafts $K$ positions puts $n_K$ draft
# tokens in the target's pass ($n_K = K$ for the chain; $4 + 3 + (K - 2)$ for a tree $(4, 3)$ at
# $K \ge 2$) and costs, in one-token target passes,
#
# $$
# \text{cost}(K) = \frac{t_\text{draft} + (K-1)\,t_\text{draft,next} + t_\text{target}(1 + n_K)}{t_\text{target}(1)},
# \qquad \text{predicted speedup}(K) = \frac{E[\text{tokens per step}]}{\text{cost}(K)}.
# $$
#
# A run that also times the host's work of a step, $h(K)$ (the tree, its verification and the
# kept path), and of the baseline's draw, $h(0)$, adds them to the numerator and the denominator
# (`costs.t_host_s`); the runs shown here time both.
#
# For the chain, $E[\text{tokens per step}] = (1-\alpha^{K+1})/(1-\alpha)$ with $\alpha$ measured in
# the same run at that $K$. Which $\alpha$? The formula's $\alpha$ is the probability that a draft
# token is accepted *given that it is judged*, the same at every position. A step stops at its
# first rejection, so the drafts after it are proposed but never judged; hence the plain ratio
# accepted / proposed (column `alpha`) equals $(\alpha - \alpha^{K+1})/((1-\alpha)K)$ under the
# model and falls with $K$ even when $\alpha$ does not. We predict with accepted / judged, the
# maximum-likelihood estimate of the per-position $\alpha$ (column `alpha_judged`).
#
# For the tree the model works per depth $d$ (notebook 06, §5): $\beta_d$, the probability that the
# chain's token at depth $d$ is accepted once the step reaches it, and $\gamma_d$, the probability
# that one of the depth's alternatives is kept once that token is rejected. With
# $R_1 = 1$, $R_{d+1} = R_d\,\beta_d$,
#
# $$
# E[\text{tokens per step}] = \sum_{d=1}^{K} R_d\,(1 - \beta_d)\,(d + \gamma_d) + R_{K+1}\,(K + 1),
# $$
#
# at the rates the run's steps show (`bench.tree_rates`). For a tree, `alpha_judged` counts a depth
# as accepted when any of its candidates is kept. A second prediction,
# `predicted_speedup_from_tau`, uses the measured tokens per step directly and so isolates the
# implementation's overhead from the model of acceptance.
#
# A draft that stops by confidence (the recommended runs) drafts a random number of tokens, a
# stopping time: the library's model (`costs.stopped_step_law`) takes the probability of stopping
# after each depth and each depth's rates by whether the draft went on from it or stopped there,
# read from the run's own steps (`bench.stopped_rates`), and averages the formula above and the
# step's cost over the draft's length. With no stops it is the fixed draft's model.
#
# The model in code, as the two formulas above say it (the library's `costs.step_cost` and
# `costs.tree_tokens_per_step` are the same arithmetic; the next cell checks this version against
# the predictions stored with every run of this notebook that drafts $K$ tokens a step). A chain is the tree whose alternatives
# are never kept ($\gamma_d = 0$, $\beta_d = \alpha$), where the sum reduces to
# $(1-\alpha^{K+1})/(1-\alpha)$:


# %%
def step_cost_ref(K, costs, widths):
    # one step in one-token target passes: K draft proposals, one target pass over 1 + n_K tokens
    t, n_K = costs["t_target_s"], sum(widths)
    t_draft = costs["t_draft_s"] + (K - 1) * costs["t_draft_next_s"]
    if K <= len(costs.get("t_draft_by_k_s", [])):  # a run that timed each proposal length
        t_draft = costs["t_draft_by_k_s"][K - 1]
    h = {int(k): v for k, v in costs.get("t_host_s", {}).items()}  # a run that timed host work
    return (t_draft + t[n_K] + h.get(K, 0.0)) / (t[0] + h.get(0, 0.0))


def tokens_per_step_ref(beta, gamma):
    # E = sum_d R_d (1 - beta_d) (d + gamma_d) + R_{K+1} (K + 1), R_1 = 1, R_{d+1} = R_d beta_d
    E, R = 0.0, 1.0
    for d, (b, g) in enumerate(zip(beta, gamma, strict=True), start=1):
        E += R * (1 - b) * (d + g)
        R *= b
    return E + R * (len(beta) + 1)


# %%
# NBVAL_CHECK_OUTPUT
def predicted_ref(res, K):
    # the stored run's prediction at K, recomputed with the reference model at the run's own rates
    widths = drafted_widths(K, tree_at(res, K))
    if max(widths) == 1:  # the chain: one alpha, accepted / judged
        reached, accepted, _ = depth_counts(cells_at(res, K), K, widths)
        beta, gamma = [accepted.sum() / reached.sum()] * K, [0.0] * K
    else:  # the tree: each depth's rates, a rate never measured counting as 0
        r = tree_rates(cells_at(res, K), K, max(widths))
        beta = np.nan_to_num(r["beta"])
        gamma = [np.nan_to_num(r["gamma"][d][w - 1]) for d, w in enumerate(widths)]
    return tokens_per_step_ref(beta, gamma) / step_cost_ref(K, model_costs(res), widths)


FIXED = [n for n in (MAIN, GREEDY, CHAIN, EARLY) if results[n]["settings"]["schedule"] == "fixed"]
gaps = [
    abs(predicted_ref(results[name], r["K"]) - r["predicted_speedup"])
    for name in FIXED
    for r in results[name]["runs"]
    if r["method"] == "speculative"
]
print(
    f"the reference model reproduces the {len(gaps)} stored predictions of the runs that draft K tokens a step:",
    max(gaps) < 1e-9,
)
print(
    "every run of this page times the host's work too:",
    all(model_costs(results[name]).get("t_host_s") for name in (MAIN, GREEDY, CHAIN, EARLY)),
)

# %% [markdown]
# The pass costs of the recommended run, and their spread over every benchmark run of the campaign
# in the same dtype (each run times the target's passes at its start):

# %%
main = results[MAIN]
costs = main["costs"]
TREE = tree_at(main, HEADLINE["K"])  # the headline step's shape
kind = (main["settings"]["dtype"], main["pair"].get("packed"))
loaded = {CAMPAIGN.manifest["runs"][run]["out"]: results[name] for name, run in PLAN.items()}
cost_runs = {}
for path in sorted(CAMPAIGN.folder.glob("bench_*.json")):
    res = loaded.get(path.name) or read_json(path)
    if (
        res["status"] == "complete"
        and (res["settings"]["dtype"], res["pair"].get("packed")) == kind
    ):
        check_same_machine([main, res], "pass costs")
        cost_runs[path.stem.removeprefix("bench_")] = res["costs"]["t_target_s"]
relative_runs = pd.DataFrame(
    {run: pd.Series(np.array(t) / t[0], index=range(1, len(t) + 1)) for run, t in cost_runs.items()}
)
t_target = np.array(costs["t_target_s"]) * 1e3
cost_table = pd.DataFrame(
    {
        "t_target(n) ms": t_target,
        "relative to n = 1": t_target / t_target[0],
        "lowest over runs": relative_runs.min(axis=1),
        "highest over runs": relative_runs.max(axis=1),
    },
    index=pd.Index(range(1, len(t_target) + 1), name="n tokens in the pass"),
)
display(cost_table.T.round(3))
reach = relative_runs.notna().sum(axis=1)
print(
    f"spread over {len(cost_runs)} runs ({', '.join(cost_runs)}); "
    f"{int(reach.loc[len(t_target)])} of them timed passes of {len(t_target)} tokens"
)
print(
    f"t_draft = {costs['t_draft_s'] * 1e3:.2f} ms, t_draft_next = "
    f"{costs.get('t_draft_next_s', costs['t_draft_s']) * 1e3:.2f} ms, "
    f"c = t_draft / t_target(1) = {costs['c']:.3f} ({main['settings']['draft']} draft)"
)
choice = main.get("dtype_choice", {})
if choice:
    print(f"dtype chosen at start-up: {choice['dtype']} ({choice['why']}); target pass in ms:")
    for option, t in choice["t_target_s"].items():
        print("  " + option + ": " + ", ".join(f"n = {n}: {s * 1e3:.1f}" for n, s in t.items()))

# %% [markdown]
# The same curve from the campaign's pass-cost run (`device-costs`: the target's architecture with
# random weights as loaded, passes over every number of tokens it measured; the time of a pass depends on the shapes,
# not on the values), and the start-up timings in the other dtypes:

# %%
DEVICE_COSTS = CAMPAIGN.folder / "device_costs_cpu.json"
device_costs = read_json(DEVICE_COSTS) if DEVICE_COSTS.exists() else None
if device_costs is not None:
    check_same_machine([main, device_costs], "pass costs")
K_BEST = HEADLINE["K"]
n_best = 1 + drafted_tokens(K_BEST, TREE)  # the headline step's verification pass
rel_best = t_target[n_best - 1] / t_target[0]

fig, ax = plt.subplots(figsize=(7.2, 4.0))
n = cost_table.index.values
ax.fill_between(
    n,
    cost_table["lowest over runs"],
    cost_table["highest over runs"],
    color=COLORS["target"],
    alpha=0.2,
    lw=0,
    label=f"range over the campaign's {len(cost_runs)} runs in {kind[0]}",
)
ax.plot(
    n,
    cost_table["relative to n = 1"],
    "o-",
    color=COLORS["target"],
    ms=4,
    label=f"recommended run ({kind[0]}{', prepacked' if kind[1] else ''})",
)
if device_costs is not None:
    t = np.array(device_costs["costs"]["t_target_s"])
    ax.plot(
        np.arange(1, len(t) + 1),
        t / t[0],
        "-",
        color=COLORS["other"],
        lw=1.2,
        label=f"pass-cost run ({device_costs['provenance']['settings']['dtype']}, random "
        "weights as loaded)",
    )
for (option, t), marker in zip(choice.get("t_target_s", {}).items(), "^vD", strict=False):
    n_opt = max(int(k) for k in t)
    ax.plot(
        n_opt,
        t[str(n_opt)] / t["1"],
        marker,
        color="black",
        ls="none",
        label=f"start-up timing: {option}",
    )
ax.axhline(
    1.0, color=COLORS["theory"], ls="--", label="free verification (the theory's assumption)"
)
ax.axhline(
    costs["c"], color=COLORS["draft"], ls=":", label=f"one draft proposal (c = {costs['c']:.2f})"
)
ax.axvline(n_best, color="grey", lw=0.8, ls=":")
ax.set(
    xlabel="tokens in one target pass",
    ylabel="cost relative to a 1-token pass",
    ylim=(0, None),
    xscale="log" if device_costs is not None else "linear",
    title=f"A pass over {n_best} tokens (the headline step, K = {K_BEST}) costs "
    f"{rel_best:.2f}× a 1-token pass\n({kind[0]}, {MACHINE_SHORT})",
)
if device_costs is not None:  # a log axis, ticked at powers of two
    ticks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128) if k <= ax.get_xlim()[1]]
    ax.set_xticks(ticks, [str(k) for k in ticks])
    ax.xaxis.set_minor_locator(plt.NullLocator())
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8.5)
savefig("03_pass_costs", fig)

# %% [markdown]
# ## 2. Throughput, latency, acceptance: the table
#
# One row per method and $K$. `speedup` is tokens/s over the autoregressive baseline's in the *same*
# run, with its 95 % bootstrap interval `speedup_low`–`speedup_high`; `alpha` = accepted / proposed
# draft tokens (corrected and bonus tokens never count, unlike the prototype's "acceptance rate",
# which could exceed 1); `alpha_judged` = accepted / judged draft positions (§1); `tau` = tokens
# per target pass; `latency_p50/p95_ms` are per-request percentiles over the prompts;
# `efficiency` = measured / predicted speedup. transformers' generation does not report
# acceptance, so its `alpha` is empty.


# %%
def alpha_judged(name):
    res = results[name]
    out = {}
    for K in spec_rows(name).index:
        reached, accepted, _ = depth_counts(cells_at(res, K), K, tree_at(res, K))
        out[K] = accepted.sum() / reached.sum()
    return pd.Series(out)


for name in (MAIN, GREEDY):
    df = tables[name].copy()
    spec = df.method == "speculative"
    df.loc[spec, "alpha_iid"] = df.loc[spec, "K"].map(alpha_judged(name)).values
    display(Markdown(f"**{name}** ({describe_run(results[name])})"))
    table = df.rename(columns={"alpha_iid": "alpha_judged"}).drop(columns=["n_cells"]).round(3)
    display(table.astype(object).where(table.notna(), "not measured"))

# %% [markdown]
# ## 3. Speedup vs $K$
#
# Measured speedup of our decoder (pooled tokens/s over the baseline's, error bars: 95 % paired
# bootstrap interval over the prompts), the prediction of the cost model, the same model with
# verification free (Leviathan et al.'s assumption, at the measured acceptance and draft cost), and
# — in grey, dashed — the curve **claimed by the prototype** (T4 GPU, gpt2 → gpt2-medium, never
# measured by its code).

# %%
PROTOTYPE_CLAIM = {
    "K": list(range(1, 9)),
    "speedup": [1.0, 1.28, 1.51, 1.67, 1.87, 1.91, 1.94, 1.89],
}


def model_tokens(res, K):
    # E[tokens per step] of the cost model at the run's measured rates: per depth for a tree, the
    # i.i.d. formula at accepted / judged for a chain
    rec = next(r for r in res["runs"] if r["method"] == "speculative" and r["K"] == K)
    if "stopped_rates" in rec:  # a draft stopped by confidence: its law over draft lengths
        return stopped_prediction(rec["stopped_rates"], K, tree_at(res, K), model_costs(res))[0]
    if "tree_rates" in rec:
        return tree_prediction(rec["tree_rates"], K, tree_at(res, K), model_costs(res))[0]
    return float(expected_tokens_per_step(rec["alpha_iid"], K))


def speedup_table(name):
    # Per K: the measured speedup with its interval, the cost model's prediction, the same model
    # with verification free, and transformers' assisted generation where the run measured it.
    res, spec = results[name], spec_rows(name)
    costs = model_costs(res)  # the pass costs the run's predictions read
    t1 = costs["t_target_s"][0]
    table = spec[["speedup", "speedup_low", "speedup_high", "predicted_speedup"]].assign(
        ideal=[model_tokens(res, K) / (1 + draft_cost(K, costs) / t1) for K in spec.index]
    )
    if has_method(name, "hf_assisted"):
        hf = tables[name].query("method == 'hf_assisted'").set_index("K")
        table["hf_speedup"] = hf.speedup
        table["hf_low"] = hf.speedup_low
        table["hf_high"] = hf.speedup_high
    return table


def pooled(res):
    s = res["settings"]
    repeats = f"{s['repeats']} repeat{'s' if s['repeats'] > 1 else ''} per cell"
    return f"{len(res['prompts'])} prompts × {s['max_new_tokens']} tokens, {repeats}"


def panel_title(name):
    res = results[name]
    return f"{name}\n" + textwrap.fill(describe_run(res, short=True), 60)


panels = {panel_title(name): speedup_table(name) for name in (MAIN, GREEDY)}
top = max(2.2, 1.1 * max(float(p[["speedup_high", "ideal"]].max().max()) for p in panels.values()))
fig = figs.speedup_vs_K(
    panels,
    claim=PROTOTYPE_CLAIM,
    hf_label="transformers' assisted generation (95% interval)",
    legend_loc="below",
    ylim=(0, top),
)
fig.suptitle(f"The recommended configuration on {MACHINE_SHORT} ({pooled(results[MAIN])})", y=1.1)
savefig("03_speedup_vs_K", fig)
# %% [markdown]
# ## 4. What the recommended configuration adds over the chain, and an untrained draft
#
# The same measurement for the chain (the same head, one candidate per position and $K$ drafts
# every step, in the dtype and weights its preset resolves to: printed in the panel's title) and for the
# untrained early exit, with transformers' assisted generation driving the same early exit in the
# same run, its cells interleaved with ours.

# %%
panels = {panel_title(name): speedup_table(name) for name in (CHAIN, EARLY)}
fig = figs.speedup_vs_K(
    panels,
    claim=PROTOTYPE_CLAIM,
    hf_label="transformers' assisted generation, same draft (95% interval)",
    legend_loc="below",
    ylim=(0, top),
)
fig.suptitle(
    f"The chain and the untrained early exit on {MACHINE_SHORT} ({pooled(results[CHAIN])})", y=1.12
)
savefig("03_speedup_vs_K_drafts", fig)

# %% [markdown]
# Side by side at each $K$: the recommended configuration against the chain (two runs of the campaign, each against its
# own interleaved baseline), and on the early exit our decoder against transformers' assisted
# generation (one run).


# %%
def ci_column(name, method="speculative"):
    df = tables[name].query("method == @method").set_index("K")
    return pd.Series(
        [fmt_ci(r.speedup, r.speedup_low, r.speedup_high) for r in df.itertuples()], index=df.index
    )


display(pd.DataFrame({MAIN: ci_column(MAIN), CHAIN: ci_column(CHAIN)}).T)
if has_method(EARLY, "hf_assisted"):
    ours = spec_rows(EARLY)
    hf = tables[EARLY].query("method == 'hf_assisted'").set_index("K")
    ratio = pd.DataFrame(
        {
            "specdec tokens/s": ours.tokens_per_s,
            "transformers assisted tokens/s": hf.tokens_per_s,
            "specdec / transformers": ours.tokens_per_s / hf.tokens_per_s,
            "specdec speedup [95%]": ci_column(EARLY),
            "transformers speedup [95%]": ci_column(EARLY, "hf_assisted"),
        }
    )
    display(ratio.T.round(3))

# %% [markdown]
# ## 5. Acceptance and tokens per step
#
# Left: accepted / judged draft positions at each $K$ (for a tree, a depth counts as accepted when
# any of its candidates is kept); right: the measured tokens per target pass $\tau$ against the
# cost model's $E[\text{tokens per step}]$ at the measured rates (§1).

# %%
ACC_RUNS = (MAIN, GREEDY, CHAIN, EARLY)
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 3.9))
for name, color, marker in zip(ACC_RUNS, CURVE_COLORS, "osD^", strict=False):
    spec = spec_rows(name)
    a = alpha_judged(name)
    ax0.plot(a.index, a.values, marker=marker, color=color, label=name)
    ax1.plot(spec.index, spec.tau, marker=marker, color=color, label=f"{name}, measured τ")
    model = [model_tokens(results[name], K) for K in spec.index]
    ax1.plot(spec.index, model, "x", color=color, ms=7, label=f"{name}, cost model")
ax0.set(xlabel="draft length K", ylabel="accepted / judged", ylim=(0, 1), title="Acceptance vs K")
ax1.set(
    xlabel="draft length K",
    ylabel="tokens per target pass",
    ylim=(0.9, None),
    title="Tokens per step vs K",
)
for ax in (ax0, ax1):
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8)
savefig("03_alpha_tau_vs_K", fig)
# %% [markdown]
# ## 6. Latency and throughput
#
# Throughput and per-request latency of our decoder against the autoregressive baseline interleaved
# with it (the recommended configuration at $T = 1$), with transformers' `generate` beside them.

# %%
fig = figs.latency_throughput(
    tables[MAIN],
    setting=MAIN,
    n_tokens=n_tokens,
    methods=["speculative", "hf_assisted"] if has_method(MAIN, "hf_assisted") else ["speculative"],
)
base = tables[MAIN].set_index("method").query("K == 0").tokens_per_s
if "hf_autoregressive" in base:
    ax = fig.axes[0]
    ax.axhline(
        base["hf_autoregressive"], color=COLORS["hf"], ls="-.", label="transformers' generate"
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=9)
fig.suptitle(MACHINE_SHORT, y=1.02)
savefig("03_latency_throughput", fig)
if "hf_autoregressive" in base:
    print(
        f"baselines in this run: ours {base['autoregressive']:.1f} tokens/s, transformers' "
        f"generate {base['hf_autoregressive']:.1f} tokens/s"
    )

# %% [markdown]
# ## 7. Where the time goes, and the best $K$
#
# Each speculative cell records where its steps' time went: the draft's proposals, the target's
# passes, and the host's work around them (the tree's masks, the warps, recursive rejection, the
# caches' bookkeeping). Per step, at each $K$:


# %%
def model_step(res, K):
    # the cost model's expected step at K, in one-token passes: a stopped draft's over its lengths
    rec = next(r for r in res["runs"] if r["method"] == "speculative" and r["K"] == K)
    if "stopped_rates" in rec:
        return stopped_prediction(rec["stopped_rates"], K, tree_at(res, K), model_costs(res))[1]
    return step_cost(K, model_costs(res), tree_at(res, K))


rows = []
for name in (MAIN, GREEDY):
    res = results[name]
    for rec in res["runs"]:
        if rec["method"] != "speculative" or "host_share" not in rec:
            continue
        ms_per_step = rec["seconds"] * 1e3 * rec["tau"] / rec["tokens"]
        rows.append(
            {
                "run": name,
                "K": rec["K"],
                "draft ms": rec["draft_share"] * ms_per_step,
                "target pass ms": rec["target_share"] * ms_per_step,
                "host ms": rec["host_share"] * ms_per_step,
            }
        )
breakdown = pd.DataFrame(rows)
if len(breakdown):
    display(breakdown.set_index(["run", "K"]).unstack("run").round(2))
    d = breakdown[breakdown.run == MAIN].set_index("K")
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    bottom = np.zeros(len(d))
    parts = {"draft ms": "draft", "target pass ms": "target", "host ms": "other"}
    for col, color in parts.items():
        ax.bar(d.index, d[col], bottom=bottom, color=COLORS[color], label=col.removesuffix(" ms"))
        bottom += d[col].values
    model_ms = [model_step(main, K) * base_cost(model_costs(main)) * 1e3 for K in d.index]
    below = 1 - np.array(model_ms) / bottom  # the model against the measured step
    gap = (
        f"{rng_(below, '.0%')} below the measured step"
        if below.min() >= 0
        else f"within {np.abs(below).max():.0%} of the measured step"
    )
    ax.plot(d.index, model_ms, "D", color="black", ms=5,
            label=f"the cost model's step (§1): passes timed apart from decoding, {gap}")  # fmt: skip
    ax.set(
        xlabel="draft length K",
        ylabel="ms per step",
        title=f"Where a step's time goes ({MAIN}; {MACHINE_SHORT})",
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, fontsize=8.5)
    savefig("03_time_per_step", fig)

# %% [markdown]
# *Implementation efficiency* = measured / predicted speedup: near 1, the decoder adds nothing the
# cost model does not count. The best $K$ is read from the measurement and from the model; the
# headline takes the measured best of the $T = 1$ run among the $K$ its replicate also ran, and reads
# the same $K$ on the replicate and in greedy decoding.

# %%
rows = []
for name in (MAIN, GREEDY, CHAIN, EARLY):
    spec, df = spec_rows(name), tables[name]
    best = int(spec["speedup"].idxmax())
    row = {
        "run": name,
        "best K (measured)": best,
        "speedup at best K [95%]": with_ci(name, best),
        "best K (cost model)": int(spec["predicted_speedup"].idxmax()),
        "min efficiency": spec["efficiency"].min(),
        "median efficiency": spec["efficiency"].median(),
    }
    if has_method(name, "hf_autoregressive"):
        tps = df.set_index("method").query("K == 0").tokens_per_s
        row["our AR / transformers generate"] = tps["autoregressive"] / tps["hf_autoregressive"]
    rows.append(row)
best_table = pd.DataFrame(rows).set_index("run").T.round(3)
display(best_table.astype(object).where(best_table.notna(), "not measured"))
print(
    f"headline: K = {H['K']} (chosen on {PLAN[MAIN]}); "
    + "; ".join(
        f"{run}: {fmt_ci(H[run]['speedup'], H[run]['low'], H[run]['high'])}"
        for run in ("T1", "replicate", "greedy")
    )
)

# %% [markdown]
# ## 8. What a GPU changes
#
# Would the same algorithm and the same draft be faster on a GPU? The cost model of §1 has two
# device-dependent inputs, and a GPU changes both:
#
# 1. **Verification is nearly free.** At batch size 1 a pass reads every weight once whatever the
#    number of tokens; a GPU has so much arithmetic per byte that a pass over $K + 1$ tokens costs
#    about what a pass over one does, until thousands of tokens — and for a 135M model in eager
#    PyTorch the time is mostly the fixed host cost of launching each op, which hardly depends on
#    $n$. On this CPU a pass over more tokens costs measurably more (§1).
# 2. **The draft's cost relative to the target's**, $c$: where both passes are bound by launching
#    their operations rather than by reading their weights, $c$ is set by how many operations each
#    launches, not by their sizes, and it can rise or fall against this CPU's (the run below
#    measures it).
#
# The acceptance rate does not depend on the device: it is a property of the two distributions.
# So a GPU's speedup-vs-$K$ curve follows from its pass costs and the acceptance measured here with
# the real weights: per position for the chain (`chain_T1`), and for the recommended configuration
# (`recommended_T1`) per depth with its stops and its alternatives' rates, each at the same $K$ and
# with its own tree. The GPU run (`make gpu-run`, the module
# `specdec_lib.research.gpu_run`) measures those costs on a GPU with the default target's
# architecture and random weights (the timing of a pass depends on the shapes, not the values) and
# writes `gpu_run_cuda.json`. Where that file is present in `data/results/`, the figure below plots
# its **measured** pass costs and the speedup they **predict** with this CPU's acceptance;
# otherwise it plots a **model** of three GPUs (roofline plus launch overhead), every assumption of
# which is printed below. Either way the GPU speedups are predictions.

# %%
CONFIGS = {"recommended": MAIN, "chain": CHAIN}
RATES = {}  # per configuration and K: the rates its CPU run shows (device-independent)
for config, name in CONFIGS.items():
    res = results[name]
    recs = {r["K"]: r for r in res["runs"] if r["method"] == "speculative"}
    RATES[config] = {  # a stopped draft's own rates (its stops too), else each depth's
        K: recs[K].get("stopped_rates")
        or tree_rates(cells_at(res, K), K, max(drafted_widths(K, tree_at(res, K))))
        for K in spec_rows(name).index
    }
    K_max = max(RATES[config])
    r = RATES[config][K_max]
    beta = ", ".join(f"{b:.2f}" for b in r.get("beta", r.get("go", {}).get("beta", [])))
    print(
        f"{config} ({name}), K = {K_max}: the chain token accepted once reached, by depth: {beta}"
    )


def predicted_rows(device, costs_by_config):
    rows = []
    for config, name in CONFIGS.items():
        for K, rates in RATES[config].items():
            tree, costs_ = tree_at(results[name], K), costs_by_config[config]
            predict = predicted_stopped_speedup if "stop" in rates else predicted_tree_speedup
            speedup = predict(rates, K, tree, costs_)
            rows.append({"device": device, "config": config, "K": K, "predicted_speedup": speedup})
    return rows


CPU_NAME = "this CPU, measured pass costs"
passes = {CPU_NAME: costs["t_target_s"]}
curves = predicted_rows(CPU_NAME, {c: results[n]["costs"] for c, n in CONFIGS.items()})
gpu_file = RESULTS_DIR / "gpu_run_cuda.json"
GPU_MEASURED = gpu_file.exists()
if GPU_MEASURED:
    gpu = read_json(gpu_file)
    gpu_name = f"{gpu['provenance'].get('gpu', 'GPU')}, measured pass costs"
    passes[gpu_name] = gpu["costs"]["t_target_s"]
    curves += predicted_rows(gpu_name, dict.fromkeys(CONFIGS, gpu["costs"]))
    title = (
        f"{gpu['provenance'].get('gpu')}: pass costs measured (eager, {gpu['pair']['dtype']}, "
        "random weights); speedups predicted with this CPU's acceptance"
    )
else:
    # The model: the target's weights read once per pass, the head's own weights and its
    # subset's output rows once per draft step (bfloat16), and a launch overhead per op.
    arch = read_json(DATA_DIR / "smollm2_135m_config.json")
    head = read_json(DATA_DIR / "drafter" / "feature_head.train.json")["settings"]
    target_params = results[CHAIN]["pair"]["target_params"]
    draft_params = (
        results[CHAIN]["pair"]["draft_params"] + head["subset_size"] * arch["hidden_size"]
    )
    n_max = 1 + max(
        drafted_tokens(max(RATES[c]), tree_at(results[n], max(RATES[c])))
        for c, n in CONFIGS.items()
    )
    for spec in GPUS.values():
        t = [
            gpu_pass_time(
                spec,
                weight_bytes=2 * target_params,
                n_tokens=n,
                flops_per_token=2 * target_params,
                n_layers=arch["num_hidden_layers"],
            )
            for n in range(1, n_max + 1)
        ]
        td = gpu_pass_time(
            spec,
            weight_bytes=2 * draft_params,
            n_tokens=1,
            flops_per_token=2 * draft_params,
            n_layers=head["n_layers"],
        )
        name = f"{spec.name} (predicted by the model)"
        passes[name] = t
        curves += predicted_rows(name, dict.fromkeys(CONFIGS, {"t_target_s": t, "t_draft_s": td}))
    title = (
        "GPUs predicted by a roofline-plus-launch model (not measured); "
        "acceptance from this CPU's runs"
    )
    print(
        "The GPU model's assumptions (specdec_lib.research.gpu_model): a pass costs "
        "max(weights / (bandwidth x efficiency), tokens x FLOPs / (peak x efficiency)) "
        "+ ops x launch overhead, with\n"
        f"  launch overhead per op: {gpu_model.LAUNCH_OVERHEAD_S * 1e6:.0f} us (eager PyTorch)\n"
        f"  ops per decoder layer: {gpu_model.OPS_PER_LAYER}, plus {gpu_model.OPS_FIXED} per pass\n"
        f"  bandwidth efficiency: {gpu_model.BANDWIDTH_EFFICIENCY:.0%}, "
        f"compute efficiency: {gpu_model.COMPUTE_EFFICIENCY:.0%}\n"
        f"  target: {target_params / 1e6:.1f}M parameters, {arch['num_hidden_layers']} layers; "
        f"draft step: {draft_params / 1e6:.1f}M parameters read (the head and its "
        f"{head['subset_size']}-token output rows), {head['n_layers']} layer; bfloat16, read once "
        "per pass\n"
        "  left out: KV-cache traffic, attention FLOPs, and the decoder's own host work per step\n"
        + "\n".join(f"  {s.name}: {s.source}" for s in GPUS.values())
    )
predicted = pd.DataFrame(curves)
# The decoders' own steps timed by the GPU runs (their speedups, implied with this CPU's tokens per
# step at the same K, are set out after the figure).
GPU_RUNS = {f.stem: read_json(f) for f in sorted(RESULTS_DIR.glob("gpu_run_cuda*.json"))}
CPU_RUN_OF = {  # (temperature, shape) -> this CPU's run of that shape, whose tokens per step
    (1.0, "chain"): CHAIN,  # the GPU's steps use (the recommended run tunes its tree and stops)
}
gpu_steps = []
for stem, g in GPU_RUNS.items():
    if "decoder" not in g:  # a run of other sections
        continue
    dec = pd.DataFrame(g["decoder"]["rows"])
    for T, sub in dec.groupby("temperature"):
        ar_ms = 1e3 * sub.query("method == 'autoregressive'").step_s.iloc[0]
        for row in sub.query("method == 'speculative'").itertuples():
            name = CPU_RUN_OF.get((T, row.shape))
            known = name is not None and row.K in spec_rows(name).index
            tau = spec_rows(name).tau[row.K] if known else np.nan
            gpu_steps.append(
                {
                    "GPU run": stem,
                    "T": T,
                    "shape": row.shape,
                    "K": int(row.K),
                    "AR token ms": ar_ms,
                    "step ms": 1e3 * row.step_s,
                    "tau (this CPU)": tau,
                    "implied speedup": tau * ar_ms / (1e3 * row.step_s),
                }
            )
gpu_steps = pd.DataFrame(gpu_steps)
display(
    predicted.pivot_table(index=["device", "config"], columns="K", values="predicted_speedup")
    .rename_axis(columns="K: predicted speedup")
    .round(2)
)

# %%
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11.5, 4.8 if len(gpu_steps) else 4.4))
palette = [COLORS["target"], COLORS["speculative"], COLORS["hf"], COLORS["draft"]]
device_colors = dict(zip(passes, palette, strict=False))
widths = {d: 3.4 - 0.8 * i for i, d in enumerate(passes)}  # later devices thinner, on top
for device, t in passes.items():
    t = np.asarray(t, dtype=float)
    ax0.plot(
        np.arange(1, len(t) + 1),
        t / t[0],
        "o-",
        ms=3,
        lw=widths[device],
        color=device_colors[device],
    )
ax0.axhline(1.0, color=COLORS["theory"], ls=":", lw=1)
ax0.set(
    xlabel="tokens in one target pass",
    ylabel="time relative to a 1-token pass",
    title="The cost of verification",
    ylim=(0, None),
)
styles = {"recommended": ("-", "o"), "chain": ("--", "s")}
for (device, config), sub in predicted.groupby(["device", "config"], sort=False):
    ax1.plot(
        sub.K,
        sub.predicted_speedup,
        styles[config][0],
        lw=widths[device],
        color=device_colors[device],
    )
for config, name in CONFIGS.items():
    spec = spec_rows(name)
    ax1.errorbar(
        spec.index + (0.08 if config == "chain" else 0.0),
        spec.speedup,
        yerr=np.vstack([spec.speedup - spec.speedup_low, spec.speedup_high - spec.speedup]),
        fmt=styles[config][1],
        mfc="white",
        capsize=2,
        color=COLORS["target"],
    )
GPU_STEP_MARKS = {"chain": "v"}
if len(gpu_steps):
    t1_steps = gpu_steps.query("`GPU run` == 'gpu_run_cuda' and T == 1.0 and shape == 'chain'")
    for config, sub in t1_steps.groupby("shape"):
        ax1.plot(
            sub.K + (0.08 if config == "chain" else 0.0),
            sub["implied speedup"],
            GPU_STEP_MARKS[config],
            ms=6,
            mfc="white",
            mew=1.5,
            color=device_colors[gpu_name],
        )
ax1.axhline(1.0, color="black", lw=0.8)
lowest = min(  # the panel's axis starts near its lowest point, so close curves stay apart
    [predicted.predicted_speedup.min()]
    + [spec_rows(name).speedup_low.min() for name in CONFIGS.values()]
    + ([t1_steps["implied speedup"].min()] if len(gpu_steps) else [])
)
ax1.set(
    xlabel="draft length K",
    ylabel="speedup over autoregressive",
    title="Speedup at T = 1, measured and predicted",
    ylim=(min(0.9, 0.95 * lowest), None),
)
for ax in (ax0, ax1):
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
handles = [plt.Line2D([], [], color=c, lw=widths[d], label=d) for d, c in device_colors.items()]
handles += [
    plt.Line2D([], [], color="black", ls=styles[c][0], label=f"{c}, predicted") for c in CONFIGS
]
handles += [
    plt.Line2D(
        [],
        [],
        color=COLORS["target"],
        marker=styles[c][1],
        mfc="white",
        ls="none",
        label=f"{c}, measured on this CPU (95% interval)",
    )
    for c in CONFIGS
]
if len(gpu_steps):
    handles += [
        plt.Line2D(
            [],
            [],
            color=device_colors[gpu_name],
            marker=GPU_STEP_MARKS[c],
            mfc="white",
            ls="none",
            label=f"{c}, the decoder's steps timed on the GPU, with this CPU's tokens per step",
        )
        for c in GPU_STEP_MARKS
    ]
fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=8, frameon=False)
fig.suptitle(f"{title}\nthis CPU: {MACHINE_SHORT}", fontsize=10.5)
fig.tight_layout(rect=(0, 0.19 if len(gpu_steps) else 0.15, 1, 1))
savefig("03_gpu", fig)
# %%
cpu_curve = predicted.query("device == @CPU_NAME").set_index(["config", "K"]).predicted_speedup
against_curve = {
    config: spec_rows(name).speedup / cpu_curve.loc[config] for config, name in CONFIGS.items()
}
display(
    Markdown(
        "On this CPU the pass costs alone, fed the same acceptance, put measured / predicted at "
        + " and ".join(f"{rng_(v)} for the {c}" for c, v in against_curve.items())
        + """ (§7's model, which also charges the host's work around each step, at
the efficiencies of its table). A GPU's curves inherit the pass costs' assumptions: the acceptance
measured here at each $K$, eager execution on both sides, and none of the decoder's own work per
step around its passes. The next cells measure that work on the GPU."""
    )
)

# %% [markdown]
# ### The decoders' own steps on a GPU
#
# The GPU run also times the library's decoders themselves, `SpeculativeDecoder` and
# `AutoregressiveDecoder`, on the same random-weight target: each cell is the median wall time of
# a step (after the first) over a few generations of 64 tokens from a 64-token prompt, with the
# Python work and the host synchronisations a step does around its passes. What random weights
# accept means nothing, so the speedup a step time implies takes the tokens per step $\tau(K)$ from
# this CPU's run with the real weights at the same $K$:
# $\hat S(K) = \tau_\text{CPU}(K)\, t_\text{AR token} / t_\text{step}(K)$, with both times from
# one GPU run. The same file times transformers' `generate` per token, eager and with a static cache
# compiled into CUDA graphs.

# %%
if len(gpu_steps):
    for values, label in (("step ms", "K: step ms"), ("implied speedup", "K: implied speedup")):
        steps_table = (
            gpu_steps.pivot_table(index=["GPU run", "T", "shape"], columns="K", values=values)
            .rename_axis(columns=label)
            .round(2)
        )
        display(steps_table.astype(object).where(steps_table.notna(), "not measured"))
else:
    print("no GPU run in data/results/: the decoders' steps on a GPU are not measured here")

# %%
if "gpu_run_cuda" in GPU_RUNS:
    first = GPU_RUNS["gpu_run_cuda"]  # the whole visit
    gp = first["provenance"]
    t_gpu = np.asarray(first["costs"]["t_target_s"]) * 1e3
    main_T1 = gpu_steps.query("`GPU run` == 'gpu_run_cuda' and T == 1.0")
    tree_T1 = main_T1.query("shape == 'tree (4, 3)'")
    chain_T1 = main_T1.query("shape == 'chain'")
    greedy = gpu_steps.query("T == 0.0")
    model_T1 = predicted.query("device == @gpu_name and config == 'chain' and K in @chain_T1.K")
    arch = read_json(DATA_DIR / "smollm2_135m_config.json")
    h200 = GPUS["H200"]
    weight_mb = 2 * first["pair"]["target_params"] / 1e6  # bfloat16
    n_ops = arch["num_hidden_layers"] * gpu_model.OPS_PER_LAYER + gpu_model.OPS_FIXED
    model_t1 = gpu_pass_time(
        h200,
        weight_bytes=2 * first["pair"]["target_params"],
        n_tokens=1,
        flops_per_token=2 * first["pair"]["target_params"],
        n_layers=arch["num_hidden_layers"],
    )
    dec = pd.DataFrame(first["decoder"]["rows"])
    tree_verify_ms = (
        1e3
        * dec.query("temperature == 1.0 and shape == 'tree (4, 3)' and K in @tree_T1.K").verify_s
    )
    spread = (
        100 * greedy.groupby(["shape", "K"])["step ms"].agg(lambda v: v.max() / v.min() - 1).max()
    )
    graphs = {
        stem: g["generate"]
        for stem, g in GPU_RUNS.items()
        if g.get("generate", {}).get("cuda_graphs", {}).get("status") == "measured"
    }
    implied_, predicted_ = (
        chain_T1.groupby("K")["implied speedup"].mean(),
        model_T1.groupby("K").predicted_speedup.mean(),
    )
    below = bool((implied_ <= predicted_.reindex(implied_.index)).all())
    gap_why = (
        "The gap is the decoder's own work around its passes, which the pass-cost model leaves out"
        if below
        else "The gap goes both ways, so noise is part of it (below); the decoder's own work around "
        "its passes, which the pass-cost model leaves out, can only slow a step"
    )
    gpu_lines = [
        f"""**On the {gp["gpu"]}** (CUDA {gp["cuda"]}, torch {gp["torch"]}, transformers
{gp["transformers"]}, eager {first["pair"]["dtype"]}, random weights), a one-token pass of the
target takes {t_gpu[0]:.1f} ms and a pass over 2–{len(t_gpu)} tokens {rng_(t_gpu[1:] / t_gpu[0])}×
that, with no trend in the number of tokens: past the second, a token verified costs nothing
more. The one-token pass is slow for its size: the datasheet's bandwidth
({h200.bandwidth_gb_s / 1e3:.1f} TB/s) reads the {weight_mb:.0f} MB of its weights in
{weight_mb / h200.bandwidth_gb_s:.2f} ms, and the roofline-plus-launch model
(`specdec_lib.research.gpu_model`), with
{1e6 * gpu_model.LAUNCH_OVERHEAD_S:.0f} µs per launched operation, predicts
{1e3 * model_t1:.1f} ms: the measured pass spends {1e3 * t_gpu[0] / n_ops:.0f} µs on each of the
{n_ops} operations the model counts. The head's draft step costs $c$ = {first["costs"]["c"]:.3f} of
a one-token pass.""",
        f"""**The decoders' steps.** The autoregressive decoder's token takes
{tree_T1["AR token ms"].iloc[0]:.1f} ms at $T = 1$; a speculative step takes
{rng_(tree_T1["step ms"], ".1f")} ms with the tree (4, 3) and {rng_(chain_T1["step ms"], ".1f")}
ms with the chain at $K$ = {rng_(tree_T1.K.astype(int), "d")}. With the tokens per step of this
CPU's chain run (`chain_T1`, the same shape at the same $K$; the recommended run tunes its tree and
stops its drafts, so no GPU step matches it) the chain's steps imply
{rng_(chain_T1["implied speedup"])}× at $T = 1$, where the pass costs alone predict
{rng_(model_T1.predicted_speedup)}×. {gap_why}: with the tree at $T = 1$ a step's
verification (its pass, the warps, the acceptance and the host's reads of the result) takes
{rng_(tree_verify_ms, ".1f")} ms, where a pass over 2–{len(t_gpu)} tokens alone takes
{rng_(t_gpu[1:], ".1f")} ms. The steps are noisy on this machine: the same greedy cells, repeated
minutes later from the same commit, differ by up to {spread:.0f}%, so these are ranges, not
intervals.""",
    ]
    for stem, gen in graphs.items():
        eager_ms, graphs_ms = (
            1e3 * gen["eager_s_per_token"],
            1e3 * gen["cuda_graphs"]["s_per_token"],
        )
        gpu_lines.append(
            f"""**CUDA graphs.** transformers' `generate` takes {eager_ms:.1f} ms per token eagerly and
{graphs_ms:.1f} ms with its static cache compiled into CUDA graphs (`{stem}.json`):
{eager_ms / graphs_ms:.1f}× faster, where the eager speculative decoder's chain steps imply at
most {gpu_steps["implied speedup"].max():.2f}×. For a 135M target on this GPU the launch of each operation, not the traffic of the
weights, sets the time, and capturing the whole step removes it. A fair comparison on a GPU
therefore captures both sides; this library's decoders run eagerly, so the speedups above are
against an eager baseline and do not carry over to a graph-captured one."""
        )
    display(Markdown("\n\n".join(gpu_lines)))

# %% [markdown]
# ## 9. Against what a user would run: llama.cpp, and the machine's limit
#
# Every speedup above is a ratio over this library's own autoregressive baseline, in eager
# PyTorch. A reader who has the embedded model has it as a GGUF file (4-bit weights, `Q4_1`), and
# runs that file with **llama.cpp**. The campaign's `peers` runs (`python -m specdec_lib peers`;
# `make peers` builds llama.cpp once from the copy pinned in the `llama-cpp-python` source) decode
# the same prompts, with the same seeds, token counts and threads, cell by cell and in rotated
# order, with:
#
# * **llama.cpp, one token a pass**: llama.cpp's kernels run the GGUF file as the target of this
#   library's own `AutoregressiveDecoder` (`research.peer.LlamaCppLM` puts the file behind the
#   interface of a transformers causal LM), so the warps and the sampler are the library's;
# * **llama.cpp + prompt lookup**: the same, with `SpeculativeDecoder` and prompt lookup drafting a
#   chain, verified by this library's rule on llama.cpp's passes (exact: `tests/test_peer.py`
#   checks greedy decoding token for token and the law of two tokens on the engine);
# * **this library**: its autoregressive baseline and its recommended speculative configuration,
#   as `bench` resolves them on this machine;
# * **transformers' `generate`**, one token a pass.
#
# Beside them, **llama-bench**, llama.cpp's own benchmark of decoding (its C++ loop, no Python),
# and each engine's **roofline**: a one-token pass must read every weight once, so the machine's
# measured memory bandwidth over the bytes of the weights bounds the tokens per second of one
# token a pass (speculative decoding can pass it: it emits several tokens a pass).


# %%
def peer_frame(res):
    # one row per method: tokens/s of whole requests with its interval, and after the prompt
    names = {
        "llamacpp_autoregressive": ("llama.cpp, one token a pass", "llama.cpp"),
        "llamacpp_lookup": (f"llama.cpp + prompt lookup, K = {res['settings']['K_lookup']}",
                            "llama.cpp"),
        "autoregressive": ("this library, autoregressive", "this library"),
        "speculative": (f"this library, recommended, K = {res['settings']['K'][0]}", "this library"),
        "hf_autoregressive": ("transformers generate", "transformers"),
    }  # fmt: skip
    rows = []
    for r in res["summary"]:
        label, engine = names[r["method"]]
        low, high = r["tokens_per_s_ci"]
        rows.append({"label": label, "engine": engine, "tokens_per_s": r["tokens_per_s"],
                     "low": low, "high": high,
                     "decode_tokens_per_s": r.get("decode_tokens_per_s", np.nan)})  # fmt: skip
    order = [v[0] for v in names.values()]
    return pd.DataFrame(rows).set_index("label").loc[order].reset_index()


# The roofline of each engine: the campaign's bandwidth, measured once, over its bytes per token
BW = CAMPAIGN.manifest["bandwidth_gb_s"]
roof = {
    engine: {
        "bytes_per_token": r["bytes_per_token"],
        "tokens_per_s": BW * 1e9 / r["bytes_per_token"],
    }
    for engine, r in PEERS["T = 1"]["roofline"].items()
}
lines_ = {
    "llama-bench (llama.cpp's own loop)": PEERS["T = 1"]["llama_bench"]["tokens_per_s"],
    "llama.cpp's roofline": roof["llamacpp"]["tokens_per_s"],
    "this library's roofline": roof["library"]["tokens_per_s"],
}
fig = figs.absolute_speed(
    {mode: peer_frame(res) for mode, res in PEERS.items()},
    lines=lines_,
    machine=MACHINE_SHORT,
)
savefig("03_absolute_speed", fig)


# %%
def tps(mode, method):
    return next(r for r in PEERS[mode]["summary"] if r["method"] == method)


def _ratio(mode, method):
    # method's tokens/s over llama.cpp's one token a pass, with its paired interval
    r = tps(mode, method)
    low, high = r["vs_llamacpp_ci"]
    return f"{r['tokens_per_s'] / tps(mode, 'llamacpp_autoregressive')['tokens_per_s']:.2f}× [{low:.2f}, {high:.2f}]"


def _describe_best(mode):
    r = best[mode]
    name = (
        "the library's recommended configuration"
        if r["method"] == "speculative"
        else "prompt lookup on llama.cpp"
    )
    return f"{name}, {r['tokens_per_s']:.0f} tokens/s ({_ratio(mode, r['method'])} llama.cpp's one token a pass)"


bw = BW
lib_ar, lcp_ar = tps("T = 1", "autoregressive"), tps("T = 1", "llamacpp_autoregressive")
best = {mode: max((tps(mode, m) for m in ("speculative", "llamacpp_lookup")),
                  key=lambda r: r["tokens_per_s"]) for mode in PEERS}  # fmt: skip
display(
    Markdown(
        f"""**Where the library stands.** On {MACHINE}, llama.cpp
decodes the GGUF file one token a pass at {lcp_ar["tokens_per_s"]:.0f} tokens/s
[{lcp_ar["tokens_per_s_ci"][0]:.0f}, {lcp_ar["tokens_per_s_ci"][1]:.0f}] at $T = 1$ through this
library's decoder ({lcp_ar["decode_tokens_per_s"]:.0f} after the prompt; llama-bench, its own loop:
{lines_["llama-bench (llama.cpp's own loop)"]:.0f}). This library's autoregressive baseline decodes
{lib_ar["tokens_per_s"]:.0f} ({lib_ar["tokens_per_s"] / lcp_ar["tokens_per_s"]:.2f}× llama.cpp), and
its recommended speculative configuration {tps("T = 1", "speculative")["tokens_per_s"]:.0f}
({_ratio("T = 1", "speculative")} llama.cpp's one token a pass; greedy:
{_ratio("greedy", "speculative")}). The fastest exact configuration measured is
{_describe_best("T = 1")} at $T = 1$ and {_describe_best("greedy")} greedy.

**The limit.** A one-token pass reads {roof["library"]["bytes_per_token"] / 1e6:.0f} MB of
bfloat16 weights in this library and {roof["llamacpp"]["bytes_per_token"] / 1e6:.0f} MB of 4-bit
weights in llama.cpp: at the measured bandwidth, at most {roof["library"]["tokens_per_s"]:.0f} and
{roof["llamacpp"]["tokens_per_s"]:.0f} tokens/s one token a pass. The library's baseline reaches
{lib_ar["decode_tokens_per_s"] / roof["library"]["tokens_per_s"]:.0%} of its roofline after the
prompt, llama.cpp {lcp_ar["decode_tokens_per_s"] / roof["llamacpp"]["tokens_per_s"]:.0%} of its
own. The library reads {roof["library"]["bytes_per_token"] / roof["llamacpp"]["bytes_per_token"]:.1f}
times the bytes per token, and its pass also spends time on work other than reading weights,
which this run does not break down."""
    )
)

# %%
# NBVAL_CHECK_OUTPUT
for mode, res in PEERS.items():
    print(mode, "| complete:", res["status"] == "complete", "| methods:",
          sorted({r["method"] for r in res["summary"]}), "| prompts:", len(res["prompts"]))  # fmt: skip

# %% [markdown]
# ## 10. Discussion
#
# Every figure quoted below is computed from the result files read above.

# %%
t1, gr, ch = spec_rows(MAIN), spec_rows(GREEDY), spec_rows(CHAIN)
K_chain = int(ch.speedup.idxmax())
rel = t_target / t_target[0]
host_ms = [r["host_ms_per_step"] for r in main["runs"] if "host_ms_per_step" in r]
gap = ""
if len(breakdown):
    step_target_ms = breakdown.set_index(["run", "K"]).loc[(MAIN, H["K"]), "target pass ms"]
    gap = f""" The gap is measured too (§7): at $K = {H["K"]}$ the target's pass inside a step takes
{step_target_ms:.1f} ms against the {t_target[drafted_tokens(H["K"], TREE)]:.1f} ms timed before
the run at a {costs["context"]}-token context, and the host's work around a step (the tree, the
warps, recursive rejection) takes {rng_(host_ms, ".1f")} ms per step, which the model charges as
timed between the cells."""
best_t1 = int(t1.speedup.idxmax())
grows = (
    f"It does not grow past $K = {best_t1}$"
    if best_t1 < t1.index.max()
    else "It is highest at the largest $K$ measured"
)
lines = [
    f"""**What we measured.** On {MACHINE}, with the embedded SmolLM2-135M target in
{kind[0]}, the recommended configuration ({describe_run(main)}) is faster than autoregressive
decoding, with the whole 95 % interval above 1, at {int((t1.speedup_low > 1).sum())} of the
{len(t1)} draft lengths measured at $T = 1$. At $K = {H["K"]}$, chosen on that run{figs.k_choice(H, spec_rows(MAIN))}, the
speedup is {fmt_ci(H["T1"]["speedup"], H["T1"]["low"], H["T1"]["high"])}; a replicate with
other sampling seeds gives {fmt_ci(H["replicate"]["speedup"], H["replicate"]["low"], H["replicate"]["high"])}
and greedy decoding {fmt_ci(H["greedy"]["speedup"], H["greedy"]["low"], H["greedy"]["high"])}
(95 % bootstrap intervals over {n_prompts} prompts). {grows}, for measured reasons: the
tokens per step saturate ({rng_(t1.tau)} at $T = 1$ over every $K$) while each extra draft position
costs {costs.get("t_draft_next_s", costs["t_draft_s"]) / costs["t_target_s"][0]:.3f} of a target pass and the
verification pass grows ({rng_(rel[1:], ".2f")}× a one-token pass for 2–{len(rel)} tokens).""",
    f"""**Theory vs measurement.** With the measured pass costs in the cost model, measured /
predicted speedup is {rng_(t1.efficiency)} at $T = 1$ and {rng_(gr.efficiency)} greedy over every
$K$.{gap} Leviathan et al.'s formula with free verification is more optimistic still, by the
pass's growth with its tokens (§1).""",
    f"""**What the recommended configuration adds over the chain.** The chain ({describe_run(results[CHAIN])}) reaches its best at
$K = {K_chain}$, {with_ci(CHAIN, K_chain)}, against the recommended configuration's {with_ci(MAIN, K_chain)} at that $K$
(two runs of the campaign, each against its own baseline).""",
]
ee = spec_rows(EARLY)
early_slower = bool((ee.speedup_high < 1).all())
ee_text = f"""**The untrained early exit** accepts {rng_(alpha_judged(EARLY))} of its judged drafts, so
a step yields {rng_(ee.tau)} tokens, and it is {"slower than autoregressive decoding at every $K$" if early_slower else "not faster"}
({with_ci(EARLY, 1)} at $K = 1$)."""
if has_method(EARLY, "hf_assisted"):
    hf = tables[EARLY].query("method == 'hf_assisted'").set_index("K")
    ee_text += f""" Transformers' assisted generation with the same draft, in the same run,
gives {rng_(hf.speedup)}×; our decoder runs at {rng_(ee.tokens_per_s / hf.tokens_per_s)}× its
tokens/s."""
if has_method(MAIN, "hf_autoregressive"):
    tps = tables[MAIN].set_index("method").query("K == 0").tokens_per_s
    ee_text += f""" Our autoregressive baseline runs at
{tps["autoregressive"] / tps["hf_autoregressive"]:.2f}× the tokens/s of transformers' `generate`
without an assistant, so the baseline is not slow."""
lines.append(ee_text)
display(Markdown("\n\n".join(lines)))

# %%
gpu_pred = predicted[predicted.device != CPU_NAME]
best_gpu = gpu_pred.loc[gpu_pred.predicted_speedup.idxmax()]
display(
    Markdown(
        f"""**What a GPU changes (§8)** is predicted, not measured: with this CPU's acceptance and
{"the GPU's measured pass costs" if GPU_MEASURED else "the roofline-plus-launch model's pass costs"},
the highest predicted speedup is {best_gpu.predicted_speedup:.2f}× ({best_gpu.device.removesuffix(" (predicted by the model)")},
{best_gpu.config}, $K = {best_gpu.K}$), against {H["T1"]["speedup"]:.2f}× measured here at
$K = {H["K"]}$.

**The prototype's claims** (1.87× at $K = 5$ with acceptance 0.71 on a T4) were never measured.
On this CPU the measured speedup rests on two measured facts: a draft trained to agree with the
target (notebook 05), and a verification pass over {n_best} tokens that costs {rel_best:.2f}× a
one-token pass in {kind[0]} (§1).

**What's next.** Notebook 04 breaks the acceptance down by prompt category and by position
within the draft, token by token."""
    )
)

# %% [markdown]
# ## The data this page read
#
# Where every number on this page was measured: one line per machine, commit and date. The files
# behind them are folded below it, each with the first 16 digits of its SHA-256; the repository's
# tests recompute those from the committed files, and refuse a page whose outputs came from other
# results.

# %%
data_read()
