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
# # 06 · Appendix: the drafting experiments behind notebook 05
#
# The experiments behind notebook 05's choices: the draft's architecture, its training, the cost of a
# target pass by dtype and weight layout, several candidates per position, and draft trees. What
# this page finds, computed from the measurements it reads (the code is folded below):

# %% tags=["hide-input"] jupyter={"source_hidden": true}
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display
from scipy import stats as sps

from specdec_lib import bench
from specdec_lib.bench.analysis import run_tree
from specdec_lib.config import DATA_DIR, RESULTS_DIR, quick
from specdec_lib.costs import (
    draft_cost,
    drafted_tokens,
    expected_tokens_per_step,
    predicted_speedup,
)
from specdec_lib.figures import drafting_appendix as figs
from specdec_lib.figures.drafting_strategies import speedup_intervals
from specdec_lib.figures.provenance import data_read
from specdec_lib.figures.style import COLORS, savefig
from specdec_lib.research import trees
from specdec_lib.research.campaign import Campaign
from specdec_lib.results import check_same_machine, read_json

pd.set_option("display.precision", 3)
QUICK = quick()
DRAFTER = DATA_DIR / "drafter"
EXPERIMENTS = DRAFTER / "experiments"
CAMPAIGN = Campaign.read(RESULTS_DIR / "campaign")
MACHINE, MACHINE_SHORT = CAMPAIGN.machine, CAMPAIGN.machine_short
TEMPS = {"T = 1": "T1"}  # the wide tree's runs (one temperature)
CHOSEN = tuple(bench.DEFAULT_TREE)  # the preset's fixed tree, where a head has no tree rates


def tree_at(res: dict, K: int) -> tuple:
    """A stored run's step shape at K: its tree, or the tree it tuned for K at start-up."""
    return tuple(run_tree(res["settings"], res.get("tuned_trees"), K))


def shape_of(res: dict) -> str:
    """A run's step shape in words."""
    trees = {tree_at(res, K) for K in res["settings"]["K"]}
    return f"tree {trees.pop()}" if len(trees) == 1 else "a tree tuned per K"


BUDGET = 8  # drafted tokens per target pass in the ranking of trees (§5)


def wilson(k: int, n: int) -> tuple[float, float]:
    """The 95% Wilson interval of k successes in n trials."""
    ci = sps.binomtest(int(k), int(n)).proportion_ci(confidence_level=0.95, method="wilson")
    return ci.low, ci.high


def with_interval(b: pd.Series) -> str:
    """A speedup and its 95% interval over prompts."""
    return f"{b.speedup:.2f}× [{b.speedup_low:.2f}, {b.speedup_high:.2f}]"


def speculative_at(result: dict, K: int) -> pd.Series:
    """One (speculative, K) row of a stored run, with its 95% interval over prompts."""
    run = next(r for r in result["runs"] if r["method"] == "speculative" and r["K"] == K)
    low, high = bench.speedup_interval(result, "speculative", K)
    return pd.Series({"K": K, "speedup": run["speedup"], "speedup_low": low, "speedup_high": high})


def best_speculative(result: dict) -> pd.Series:
    """A stored run's speculative row at its best speedup over K, with its interval."""
    return speculative_at(result, bench.best_K(result))


def probe(tag: str) -> tuple[dict, dict]:
    """The wide tree's run at one temperature, and what its steps say about every narrower chain
    tree of its depth (`bench.tree_rates`)."""
    res = read_json(CAMPAIGN.folder / f"bench_tree8-8_{tag}.json")
    (K,) = res["settings"]["K"]
    cells = [c for key, c in res["cells"].items() if key.startswith(f"speculative|{K}|")]
    return res, bench.tree_rates(cells, K, max(res["settings"]["tree"]))


def tree_ranking(probes: dict) -> pd.DataFrame:
    """Every chain tree the probes' rates cover, with at most BUDGET drafted tokens, ranked by the
    cost model's predicted speedup (`trees.best_trees`, each probe with its own pass costs),
    averaged over the probes."""
    rows = [
        t | {"panel": panel}
        for panel, (res, r) in probes.items()
        for t in trees.best_trees(r, res["costs"], max_tokens=BUDGET)
    ]
    ranked = pd.DataFrame(rows)
    ranked["tree"] = ranked["tree"].map(tuple)
    pooled = ranked.pivot_table(index="tree", columns="panel", values="predicted_speedup")
    pooled["mean"] = pooled.mean(axis=1)
    pooled = pooled.sort_values("mean", ascending=False, kind="stable")
    pooled["rank"] = np.arange(1, len(pooled) + 1)
    return pooled


def depth_ceiling(rates: dict, costs: dict, max_depth: int) -> list[dict]:
    """The best tree of n nodes no deeper than max_depth, for every n the costs cover: the
    best-first tree of `trees.best_tree` at the rank rates of `trees.rank_rates`, over one target
    pass on n + 1 tokens and one draft step per depth (`trees.tree_ceiling`, with the depth
    capped), at the depth limit that gives the best ratio."""
    m, t = trees.rank_rates(rates), costs["t_target_s"]
    out = []
    for n in range(1, len(t)):
        options = []
        for limit in range(1, max_depth + 1):
            tree = trees.best_tree(m, n, max_depth=limit)
            if len(tree["values"]) < n:  # n nodes do not fit within this depth
                continue
            depth = max(tree["depths"])
            cost = (draft_cost(depth, costs) + t[n]) / t[0]
            options.append(
                {"nodes": n, "depth": depth, "tokens_per_step": tree["tokens_per_step"]}
                | {"step_cost": cost, "predicted_speedup": tree["tokens_per_step"] / cost}
            )
        if options:
            out.append(max(options, key=lambda o: o["predicted_speedup"]))
    return out


# %% tags=["hide-input"] jupyter={"source_hidden": true}
PILOT_LABELS = {
    "feat_last": "feature head, last layer, raw inputs",
    "featn_last": "feature head, last layer",
    "featn_fused": "feature head, layers 2 + 14 + 29",
    "layers_0_29": "target layers 0 + 29",
    "layers_0_1_29": "target layers 0 + 1 + 29",
}
pilot_alpha = {
    p.name.removesuffix(".eval.json").removeprefix("pilot_"): read_json(p)["by_temperature"]["1"][
        "alpha"
    ]
    for p in sorted(EXPERIMENTS.glob("pilot_*.eval.json"))
}
best_pilot = max(pilot_alpha, key=pilot_alpha.get)
PACKING = CAMPAIGN.run("packing")
packed_ratio = {r["dtype"]: r["packed_over_plain"] for r in PACKING["runs"]}
REC = CAMPAIGN.run("recommended_T1")
CHAIN = CAMPAIGN.run("chain_T1")
PROBES = {panel: probe(tag) for panel, tag in TEMPS.items()}
check_same_machine(
    [PACKING, REC, CHAIN, *(res for res, _ in PROBES.values())], "the runs of this page"
)
choice = REC["dtype_choice"]
PACKED_AS = {  # how a run's weights were laid out, in words
    "on": " with prepacked weights",
    True: " with prepacked weights",
    "library": " packed for the library's own bfloat16 product",
}
ranking = tree_ranking(PROBES)
rec_best, chain_best = best_speculative(REC), best_speculative(CHAIN)
DEVICE_COSTS = CAMPAIGN.run("pass_costs")
CEILING_COSTS = trees.monotone_costs(
    {
        "t_target_s": DEVICE_COSTS["costs"]["t_target_s"],
        "t_draft_s": DEVICE_COSTS["draft_costs"]["int8"]["t_draft_s"],
    }
)
top_ceiling = {
    panel: max(depth_ceiling(r, CEILING_COSTS, 2), key=lambda c: c["predicted_speedup"])
    for panel, (_, r) in PROBES.items()
}
bf16 = packed_ratio.get("bfloat16", [np.nan])
display(
    Markdown(
        f"**Findings.**\n\n- At equal data, the pilot's draft that accepts most is the "
        f"*{PILOT_LABELS.get(best_pilot, best_pilot)}* ($\\alpha$ = {pilot_alpha[best_pilot]:.3f} "
        f"at $T = 1$, §1).\n- On "
        f"{MACHINE}, prepacking the weights makes a bfloat16 target pass take "
        f"{min(bf16):.2f}-{max(bf16):.2f} of its time as loaded, over 1-{len(bf16)} tokens, and "
        f"the recommended run's start-up timing chose {choice['dtype']}"
        f"{PACKED_AS.get(choice['pack'], '')} (§3).\n- Among the chain trees of "
        f"depth 1-2 with up to {BUDGET} drafted tokens, the cost model at one wide tree's rates "
        f"ranks the preset's fixed tree {CHOSEN} number {ranking.loc[[CHOSEN], 'rank'].iloc[0]} of "
        f"{len(ranking)} at $T = 1$ (§5).\n- Measured at $T = 1$, the "
        f"recommended configuration ({REC['settings']['draft']} head, {shape_of(REC)}, "
        f"{REC['settings']['dtype']}) "
        f"reaches {with_interval(rec_best)} at its best $K$ = {rec_best.K:.0f}, the chain (the "
        f"{CHAIN['settings']['draft']} head, {CHAIN['settings']['dtype']}, the dtype its own "
        "start-up timing chose) "
        f"{with_interval(chain_best)} at $K$ = {chain_best.K:.0f} (§5).\n- The cost model's ceiling "
        "for any tree of depth 2 or less with this head is "
        + " and ".join(
            f"{c['predicted_speedup']:.2f}× ({panel})" for panel, c in top_ceiling.items()
        )
        + " (§6)."
    )
)

# %% [markdown]
# **Aim.** Notebook 05 follows one draft from its data to its speedup. This appendix holds the
# experiments behind its choices, each read from the committed measurements:
#
# 1. which architecture, compared at equal data;
# 2. how the head trains, and whether a bigger head pays;
# 3. what a target pass over several tokens costs in float32 and in bfloat16, with the weights as
#    loaded and prepacked, and what int8 weights do to the draft;
# 4. several candidates for the first draft position: why the output law stays exactly $p$;
# 5. draft trees: candidates at every depth, the shape chosen by the cost model, measured against
#    the chain, and the host's work per step;
# 6. how far a tree of depth 2 could go with this draft, and the acceptance a faster speedup needs.
#
# The names are those of notebook 05: $p$ the target's law, $q$ the draft's, $K$ the draft length,
# $\alpha$ the acceptance rate, $c = t_\text{draft} / t_\text{target}(1)$ the draft's cost. Every
# benchmark number comes from one campaign (`data/results/campaign/`: one machine, one commit, each
# run's command in its manifest); the training records of §1-2 (`data/drafter/`) are those of the
# training runs themselves.
#
# This page uses notebook 05's draft, its $\alpha$, $c$ and $S(K)$, and notebook 01's acceptance
# rule. The two cells above, folded, read the campaign and compute the findings; the sections below
# show each step.

# %%
print("quick mode:", QUICK)
print(f"measured on: {MACHINE}")
print(f"campaign commit: {CAMPAIGN.commit}")

# %% [markdown]
# ## 1. Which architecture? A pilot at equal data
#
# Four kinds of draft trained on the same first 11 shards of on-policy data (the 12th shard held
# out) and measured by decoding on the held-out prompts ($K = 1$, $T = 1$, 48 new tokens each;
# every proposal is judged, so $\alpha$ is the per-token acceptance rate), with their cost $c$
# measured in bfloat16 through the `Drafter` interface the decoder uses:
#
# * **feature head, last layer**: one Llama layer (initialised from the target's last layer)
#   reading the target's last hidden state and the next token (EAGLE), with its inputs
#   RMS-normalised (`featn_last`) or fed raw (`feat_last`, which also had fewer epochs and a lower
#   learning rate);
# * **feature head, fused**: the same, reading target layers 2, 14 and 29, fused by one linear map
#   (EAGLE-3's idea; `featn_fused`);
# * **layers 0 + 29** and **layers 0 + 1 + 29**: a small LM on tokens made of copies of those
#   target layers between the target's frozen embedding and output rows, distilled.
#
# The table's `S(K=1) predicted` is $(1 + \alpha) / (c + t_\text{target}(2) / t_\text{target}(1))$.

# %%
rows, pilot_curves = [], {}
for path in sorted(EXPERIMENTS.glob("pilot_*.eval.json")):
    name = path.name.removesuffix(".eval.json").removeprefix("pilot_")
    ev, tr = read_json(path), read_json(EXPERIMENTS / f"pilot_{name}.train.json")
    st, costs = tr["settings"], ev["costs"]
    r1 = ev["by_temperature"]["1"]
    rows.append(
        {
            "draft": name,
            "arch": st["arch"] if st["arch"] == "layers" else f"feature {st['feature_layers']}",
            "train tokens": tr["train_tokens"],
            "epochs": int(st["epochs"]),
            "peak lr": f"{st['lr']:g}",
            "alpha (T=1)": r1["alpha"],
            "proposals": r1["proposed"],
            "held-out bound": tr["history"][-1]["eval_alpha"],
            "c (bf16)": costs["c"],
            "t(2)/t(1)": costs["t_target_s"][1] / costs["t_target_s"][0],
        }
    )
    pilot_curves[name] = pd.DataFrame(tr["history"])
pilot = pd.DataFrame(rows).set_index("draft")
pilot["S(K=1) predicted"] = expected_tokens_per_step(pilot["alpha (T=1)"], 1) / (
    pilot["c (bf16)"] + pilot["t(2)/t(1)"]
)
pilot

# %%
# NBVAL_CHECK_OUTPUT
print("architectures compared at equal data:", sorted(set(pilot.arch)))
print("equal data:", pilot["train tokens"].nunique() == 1)
print("highest acceptance in the pilot:", pilot["alpha (T=1)"].idxmax())

# %%
fig = figs.pilot_curves(
    {PILOT_LABELS.get(name, name): h for name, h in pilot_curves.items()},
    title=f"Pilot drafts during training ({pilot['train tokens'].iloc[0] / 1e3:.0f}k positions each)",
)
savefig("06_pilot_curves", fig)
# %%
P = pilot["alpha (T=1)"]
C = pilot["c (bf16)"]
display(
    Markdown(
        f"**Reading the pilot.** Normalising the head's inputs is what makes the feature head work "
        f"at all: {P['featn_last']:.3f} against {P['feat_last']:.3f} with raw inputs (which also "
        f"had fewer epochs and a lower learning rate). Reading three target layers beats reading "
        f"the last one ({P['featn_fused']:.3f} against {P['featn_last']:.3f}) at a similar cost "
        f"($c$ = {C['featn_fused']:.3f} against {C['featn_last']:.3f}): the fusion is one extra "
        f"matrix product per drafted token. The drafts built from target layers accept less "
        f"({P['layers_0_29']:.3f} and {P['layers_0_1_29']:.3f}) *and* cost more "
        f"($c$ = {C['layers_0_29']:.3f} and {C['layers_0_1_29']:.3f}): they must rebuild the "
        f"context from token embeddings with two or three layers, where the feature head starts "
        f"from the target's own summary of it. Notebook 05's draft is therefore the fused, "
        f"normalised feature head."
    )
)

# %% [markdown]
# ## 2. Training, and a bigger head
#
# The held-out curve is $\sum_x \min(p, q)$ over the target's top 64 tokens on the held-out shards
# during training: a **lower bound** on the acceptance rate, computed from the cached teacher, not a
# decoding measurement. The same quantity on the training batches shows how far the head fits its
# data better than new data; the dashed line is the rate measured by decoding on the held-out
# prompts.

# %%
full_train = read_json(DRAFTER / "feature_head.train.json")
full_eval = CAMPAIGN.run("eval_trained")
hist = pd.DataFrame(full_train["history"])
steps_per_epoch = hist.step.max() / full_train["settings"]["epochs"]
hist["tokens seen"] = hist.step / steps_per_epoch * full_train["train_tokens"]
fig = figs.full_training(hist, alpha_decoding=full_eval["by_temperature"]["1"]["alpha"])
savefig("06_full_training", fig)
# %% [markdown]
# **Capacity against data.** The same recipe with two head layers instead of one, on the same
# positions as the 92-shard run of notebook 05's learning curve
# (`train-drafter --n-layers 2 --max-shards 92`; `data/drafter/experiments/two_layers.*`): does a
# bigger head buy more acceptance than it costs?

# %%
cap_rows = {}
for name, stem in (("1 layer", "lc_92shards"), ("2 layers", "two_layers")):
    ev, tr = (read_json(EXPERIMENTS / f"{stem}.{kind}.json") for kind in ("eval", "train"))
    t = np.array(ev["costs"]["t_target_s"])
    alpha, c = ev["by_temperature"]["1"]["alpha"], ev["costs"]["c"]
    cap_rows[name] = {
        "train tokens": tr["train_tokens"],
        "alpha (T=1)": alpha,
        "held-out bound": tr["history"][-1]["eval_alpha"],
        "c (bf16)": c,
        "training min": tr["history"][-1]["seconds"] / 60,
        "S(K=1) predicted": (1 + alpha) / (c + t[1] / t[0]),
    }
cap = pd.DataFrame(cap_rows).T.astype({"train tokens": int}).round({"training min": 1})
assert cap["train tokens"].nunique() == 1  # equal data
cap

# %%
one, two = cap.loc["1 layer"], cap.loc["2 layers"]
display(
    Markdown(
        f"A second layer raises the acceptance from {one['alpha (T=1)']:.3f} to "
        f"{two['alpha (T=1)']:.3f} and the cost from {one['c (bf16)']:.3f} to "
        f"{two['c (bf16)']:.3f}: the predicted speedup at $K = 1$ "
        f"{'falls' if two['S(K=1) predicted'] < one['S(K=1) predicted'] else 'rises'} "
        f"({two['S(K=1) predicted']:.3f} against {one['S(K=1) predicted']:.3f}). At this scale "
        f"data is worth more than capacity (notebook 05 §2)."
    )
)

# %% [markdown]
# ## 3. The cost of a pass: float32 and bfloat16, weights as loaded and prepacked
#
# A speculative step is paid in draft steps and in one target pass over several tokens (notebook
# 05's $S(K)$), and what those cost depends on the dtype and on how the matrix library holds the
# weights: read as loaded at every product, or **prepacked** once into the library's own blocked
# layout (`lm.pack_linears`; the table below names the library each dtype was packed for). The
# campaign's packing run (`python -m specdec_lib.research.levers --dtype bfloat16 float32`)
# times, in one process, a cached target pass over $n$ new tokens and a draft step, with both
# layouts, in alternating blocks (as loaded, prepacked, prepacked, as loaded) so that a drift of
# the machine falls on both alike. Each dtype's draft is the one its record names (`draft`; a
# record that names none ran the int8 head in bfloat16 and the head with its own weights in
# float32).

# %%
WEIGHTS = {"plain": "as loaded", "packed": "prepacked"}
pass_ms = pd.DataFrame(
    {
        (run["dtype"], label): np.array(run[variant]["t_target_s"]) * 1e3
        for run in PACKING["runs"]
        for variant, label in WEIGHTS.items()
    }
)
pass_ms.index = pd.RangeIndex(1, len(pass_ms) + 1, name="tokens in the pass")
pass_ms.columns.names = ["dtype", "weights"]
# a packing record without `packer` was packed by oneDNN in bfloat16 and MKL in float32
packers = {
    run["dtype"]: run.get("packer", "oneDNN" if run["dtype"] == "bfloat16" else "MKL")
    for run in PACKING["runs"]
}
print(
    f"target pass, ms (cache of {PACKING['provenance']['settings']['context']} tokens; "
    + ", ".join(f"{d} prepacked for {lib}" for d, lib in packers.items())
    + "):"
)
pass_ms.round(2)

# %%
fig, ax = plt.subplots(figsize=(6.8, 4.2))
for (dtype, weights), ms in pass_ms.items():
    ax.plot(
        ms.index,
        ms,
        "o-" if weights == "prepacked" else "s--",
        ms=4,
        color=COLORS["draft"] if dtype == "bfloat16" else COLORS["target"],
        label=f"{dtype}, weights {weights}",
    )
ax.set(
    xlabel="tokens in one cached target pass (K + 1 for the chain)",
    ylabel="time of the pass (ms)",
    ylim=(0, None),
    title=f"Target pass costs, SmolLM2-135M-Instruct, {MACHINE_SHORT}",
)
ax.legend(loc="lower right", fontsize=9)
savefig("06_dtype_pass_costs", fig)
# %% [markdown]
# What each setting means for a draft: the relative cost of verification, the draft's $c$, and
# the chain's speedup that notebook 05's $S(K)$ predicts at the best $K$ these pass costs cover,
# with the held-out acceptance at $T = 1$ of the head each setting runs (the int8 head's, or the
# head's with its own weights, as measured in bfloat16: its $q$ in float32 differs by rounding
# only).

# %%
EVAL = {
    "bf16": CAMPAIGN.run("eval_trained"),
    "int8": CAMPAIGN.run("eval_trained_int8"),
}
head_alpha = {
    "trained-int8": EVAL["int8"]["by_temperature"]["1"]["alpha"],
    "trained": EVAL["bf16"]["by_temperature"]["1"]["alpha"],
    "trained-bf16": EVAL["bf16"]["by_temperature"]["1"]["alpha"],  # the same head, in bfloat16
}
rows = []
for run in PACKING["runs"]:
    draft = run.get("draft", "trained-int8" if run["dtype"] == "bfloat16" else "trained")
    for variant, label in WEIGHTS.items():
        t, t_draft = run[variant]["t_target_s"], run[variant]["t_draft_s"]
        alpha = head_alpha[draft]
        S = {K: predicted_speedup(alpha, K, t_draft, t) for K in range(1, len(t))}
        best_K = max(S, key=S.get)
        rows.append(
            {
                "dtype": run["dtype"],
                "weights": label,
                "draft": draft,
                "t(1) ms": t[0] * 1e3,
                "t(2)/t(1)": t[1] / t[0],
                f"t({len(t)})/t(1)": t[-1] / t[0],
                "draft step ms": t_draft * 1e3,
                "c": t_draft / t[0],
                "alpha (T=1)": alpha,
                "best K": best_K,
                "S predicted": S[best_K],
                # S(K) is over this setting's own autoregressive decoding, one pass per token
                "tokens/s predicted": S[best_K] / t[0],
            }
        )
settings = pd.DataFrame(rows).set_index(["dtype", "weights"])
settings

# %%
ratio = {dtype: pd.Series(r) for dtype, r in packed_ratio.items()}
fastest_1 = pass_ms.iloc[0].idxmin()
fastest_n = pass_ms.iloc[-1].idxmin()
best_S = settings["S predicted"].idxmax()
best_rate = settings["tokens/s predicted"].idxmax()
display(
    Markdown(
        "Prepacked over as loaded, pass by pass: "
        + "; ".join(
            f"{dtype} {r.min():.2f}-{r.max():.2f}× over $n$ = 1-{len(r)}"
            for dtype, r in ratio.items()
        )
        + f". The cheapest pass over one token is {fastest_1[0]} with the weights "
        f"{fastest_1[1]} ({pass_ms.iloc[0].min():.1f} ms), over {len(pass_ms)} tokens "
        f"{fastest_n[0]} with the weights {fastest_n[1]} ({pass_ms.iloc[-1].min():.1f} ms). "
        "Relative to a one-token pass, a pass over 2 tokens costs "
        + ", ".join(f"{x:.2f}× ({d}, {w})" for (d, w), x in settings["t(2)/t(1)"].items())
        + ". The chain's predicted speedup over autoregressive decoding in the same setting is "
        f"highest in {best_S[0]} with the weights {best_S[1]} "
        f"({settings['S predicted'].max():.2f}× at $K$ = {settings.loc[best_S, 'best K']:.0f}; "
        + ", ".join(
            f"{x:.2f}× in {d}, {w}"
            for (d, w), x in settings["S predicted"].drop(index=best_S).items()
        )
        + "). A speedup is relative to its own baseline, and the baselines differ: in tokens per "
        f"second, the predicted chain is fastest in {best_rate[0]} with the weights "
        f"{best_rate[1]} ({settings['tokens/s predicted'].max():.1f} tokens/s, the host's work "
        "left out)."
    )
)

# %% [markdown]
# **The start-up choice.** The recommended configuration as the campaign ran it (`bench` without
# flags at the campaign's commit, notebook 05 §4) did not fix the dtype: at start-up, on the
# machine at hand, it timed a target pass over 1 and over 8 tokens in float32 as loaded, float32
# prepacked, bfloat16 prepacked and, where its kernel builds, bfloat16 packed for the library's own
# product (`research.speed`), and ran in the setting fastest over both together (the baseline's
# pass and a step's). The recommended run recorded its timings (ms):

# %%
startup = pd.DataFrame(
    {
        name: {f"{n} tokens": t * 1e3 for n, t in by_n.items()}
        for name, by_n in choice["t_target_s"].items()
    }
).T
startup.index.name = "setting"
startup.round(2)

# %%
levers_8 = {
    f"{run['dtype']}{' packed' if variant == 'packed' else ''}": run[variant]["t_target_s"][7]
    for run in PACKING["runs"]
    for variant in WEIGHTS
}
levers_8 = {k: v for k, v in levers_8.items() if k in choice["t_target_s"]}
chosen = f"{choice['dtype']}{' packed' if choice['pack'] in ('on', True) else ''}"
levers_first = min(levers_8, key=levers_8.get)
display(
    Markdown(
        f"It chose {choice['dtype']}{PACKED_AS.get(choice['pack'], '')}: "
        f"{choice['why']}. Over the settings it times with oneDNN's products, the packing run "
        f"ranks {levers_first} fastest over 8 tokens"
        + (
            ", the same setting."
            if levers_first == chosen
            else "; the start-up choice is the library's own product, which the packing run does not time."
            if choice["pack"] == "library"
            else f", not {chosen}."
        )
    )
)

# %% [markdown]
# **The draft's side: int8 weights.** The head with int8 weights (one scale per output row) reads
# half the bytes per draft step. Its $q$ changes a little, so its acceptance is measured again, on
# the same held-out prompts as the head's own (`eval-drafter --draft trained-int8`), with 95%
# Wilson intervals:

# %%
int8_rows = {}
for name, ev in EVAL.items():
    for T, r in ev["by_temperature"].items():
        lo, hi = wilson(r["accepted"], r["proposed"])
        int8_rows[("greedy" if T == "0" else f"T = {T}", f"{name} head")] = {
            "alpha": r["alpha"],
            "95% low": lo,
            "95% high": hi,
            "proposed": r["proposed"],
            "c": ev["costs"]["c"],
        }
int8_table = pd.DataFrame(int8_rows).T.sort_index().astype({"proposed": int})
int8_table

# %%
overlaps = {
    T: int8_table.loc[(T, "int8 head"), "95% low"] <= int8_table.loc[(T, "bf16 head"), "95% high"]
    and int8_table.loc[(T, "bf16 head"), "95% low"] <= int8_table.loc[(T, "int8 head"), "95% high"]
    for T in dict.fromkeys(int8_table.index.get_level_values(0))
    if (T, "int8 head") in int8_table.index and (T, "bf16 head") in int8_table.index
}
display(
    Markdown(
        f"int8 weights lower $c$ from {EVAL['bf16']['costs']['c']:.3f} to "
        f"{EVAL['int8']['costs']['c']:.3f} in the evaluations' processes. Their acceptance "
        + (
            "intervals overlap the bfloat16 head's at every temperature both were measured at ("
            + ", ".join(overlaps)
            + ")."
            if all(overlaps.values())
            else "intervals do not overlap the bfloat16 head's at "
            + ", ".join(T for T, ok in overlaps.items() if not ok)
            + "."
        )
    )
)

# %% [markdown]
# ## 4. Several candidates for the first position
#
# Where a pass over one more token costs little (§3), check *two* candidates
# for the first position in the same pass, side by side (each sees the prefix, not the other: a
# tree-shaped attention mask, one shared position), and try them in turn — **recursive rejection**
# (SpecInfer, Miao et al. 2023; drawn without replacement as in Jeon et al. 2024):
#
# $$p_1 = p;\quad c_i \sim q_i:\ \text{accept with } \min\Big(1, \frac{p_i(c_i)}{q_i(c_i)}\Big),\ \text{else } p_{i+1} = \text{norm}\big(\max(0, p_i - q_i)\big);\quad \text{after the last: sample } p_{m+1}.$$
#
# Each stage is one ordinary speculative-sampling step whose target is $p_i$; by induction from the
# last stage back, stage $i$ emits a token with law $p_i$ whatever $q_i$ is (it may depend on the
# earlier candidates), so the token emitted has law $p$. The decoder draws $c_2$ from the draft's
# $q$ with $c_1$ removed (renormalised): a token already rejected has $p_2 = 0$ and would be a
# wasted try. Under greedy decoding $q_i$ is a point mass on the draft's $i$-th best token, the
# same rule. When an alternative is accepted, the target's pass already holds the law of the token
# after it: a bonus token, as after a fully accepted chain. With $K > 1$ the chain continues from
# $c_1$ only.
#
# Candidates for one position are the draft tree $(w,)$ with one draft depth. The exact law of the
# token it emits, by enumerating every ordered draw (`stats.exact_tree_law`, which runs the
# decoder's own stage functions through `trees.candidate_stage`; `stats.first_token_law` keeps
# the first token), is $p$; with the prototype's correction in place of the residual it is not:

# %%
# NBVAL_CHECK_OUTPUT
import itertools

import torch

from specdec_lib.research.stats import exact_tree_law, first_token_law, tv
from specdec_lib.sampling import prototype_correction


def width_law(p, q, width, *correction):
    """The law of the token emitted by `width` candidates for one position: the tree (width,)."""
    law = exact_tree_law(lambda s: p, lambda s: q, (width,), 1, *correction)
    return first_token_law(law, len(p))


def random_pairs(seed):
    """Three random (p, q) for each V in 3, 5, 8 and each of 1-3 candidates, float64."""
    g = torch.Generator().manual_seed(seed)
    for V, width, _ in itertools.product((3, 5, 8), (1, 2, 3), range(3)):
        p = torch.softmax(2 * torch.randn(V, generator=g, dtype=torch.float64), 0)
        q = torch.softmax(3 * torch.randn(V, generator=g, dtype=torch.float64), 0)
        yield p, q, width


worst, wrong = 0.0, 0.0
for p, q, width in random_pairs(0):
    worst = max(worst, tv(width_law(p, q, width), p))
    wrong = max(wrong, tv(width_law(p, q, width, prototype_correction), p))
print("residual rule, 1-3 candidates, V = 3, 5, 8: law == p to 1e-12:", worst < 1e-12)
print("prototype's correction: largest TV from p =", round(wrong, 2))

# %% [markdown]
# **The rule, on the page.** The same law written out from the formula above, without the
# library's stage functions: candidates drawn from $q$ without replacement, each tried against
# what is left of $p$. It equals the library's law, and $p$, on the same pairs:


# %%
# NBVAL_CHECK_OUTPUT
def recursive_rejection_law(p, q, width):
    # The exact law of the token `width` candidates for one position emit (float64, tiny V).
    def stage(left, rest, tries):  # left: p_i; rest: q with the earlier candidates removed
        if tries == 0 or rest.sum() <= 1e-12:
            return left  # every candidate rejected: a draw from what is left of p
        q_i = rest / rest.sum()
        out = torch.zeros_like(left)
        for x in torch.nonzero(q_i).view(-1).tolist():
            accept = min(1.0, float(left[x] / q_i[x]))  # min(1, p_i(c_i) / q_i(c_i))
            out[x] += q_i[x] * accept
            if accept < 1.0:  # rejected: p_{i+1} = norm(max(0, p_i - q_i)), c_i removed from q
                passed = (left - q_i).clamp(min=0)
                without = rest.clone()
                without[x] = 0
                out += q_i[x] * (1 - accept) * stage(passed / passed.sum(), without, tries - 1)
        return out

    return stage(p, q.clone(), width)


gap_library, gap_p = 0.0, 0.0
for p, q, width in random_pairs(1):
    mine = recursive_rejection_law(p, q, width)
    gap_library = max(gap_library, tv(mine, width_law(p, q, width)))
    gap_p = max(gap_p, tv(mine, p))
print("the rule on the page: its law == the library's to 1e-12:", gap_library < 1e-12)
print("and == p to 1e-12:", gap_p < 1e-12)


# %% [markdown]
# The chi-square tests of the decoder with alternatives on the tiny models (the law of 2-token
# continuations, several $K$, widths and warps), greedy equality with the autoregressive output (on
# the tiny models and on SmolLM2 with the trained head), and cache against no-cache are in
# `tests/test_trees.py`, `tests/test_feature.py` and `tests/test_models.py`.

# %% [markdown]
# ## 5. Draft trees: candidates at every depth
#
# §4 checks several candidates for the first position. The same rule applies at every depth.
# A **chain tree** keeps the chain the head drafts and adds, beside its token at depth $d$,
# $w_d - 1$ alternatives drawn without replacement from the draft's $q$ at that depth: the row
# the chain's token was drawn from, so the alternatives cost no draft pass. The target checks the
# last token and every node in one pass. Each node sits at the position of its depth and sees the
# prefix and its own ancestors only (a tree attention mask).
#
# Verification walks down the tree (`trees.verify_tree`). At a node whose target row is $p$
# (the target's law given the path to it), the node's children are tried in the order they were
# drawn, by recursive rejection as in §4. The accepted child becomes the node, and its row of the
# pass becomes $p$. When every child is rejected, the step emits a token from what is left of
# $p$. A node without children ends the step with a bonus token from its row. The kept path's
# cache entries move into place, and a feature-reading drafter is handed its features.
#
# **Exact.** At a node reached by the path $s$, §4's argument gives the next token the law
# $p(\cdot \mid s)$, provided that the children were drawn from $q(\cdot \mid s)$ given the
# earlier siblings, and that the subtree under each child was drawn without looking at the
# uniforms. Given that token, the step either ends (the next step starts a fresh target pass) or
# goes on at that child, where the same argument applies. So every emitted token follows the
# target given everything before it. In a chain tree, the chain's draws never depend on the
# alternatives, and a depth's alternatives depend only on the chain's token there.
#
# The law of the first $K + 1$ tokens, by enumerating every ordered draw of every node
# (`stats.exact_tree_law`, which runs the decoder's own stage functions), is the target's; with
# the prototype's correction it is not:

# %%
# NBVAL_CHECK_OUTPUT


def toy_laws(V: int, seed: int):
    """A toy target and draft over V tokens whose laws depend on the whole prefix."""

    def law(kind: int, prefix: tuple[int, ...]) -> torch.Tensor:
        gen = torch.Generator().manual_seed(hash((seed, kind) + prefix) % 2**31)
        return torch.softmax((1 + 2 * kind) * torch.randn(V, generator=gen, dtype=torch.float64), 0)

    return (lambda s: law(0, s)), (lambda s: law(1, s))


def target_law(p_fn, V: int, n: int) -> dict:
    out = {}
    for seq in itertools.product(range(V), repeat=n):
        out[seq] = float(np.prod([float(p_fn(seq[:t])[seq[t]]) for t in range(n)]))
    return out


def law_tv(a: dict, b: dict) -> float:
    return sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b)) / 2


worst, wrong = 0.0, 0.0
for V, widths in [(3, (2, 2)), (3, (3, 1, 2)), (4, (4, 2)), (4, (2, 3))]:
    K = len(widths)
    p_fn, q_fn = toy_laws(V, seed=V + K)
    ref = target_law(p_fn, V, K + 1)
    worst = max(worst, law_tv(exact_tree_law(p_fn, q_fn, widths, K), ref))
    wrong = max(wrong, law_tv(exact_tree_law(p_fn, q_fn, widths, K, prototype_correction), ref))
print("residual rule, trees (2, 2), (3, 1, 2), (4, 2), (2, 3): law == p to 1e-12:", worst < 1e-12)
print("prototype's correction: largest TV from p =", round(wrong, 2))

# %% [markdown]
# `tests/test_trees.py` adds a chi-square test of the sampled rule (the prototype's
# correction rejected at the same sample size), the tiny models' three-token law through the
# decoder with trees, greedy equality with the autoregressive output, and cache against no
# cache; `tests/test_feature.py` does the same with the feature head. On SmolLM2, notebook 02
# §9 tests the tree below against the target's exact law, with the other shipped configurations.
#
# **Which tree?** Let $\beta_d$ be the probability that the chain's token at depth $d$ is
# accepted once the step reaches it, and $\gamma_d(w)$ the probability that one of the depth's
# $w - 1$ alternatives is accepted once the chain's token there is rejected. A step that reaches
# depth $d$ ends there with $d + 1$ tokens when an alternative is kept (it, and the target's token
# after it), with $d$ tokens otherwise, and with $K + 1$ past the last depth:
#
# $$E[\text{tokens per step}] = \sum_{d=1}^{K} R_d\,(1 - \beta_d)\,(d + \gamma_d(w_d)) + R_{K+1}(K+1),\qquad R_1 = 1,\ R_{d+1} = R_d\,\beta_d$$
#
# (`costs.tree_tokens_per_step`; with no alternatives and $\beta_d = \alpha$ it is notebook 01's
# $E(\alpha, K)$). A step costs $K$ draft passes and one target pass over $1 + \sum_d w_d$
# tokens. Alternatives are tried in the order they are drawn, so the first $w - 1$ of a wide
# tree's alternatives are exactly a narrower tree's: one run with a wide tree measures $\beta_d$
# and $\gamma_d(w)$ for every narrower one of the same depth (`bench.tree_rates`). The campaign
# runs one such tree, 8 candidates at each of 2 depths (`bench --tree 8 8 --K 2`, the recommended
# configuration otherwise: the head, dtype and weights its start-up chooses, the draft stopped by
# confidence), on the benchmark's prompts
# at $T = 1$. A depth yields a token when its chain token or one of its alternatives is accepted:

# %%
rows = []
for panel, (res, r) in PROBES.items():
    W = max(res["settings"]["tree"])
    for d in range(len(res["settings"]["tree"])):
        for w in range(1, W + 1):
            n = r["reached"][d]
            k = r["chain_accepted"][d] + sum(r["alternative_kept"][d][: w - 1])
            lo, hi = wilson(k, n)
            rows.append(
                {"panel": panel, "depth": d + 1, "candidates": w}
                | {"reached": n, "rate": k / n, "lo": lo, "hi": hi}
            )
tree_acc = pd.DataFrame(rows)
tree_acc.pivot_table(index=["panel", "depth"], columns="candidates", values="rate")

# %%
probe_settings = PROBES["T = 1"][0]["settings"]
fig = figs.tree_acceptance(
    tree_acc,
    title=(
        f"Acceptance bought by candidates at each depth (tree {tuple(probe_settings['tree'])}, "
        f"{probe_settings['draft']} head, {probe_settings['dtype']}, "
        f"{len(PROBES['T = 1'][0]['prompts'])} benchmark prompts)"
    ),
)
savefig("06_tree_acceptance", fig)
# %% [markdown]
# The cost model ranks every chain tree these rates cover, each probe with its own pass costs
# (measured in the same process): trees of depth 1 and 2 only, since the probes reach no deeper.
# It leaves out the host's work per node (drawing the alternatives, warping their rows, trying
# them), which grows with the tree: the ranking keeps trees of at most 8 drafted tokens.
#
# The ranking belongs to the machine as much as to the draft: where every extra token of a pass
# costs more (a CPU that emulates bfloat16 arithmetic), the chain ranks first. `bench` makes this
# ranking for the trained head by default (`--tune-tree`; `--no-tune-tree` runs the tree (4, 3)
# instead) at the start of a run, at each $K$, from the pass costs timed there and the
# head's rates, measured once with the tree (8, 8) and committed beside the head
# (`data/drafter/feature_head.tree_rates.json`), and runs each $K$ with the shape ranked first.

# %%
ranking.head(8)

# %%
# NBVAL_CHECK_OUTPUT
print("chain trees ranked (depth 1-2, at most", BUDGET, "drafted tokens):", len(ranking))
print(f"the preset's fixed tree {CHOSEN}: rank {ranking.loc[[CHOSEN], 'rank'].iloc[0]}")
print(
    "rank of the fixed tree at each temperature:",
    {
        panel: ranking[panel].sort_values(ascending=False, kind="stable").index.get_loc(CHOSEN) + 1
        for panel in TEMPS
    },  # fmt: skip
)

# %%
first = ranking.index[0]
mean_of = ranking["mean"]
probe_eff = {
    panel: next(r for r in res["runs"] if r["method"] == "speculative")["efficiency"]
    for panel, (res, _) in PROBES.items()
}
display(
    Markdown(
        f"The preset's fixed tree, {CHOSEN} (`bench.DEFAULT_TREE`: `bench` runs it where the "
        "head has no committed tree rates, and `--no-tune-tree`), is predicted at "
        f"{mean_of[CHOSEN]:.3f}×, rank {ranking.loc[[CHOSEN], 'rank'].iloc[0]} of "
        f"{len(ranking)}"
        + (
            f"; the next, {ranking.index[1]}, is predicted "
            f"{mean_of[CHOSEN] - mean_of.iloc[1]:.4f}× lower."
            if first == CHOSEN
            else f"; the first, {first}, at {mean_of[first]:.3f}×, "
            f"{mean_of[first] - mean_of[CHOSEN]:.3f} higher "
            f"({(mean_of[first] / mean_of[CHOSEN] - 1):.1%})."
        )
        + " Per temperature: "
        + ", ".join(
            f"{ranking.loc[[CHOSEN], panel].iloc[0]:.3f}× against a best of "
            f"{ranking[panel].max():.3f}×, {ranking[panel].idxmax()}, at {panel}"
            for panel in TEMPS
        )
        + f". The chain at $K = 2$ is predicted at {mean_of[(1, 1)]:.3f}×, two "
        f"first-position candidates with the chain at $K = 2$, (2, 1), at {mean_of[(2, 1)]:.3f}×. "
        f"The wide run itself, with "
        f"{drafted_tokens(2, tuple(probe_settings['tree']))} drafted tokens per step, measured "
        + " and ".join(f"{e:.2f} of their prediction ({p})" for p, e in probe_eff.items())
        + "."
    )
)

# %% [markdown]
# **Measured.** The recommended configuration against the chain, side by side on the campaign's
# machine: the recommended run (a tree tuned at each $K$ from the machine's pass costs and the
# head's committed tree rates, the draft stopped by confidence) and the chain run
# (`bench --preset chain`: one candidate per position, $K$ drafts every step), both at $T = 1$ on
# the same prompts, at every $K$ of the grid, each run against its own autoregressive baseline in
# the same process and dtype. The two runs can differ in the head's weights and in the dtype each
# one's start-up timing chose, as well as in the tree and the stop;
# the labels say which (§3 measures what int8 does to $\alpha$ and $c$, and the dtypes' passes). The crosses are
# each run's cost model at the rates its own steps show.

# %%
TREE_RUNS = {
    ("T = 1", f"{shape_of(REC)}, {REC['settings']['draft']} head, {REC['settings']['dtype']}"): (
        CAMPAIGN.folder / "bench_recommended_T1.json"
    ),
    ("T = 1", f"chain, {CHAIN['settings']['draft']} head, {CHAIN['settings']['dtype']}"): (
        CAMPAIGN.folder / "bench_chain_T1.json"
    ),
}
tree_speed = bench.speculative_runs(TREE_RUNS)
cols = ["speedup", "speedup_low", "speedup_high", "predicted_speedup", "efficiency", "tau"]
tree_speed.set_index(["panel", "config", "K"])[cols]

# %%
fig = speedup_intervals(
    tree_speed,
    title=(
        f"The recommended configuration against the chain, T = 1, {MACHINE_SHORT}\n"
        f"(one run each, {REC['settings']['repeats']} repeat of each prompt)"
    ),
)
savefig("06_tree_speedup", fig)
# %%
TT, TC = (config for _, config in TREE_RUNS)
by_K = tree_speed.pivot_table(index="K", columns="config", values=["speedup", "tau"])
bounds = tree_speed.pivot_table(index="K", columns="config", values=["speedup_low", "speedup_high"])
tree_ahead = bounds[("speedup_low", TT)] > bounds[("speedup_high", TC)]
eff = tree_speed[tree_speed.config == TT].efficiency
display(
    Markdown(
        f"At the best $K$ of each: {with_interval(rec_best)} with the tree ($K$ = "
        f"{rec_best.K:.0f}), {with_interval(chain_best)} with the chain ($K$ = "
        f"{chain_best.K:.0f}). The tree's interval lies above the chain's "
        + (
            "at every $K$"
            if tree_ahead.all()
            else "at $K$ = " + ", ".join(str(k) for k in tree_ahead[tree_ahead].index)
            if tree_ahead.any()
            else "at no $K$"
        )
        + f" of 1-{tree_speed.K.max()}. Tokens per target pass at $K = 2$: "
        f"{by_K.loc[2, ('tau', TT)]:.2f} with the tree against {by_K.loc[2, ('tau', TC)]:.2f} "
        f"with the chain. Measured over predicted for the tree: {eff.min():.2f}–{eff.max():.2f}."
    )
)

# %% [markdown]
# **Host work per step.** Besides its passes, a step does work on the host that the cost model
# leaves out: it warps the target's rows, draws the alternatives and walks the tree. The trained
# head's $q$ is zero outside its fixed token subset (notebook 05), and a drafter that names the
# subset (its `support`) lets the decoder draw the alternatives and try them over the subset only
# (`trees.support_stage`), where a drafter that hides it has them drawn and tried over the whole
# vocabulary: the same law, at another price. The campaign's support run
# (`python -m specdec_lib.research.levers --lever support`) decodes the same prompts both ways,
# alternating from prompt to prompt, with the int8 head in bfloat16, its weights prepacked for
# oneDNN, and the tree (4, 3) at $K = 2$; per variant, the medians over prompts of the host's,
# the draft's and the target's milliseconds per step, and the tokens per second over all prompts:

# %%
SUPPORT = CAMPAIGN.run("host_support")
check_same_machine([SUPPORT, REC], "the support run and the benchmark")
VARIANTS = {"support": "the draft's subset", "whole vocabulary": "the whole vocabulary"}
support = pd.DataFrame(
    [
        {
            "panel": "greedy" if run["temperature"] == 0 else f"T = {run['temperature']:g}",
            "alternatives over": label,
            "tree": tuple(run["tree"]),
            "K": run["K"],
        }
        | run[variant]
        for run in SUPPORT["runs"]
        for variant, label in VARIANTS.items()
    ]
).set_index(["panel", "alternatives over"])
support

# %%
n_prompts = SUPPORT["provenance"]["settings"]["prompts"]
sentences = []
for panel in dict.fromkeys(support.index.get_level_values(0)):
    on, off = (support.loc[(panel, label)] for label in VARIANTS.values())
    step = off.host_ms_per_step + off.draft_ms_per_step + off.target_ms_per_step
    saved = off.host_ms_per_step - on.host_ms_per_step
    sentences.append(
        f"{panel}: {on.host_ms_per_step:.2f} ms of host work per step over the subset against "
        f"{off.host_ms_per_step:.2f} ms over the whole vocabulary, "
        f"{abs(saved):.2f} ms {'less' if saved >= 0 else 'more'} with the subset "
        f"({abs(saved) / step:.1%} of the {step:.1f} ms of host, draft and target work per step "
        "over the whole vocabulary); "
        f"{on.tokens_per_s:.1f} against {off.tokens_per_s:.1f} tokens per second."
    )
display(
    Markdown(
        f"On the first {n_prompts} benchmark prompts: "
        + " ".join(sentences)
        + " The medians of the parts need not add up to the median step."
    )
)

# %% [markdown]
# ## 6. How far a tree of depth 2 can go with this draft
#
# A chain tree leaves its alternatives without children. A tree that grows at every node (the
# token trees of SpecInfer, the dynamic trees of EAGLE-2) is exact by the same walk down the tree,
# and can only hold more tokens per step. How many more? Rank the candidates a node proposes, and
# let $m_d(i)$ be the probability that its $i$-th is the one accepted once the step reaches a node
# at depth $d$: $m_d(1) = \beta_d$ and $m_d(i) = (1 - \beta_d)(\gamma_d(i) - \gamma_d(i - 1))$
# (`trees.rank_rates`). A node lies on the accepted path with probability $v$, the product of $m$
# along its path, and a step emits one token more than the nodes it accepts:
#
# $$E[\text{tokens per step}] = 1 + \sum_{\text{nodes}} v(\text{node}).$$
#
# $v$ never grows from a node to its child, so the $n$ largest values form a tree, and it is the
# best tree of $n$ nodes (`trees.best_tree`, which grows it best-first as EAGLE-2 does; tested
# against every tree of up to five nodes); the same holds among the nodes no deeper than a given
# depth. The probes of §5 measure the ranks at depths 1 and 2 only, so the trees here are of depth
# 2 at most (`depth_ceiling` above: `trees.tree_ceiling` with the depth capped). Their tokens per
# step are divided by the cost of a step: one draft pass per depth and one target pass over
# $n + 1$ tokens, from the campaign's run that times target passes over up to 64 tokens
# (`python -m specdec_lib device-costs --device cpu --n-max 64`, with the int8 head's draft cost;
# made non-decreasing in $n$ by `trees.monotone_costs`, since a pass over more tokens never costs
# less). The ranks are those of the wide run: 8 candidates at each depth, so at most 8 children
# per node. The result is a ceiling for trees of depth 2, optimistic on three counts: every node's
# candidates are accepted at the rates the chain shows at its depth, children of an alternative
# included; the draft grows a whole depth of the tree for the price of one chain pass; and the
# host's work per node is free.

# %%
t_dev, t_rec = CEILING_COSTS["t_target_s"], REC["costs"]["t_target_s"]
n_cmp = min(len(t_dev), len(t_rec))
print(
    f"relative pass costs t(n)/t(1) at n = 2 and {n_cmp}: device-costs run "
    f"{t_dev[1] / t_dev[0]:.2f}, {t_dev[n_cmp - 1] / t_dev[0]:.2f}; recommended run "
    f"{t_rec[1] / t_rec[0]:.2f}, {t_rec[n_cmp - 1] / t_rec[0]:.2f}"
)
check_same_machine([DEVICE_COSTS, REC], "the device-costs run and the benchmark")
curve_rows, ceilings = [], {}
for panel, (_, r) in PROBES.items():
    ceiling = depth_ceiling(r, CEILING_COSTS, 2)
    ceilings[panel] = top_ceiling[panel]
    curve_rows += [
        {"panel": panel, "curve": "best tree of n nodes, depth ≤ 2: the ceiling"}
        | {"nodes": c["nodes"], "predicted_speedup": c["predicted_speedup"]}
        for c in ceiling
    ]
    chain_trees = pd.DataFrame(trees.best_trees(r, CEILING_COSTS))  # K <= 2, up to 8 per depth
    best_chain = chain_trees.groupby("drafted").predicted_speedup.max()
    curve_rows += [
        {"panel": panel, "curve": "best chain tree of n nodes (K ≤ 2)"}
        | {"nodes": n, "predicted_speedup": v}
        for n, v in best_chain.items()
    ]
curves = pd.DataFrame(curve_rows)
MEASURED = {"T = 1": REC}
check_same_machine([*MEASURED.values(), DEVICE_COSTS], "the measured trees and the ceiling")
measured_rows = []
for panel, result in MEASURED.items():
    for K in (1, 2):
        measured_rows.append(
            speculative_at(result, K).to_dict()
            | {
                "panel": panel,
                "nodes": drafted_tokens(K, tree_at(result, K)),
                "tree": tree_at(result, K),
            }
        )
    res, _ = PROBES[panel]
    (K_probe,) = res["settings"]["K"]
    probe_tree = tuple(res["settings"]["tree"])
    measured_rows.append(
        speculative_at(res, K_probe).to_dict()
        | {"panel": panel, "nodes": drafted_tokens(K_probe, probe_tree), "tree": probe_tree}
    )
measured_trees = pd.DataFrame(measured_rows).assign(
    label=f"measured: the recommended run at K = 1, 2 and the probe {probe_tree} at K = 2"
)
pd.DataFrame(ceilings).T[
    ["nodes", "depth", "tokens_per_step", "step_cost", "predicted_speedup"]
].astype({"nodes": int, "depth": int})

# %%
fig = figs.tree_ceiling(
    curves,
    measured_trees,
    title=(
        "How fast a draft tree of depth ≤ 2 could be with this head\n"
        f"(cost model, pass costs of {MACHINE_SHORT})"
    ),
)
savefig("06_tree_ceiling", fig)
# %% [markdown]
# Past some number of nodes a node's $v$ is smaller than what it adds to the pass, so the ceiling
# flattens and falls. What moves it is the draft's acceptance. The acceptance $\alpha$, the same
# at every position, that a chain needs for a given speedup at its best $K$ on these pass costs
# (`trees.required_alpha`), beside the head's chain acceptance at depth 1 in the wide run:

# %%
# NBVAL_CHECK_OUTPUT
for panel, c in ceilings.items():
    beta_1 = PROBES[panel][1]["beta"][0]
    print(
        f"{panel}: ceiling {c['predicted_speedup']:.2f}x ({c['nodes']} nodes, depth {c['depth']}),"
        f" the head's depth-1 acceptance {beta_1:.2f}"
    )
for target_speedup in (1.5, 2.0, 2.5, 3.0):
    a = trees.required_alpha(
        target_speedup, CEILING_COSTS["t_draft_s"], CEILING_COSTS["t_target_s"]
    )
    print(f"a chain reaches {target_speedup:.1f}x from alpha = {a:.2f}")

# %%
measured_best = measured_trees.groupby("panel").speedup.max()
beta_1 = [PROBES[p][1]["beta"][0] for p in TEMPS]
display(
    Markdown(
        " ".join(
            f"{panel}: the best tree of depth ≤ 2 with up to 8 candidates per node is predicted at "
            f"{c['predicted_speedup']:.2f}× ({c['nodes']} nodes, {c['tokens_per_step']:.2f} "
            f"tokens per step); the trees measured reached at most {measured_best[panel]:.2f}×."
            for panel, c in ceilings.items()
        )
        + f" A chain needs $\\alpha$ = "
        f"{trees.required_alpha(2.0, CEILING_COSTS['t_draft_s'], CEILING_COSTS['t_target_s']):.2f}"
        " for 2× on these pass costs, where this head's top candidate at depth 1 is accepted at "
        + (
            f"{min(beta_1):.2f}"
            if f"{min(beta_1):.2f}" == f"{max(beta_1):.2f}"
            else f"{min(beta_1):.2f}–{max(beta_1):.2f}"
        )
        + ". The ceiling's pass costs come from a run with the "
        "target's weights as loaded and random, the measured runs prepack them (§3): the printed "
        "ratios above compare the two runs' relative pass costs."
    )
)

# %% [markdown]
# ## Discussion

# %%
one, two = cap.loc["1 layer"], cap.loc["2 layers"]
display(
    Markdown(
        "The choices of notebook 05 rest on these experiments. At equal data the pilot's draft "
        f"that accepts most is the *{PILOT_LABELS.get(best_pilot, best_pilot)}* (§1), "
        "and a second head layer "
        + (
            "raises the predicted speedup at $K = 1$"
            if two["S(K=1) predicted"] > one["S(K=1) predicted"]
            else "does not raise the predicted speedup at $K = 1$"
        )
        + " at this scale (§2). How much a draft can gain depends on what a pass over a few more "
        "tokens costs, which on this machine depends on the dtype and on the weights' layout "
        f"(§3); the chain model predicts the fastest speculative decoding in {best_rate[0]} with "
        f"the weights {best_rate[1]}, and `bench` times the choice at start-up. Recursive "
        "rejection keeps the "
        "output law exactly $p$ with any number of candidates (§4), and a draft tree along the "
        "chain is exact by the same rule at every node (§5). At the rates one wide tree of "
        f"depth 2 measures, the cost model ranks the preset's fixed tree {CHOSEN} number "
        f"{ranking.loc[[CHOSEN], 'rank'].iloc[0]} of {len(ranking)}; measured beside the chain at "
        f"$T = 1$, the recommended configuration reaches {with_interval(rec_best)} against "
        f"{with_interval(chain_best)} at the best $K$ of each (the chain in "
        f"{CHAIN['settings']['dtype']}, the dtype its own start-up timing chose, with the "
        f"{CHAIN['settings']['draft']} head's weights: a difference between the two mixes the "
        "tree and the stop with those). For trees of depth 2 or less the "
        "cost model's ceiling with this head is "
        + " and ".join(f"{c['predicted_speedup']:.2f}× ({p})" for p, c in ceilings.items())
        + " (§6). Deeper trees, which these probes do not measure, and a draft that accepts more "
        "are what could go further."
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
