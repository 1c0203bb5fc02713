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
# # 04 · Acceptance by prompt type, by position, token by token
#
# How often the target accepts the draft's tokens, by kind of prompt, along the draft, and token by
# token. What this page finds, rendered from the campaign it reads (`data/results/campaign/`):

# %%
from IPython.display import Markdown

from specdec_lib.config import RESULTS_DIR
from specdec_lib.figures import acceptance_by_prompt_type as figs
from specdec_lib.research.campaign import Campaign

CAMPAIGN = Campaign.read(RESULTS_DIR / "campaign")
Markdown(figs.findings(CAMPAIGN))

# %% [markdown]
# **Aim.** The speedup of notebook 03 is governed by the acceptance rate $\alpha$. Here we open it
# up: how it varies with the kind of prompt (the prototype's five categories: continuation, code
# completion, creative writing, question answering, technical explanation), how it changes along
# the draft, and — token by token — where the draft agrees with the target.
#
# The data are the benchmark runs of notebook 03, all from one campaign (`data/results/campaign/`:
# one machine, one commit; 20 prompts, 50 new tokens each):
#
# * the **recommended configuration** at $T = 1$ and in greedy decoding: a small head trained on
#   the target's own samples (notebook 05 builds it; here only its acceptance matters), drafting
#   a **tree** around its chain (several candidates at the first draft positions, one at each deeper
#   position, judged one after the other at each depth, at most one kept; its shape tuned at each
#   $K$ on the machine, notebook 03) and stopping after a draft it was unsure of, so that $K$ caps
#   the draft's length (the setup cell prints each run's resolved configuration);
# * the **chain** at $T = 1$: the same head, one candidate per position, $K$ drafts every step;
# * the **early exit** at $T = 1$: an untrained draft made of the target's first layers, the
#   contrast.
#
# They store every speculative step as (drafted, accepted, emitted tokens) and, for a tree, which
# alternative was kept. Nothing here re-runs a model except the tokenizer, to print tokens. The
# prototype claimed acceptance rates of 0.68–0.84 by category; we show them only as **claimed by the
# prototype** (a different pair, gpt2 → gpt2-medium, and never measured by its code).
#
# From notebook 03 this page needs the runs and the difference between accepted / proposed and
# accepted / judged (its §1).

# %%
import html

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import HTML, display
from scipy import stats

from specdec_lib.bench.analysis import run_tree
from specdec_lib.costs import drafted_widths
from specdec_lib.figures.provenance import data_read
from specdec_lib.figures.style import COLORS, savefig
from specdec_lib.figures.words import span as rng_

pd.set_option("display.precision", 3)
EARLY, CHAIN, MAIN, GREEDY = figs.RUNS  # the runs' names on this page
results = CAMPAIGN.runs(figs.RUNS)  # refused if the runs come from two machines
MACHINE = CAMPAIGN.machine
CATEGORIES = list(figs.PROTOTYPE_CLAIM)
PROTOTYPE_CLAIM = figs.PROTOTYPE_CLAIM  # claimed by the prototype, for its own pair
depths = figs.depths_frame(results)  # one row per run, K, prompt and draft depth


def at_depth(name, depth, col="accepted"):
    # the rate at one depth, every K that drafts it pooled
    return figs.at_depth(depths, name, depth, col)


def tree_at(res, K):
    # the step's shape of a run at K: its tree, or the tree it tuned for K at start-up
    return run_tree(res["settings"], res.get("tuned_trees"), K)


def describe_run(res):
    s = res["settings"]
    trees = {tuple(tree_at(res, K)) for K in s["K"]}
    tree = next(iter(trees))
    shape = (
        ("chain" if tree == (1,) else f"tree {tree}") if len(trees) == 1 else "a tree tuned per K"
    )
    stop = ", stopped by confidence" if s.get("schedule") == "threshold" else ""
    return f"{s['draft']} draft, {shape}{stop}, {s['dtype']}, K = {min(s['K'])}..{max(s['K'])}"


def is_tree(name):
    res = results[name]
    return any(max(tree_at(res, K)) > 1 for K in res["settings"]["K"])


print(f"machine: {MACHINE}")
print(f"the campaign's code: commit {CAMPAIGN.commit}")
for name, res in results.items():
    prov = res["provenance"]
    print(f"{name}: {res['status']}; {describe_run(res)}; seed {prov['seed']}")

# %% [markdown]
# ## 1. Counting acceptances
#
# For every speculative cell (method `speculative`, one $K$, one prompt) the results hold, per step,
# the number of draft positions proposed and accepted. A step stops at its first rejection, so only
# $\min(\text{accepted} + 1, \text{proposed})$ positions are actually *judged*; accepted / judged,
# pooled over steps, estimates the per-position acceptance probability $\alpha$ of the theory
# (accepted / proposed would fall with $K$ for that reason alone; notebook 03, §1). In a tree a
# depth counts as accepted when any of its candidates is kept; a kept alternative has no children,
# so the step ends there and the next depth is not judged (`bench.depth_counts` counts so). We pool
# the counts per prompt category over all $K$.


# %%
def step_table(res):
    rows = []
    prompts = res["prompts"]
    for key, cell in res["cells"].items():
        method, K, p, rep = key.split("|")
        if method != "speculative":
            continue
        alt = cell.get("alt_index", [0] * len(cell["steps"]))
        for i, ((drafted, accepted, emitted), j) in enumerate(zip(cell["steps"], alt, strict=True)):
            rows.append(
                {
                    "K": int(K),
                    "prompt": int(p),
                    "category": prompts[int(p)]["category"],
                    "step": i,
                    "drafted": drafted,
                    "accepted": accepted,
                    "alternative": j,
                    "emitted": emitted,
                }
            )
    return pd.DataFrame(rows)


steps = {name: step_table(res) for name, res in results.items()}

# %%
# NBVAL_CHECK_OUTPUT
for name, df in steps.items():
    print(
        name,
        "| prompts per category:",
        df.groupby("category").prompt.nunique().to_dict(),
        "| accepted <= drafted in every step:",
        bool((df.accepted <= df.drafted).all()),
    )

# %% [markdown]
# ## 2. Acceptance by category
#
# Intervals: tokens from one prompt are not independent (a draft that is wrong once tends to stay
# wrong), so a binomial interval over tokens is too narrow. We give a 95 % interval from a bootstrap
# over *prompts*, which is honest about how few there are in a category, next to the Wilson
# interval over tokens.

# %%
rng = np.random.default_rng(0)


def by_category(name):
    per_prompt = depths[depths.run == name].groupby(["category", "prompt"])[["accepted", "judged"]]
    per_prompt = per_prompt.sum()
    rows = []
    for cat in CATEGORIES:
        acc, jud = per_prompt.loc[cat].accepted.values, per_prompt.loc[cat].judged.values
        k, n = int(acc.sum()), int(jud.sum())
        wilson = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        pick = rng.integers(0, len(acc), (2000, len(acc)))  # 2000 resamples of the prompts
        lo, hi = np.percentile(acc[pick].sum(axis=1) / jud[pick].sum(axis=1), [2.5, 97.5])
        rows.append(
            {
                "category": cat,
                "alpha": k / n,
                "accepted": k,
                "judged": n,
                "Wilson 95% (tokens)": f"[{wilson.low:.3f}, {wilson.high:.3f}]",
                "bootstrap 95% (prompts)": f"[{lo:.3f}, {hi:.3f}]",
                "lo": lo,
                "hi": hi,
                "claimed by the prototype": PROTOTYPE_CLAIM[cat],
            }
        )
    return pd.DataFrame(rows).set_index("category")


cat_tables = {name: by_category(name) for name in results}
for name, t in cat_tables.items():
    display(Markdown(f"**{name}** ({describe_run(results[name])}), all $K$ pooled"))
    display(t.drop(columns=["lo", "hi"]))

# %%
per_prompt = depths.groupby(["run", "category", "prompt"])[["accepted", "judged"]].sum()
per_prompt = per_prompt.reset_index()
per_prompt["alpha"] = per_prompt.accepted / per_prompt.judged
fig = figs.alpha_by_category(
    cat_tables, categories=CATEGORIES, claim=PROTOTYPE_CLAIM, per_prompt=per_prompt
)
savefig("04_alpha_by_category", fig)
# %% [markdown]
# ## 3. Acceptance by position within the draft
#
# $P(\text{accept the draft at depth } d \mid \text{depths } 1..d-1 \text{ accepted})$. The i.i.d.
# model behind $E = (1-\alpha^{K+1})/(1-\alpha)$ assumes it is the same at every position. Deep
# positions are reached rarely when $\alpha$ is small, so their estimates are noisy; the counts
# below list, for each run and $K$, how often each depth was reached and accepted.
#
# **The figure.** One panel per run, one colour per $K$. Each filled point is the acceptance at
# that depth with its 95 % Wilson interval over the judged drafts, drawn whole; depths reached fewer
# than 10 times are left out of the figure (the counts list them). In the tree panels a filled point
# counts a depth as accepted when any of its candidates is kept, and an open point at the depths
# with alternatives gives the chain's own token alone: the gap between them is what the alternatives
# add. Tokens of one prompt are not independent, so the intervals are, if anything, too narrow.

# %%
SHOW_K = (2, 4, 8)
MIN_REACHED = 10


def wilson(k, n):
    return stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=0.95, method="wilson")


rows = []
for name, res in results.items():
    d_run = depths[depths.run == name]
    for K in sorted(set(SHOW_K) & set(d_run.K)):
        tree = tree_at(res, K)
        pooled_K = d_run[d_run.K == K].groupby("depth")[["judged", "accepted", "chain_accepted"]]
        pooled_K = pooled_K.sum()
        line = (
            f"{name}, K = {K}: reached {pooled_K.judged.tolist()}, "
            f"accepted {pooled_K.accepted.tolist()}"
        )
        if is_tree(name):
            line += f", the chain's token accepted {pooled_K.chain_accepted.tolist()}"
        print(line)
        for depth, r in pooled_K.iterrows():
            if r.judged < MIN_REACHED:
                continue
            kinds = {"any candidate": r.accepted}
            if is_tree(name) and drafted_widths(K, tree)[depth - 1] > 1:
                kinds["the chain's token"] = r.chain_accepted
            for kind, k in kinds.items():
                ci = wilson(k, r.judged)
                rows.append(
                    {
                        "run": name,
                        "K": K,
                        "depth": depth,
                        "kind": kind,
                        "rate": k / r.judged,
                        "lo": ci.low,
                        "hi": ci.high,
                    }
                )
positions = pd.DataFrame(rows)

# %%
palette = [COLORS["target"], COLORS["draft"], COLORS["speculative"], COLORS["hf"]]
k_styles = {K: (palette[i], "osD^"[i]) for i, K in enumerate(sorted(positions.K.unique()))}
fig, axes = plt.subplots(2, 2, figsize=(10, 7.4), squeeze=False)
for ax, name in zip(axes.flat, results, strict=False):
    sub_run = positions[positions.run == name]
    ks = sorted(sub_run.K.unique())
    for j, K in enumerate(ks):
        color, marker = k_styles[K]
        shift = (j - (len(ks) - 1) / 2) * 0.09
        for kind, style in (("any candidate", "full"), ("the chain's token", "none")):
            d = sub_run[(sub_run.K == K) & (sub_run.kind == kind)]
            if d.empty:
                continue
            ax.errorbar(
                d.depth + shift + (0.03 if style == "none" else 0.0),
                d.rate,
                yerr=np.vstack([d.rate - d.lo, d.hi - d.rate]),
                fmt=marker,
                ls="-" if style == "full" else "none",
                mfc=color if style == "full" else "white",
                ms=5,
                capsize=2,
                color=color,
                label=f"K = {K}" if style == "full" else None,
            )
    top = min(1.02, 1.1 * float(sub_run.hi.max()))  # every interval drawn whole
    ax.set(
        xlabel="depth in the draft",
        title=f"{name}\n{describe_run(results[name])}",
        ylim=(0, top),
    )
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
handles = [
    plt.Line2D([], [], color=color, marker=marker, label=f"K = {K}")
    for K, (color, marker) in k_styles.items()
]
handles.append(
    plt.Line2D(
        [],
        [],
        color="grey",
        marker="o",
        mfc="white",
        ls="none",
        label="tree: the chain's token alone",
    )
)
fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9, frameon=False)
for row in axes:
    row[0].set_ylabel("P(accept | depth reached)")
for ax in axes.flat[len(results) :]:
    ax.set_visible(False)
fig.suptitle(
    "Acceptance by depth in the draft (error bars: 95% Wilson interval over judged drafts;\n"
    f"depths reached fewer than {MIN_REACHED} times left out)",
    fontsize=11,
)
fig.tight_layout(rect=(0, 0.05, 1, 1))
savefig("04_alpha_by_position", fig)
# %% [markdown]
# ## 4. Token by token
#
# A few prompts rendered from the stored steps at $K = 2$, $T = 1$: **accepted** draft tokens
# (green; in a tree, a kept alternative too), **corrected** tokens sampled from the residual after
# every candidate of a depth was rejected (orange), **bonus** tokens sampled from the target where
# nothing was drafted beyond the last accepted token (blue: after all $K$ drafts, or after a kept
# alternative, which has no children), and tokens of steps that drafted nothing (grey): the last
# token of each request ($k = \min(K, \text{remaining} - 1) = 0$) and, with the trained head, the
# first, since the head drafts from the target's features and has none before the target's first
# pass. Every token is exactly a sample of the target; the colours only say which path produced
# it. The figure at the end of this section shows the same colours, one box per token.

# %%
from specdec_lib.models import load_tokenizer

tokenizer = load_tokenizer("default")
KIND_COLORS = {kind: COLORS[kind] for kind in figs.TOKEN_KINDS}
K_VIEW = 2  # a K that every run shown measured
SHOWN = [0, 4, 8, 12, 16]
VIEW_RUNS = (EARLY, MAIN)


def token_kinds(cell):
    out = []
    alt = cell.get("alt_index", [0] * len(cell["steps"]))
    for (drafted, accepted, emitted), j in zip(cell["steps"], alt, strict=True):
        for i, tok in enumerate(emitted):
            if drafted == 0:  # a step that drafted nothing (the last token; the head's first)
                kind = "no draft"
            elif i < accepted:
                kind = "accepted"
            else:  # nothing drafted beyond a kept alternative or the last draft: a bonus
                kind = "bonus" if (accepted == drafted or j > 0) else "corrected"
            out.append((tok, kind))
    return out


def render(res, prompt, K=K_VIEW):
    cell = res["cells"][f"speculative|{K}|{prompt}|0"]
    spans = []
    for tok, kind in token_kinds(cell):
        text = html.escape(tokenizer.decode([tok])).replace("\n", "↵<br>")
        spans.append(f'<span style="background:{KIND_COLORS[kind]};padding:1px 0">{text}</span>')
    head = html.escape(res["prompts"][prompt]["text"]).replace("\n", "<br>")
    return f"<p><b>[{res['prompts'][prompt]['category']}]</b> <i>{head}</i>{''.join(spans)}</p>"


legend = " ".join(
    f'<span style="background:{c};padding:2px 6px">{k}</span>' for k, c in KIND_COLORS.items()
)
for name in VIEW_RUNS:
    display(Markdown(f"**{name}** ({describe_run(results[name])}), $K = {K_VIEW}$"))
    display(HTML(legend + "".join(render(results[name], p) for p in SHOWN)))

# %% [markdown]
# Which tokens does the draft get right? The accepted draft tokens of the recommended
# configuration's $T = 1$ run, all $K$ pooled, most frequent first:

# %%
from collections import Counter

accepted_tokens = Counter()
for key, cell in results[MAIN]["cells"].items():
    if key.startswith("speculative|"):
        for _drafted, accepted, emitted in cell["steps"]:
            accepted_tokens.update(emitted[:accepted])
total = sum(accepted_tokens.values())
top = pd.DataFrame(
    [(repr(tokenizer.decode([t])), n, n / total) for t, n in accepted_tokens.most_common(15)],
    columns=["token", "times accepted", "share of accepted"],
)
print(f"{total} accepted draft tokens, {len(accepted_tokens)} distinct")
display(top)

# %% [markdown]
# The same view as a figure for reports: one panel per run, one row per prompt (labelled by its
# category), one box per emitted token, coloured by the path that produced it as above.

# %%
views = {
    f"Which path produced each token ({name}: {results[name]['settings']['draft']} draft, "
    f"K = {K_VIEW})": [
        (
            results[name]["prompts"][p]["category"],
            [
                kind
                for _, kind in token_kinds(results[name]["cells"][f"speculative|{K_VIEW}|{p}|0"])
            ],
        )
        for p in SHOWN
    ]
    for name in VIEW_RUNS
}
n_tokens = max(results[name]["settings"]["max_new_tokens"] for name in VIEW_RUNS)
fig = figs.token_view(views, n_tokens=n_tokens)
savefig("04_token_view", fig)
# %% [markdown]
# ## 5. Discussion
#
# The figures quoted below are computed from the tables above.

# %%
n_per_cat = sorted({n for df in steps.values() for n in df.groupby("category").prompt.nunique()})
lines = [
    f"""**What we measured.** With the untrained early exit the acceptance rate per judged draft
position is {rng_(cat_tables[EARLY].alpha)} across the five categories ($T = 1$, all $K$ pooled;
the table in §2), far from the {rng_(PROTOTYPE_CLAIM.values())} claimed by the prototype for its
(different) pair: almost every step is one corrected token (the token view)."""
]
parts = []
for name in (CHAIN, MAIN, GREEDY):
    t = cat_tables[name]
    lo_cat, hi_cat = t.alpha.idxmin(), t.alpha.idxmax()
    parts.append(
        f"{name}: {rng_(t.alpha)}, {lo_cat} lowest ({t.alpha[lo_cat]:.2f}), "
        f"{hi_cat} highest ({t.alpha[hi_cat]:.2f})"
    )
lines.append(
    f"""The trained head (notebook 05) accepts, per judged draft depth, all $K$ pooled,
{"; ".join(parts)}. Read the differences between categories against the prompt bootstrap
intervals of §2 ({rng_(n_per_cat, "d")} prompts each)."""
)
pos = []
for name in (MAIN, GREEDY):
    pos.append(
        f"{name}: {at_depth(name, 1):.2f} at depth 1 and {at_depth(name, 2):.2f} at depth 2, the "
        f"chain's token alone {at_depth(name, 1, 'chain_accepted'):.2f} and "
        f"{at_depth(name, 2, 'chain_accepted'):.2f}"
    )
lines.append(
    f"""**Along the draft.** The chain accepts {at_depth(CHAIN, 1):.2f} at its first position and
{at_depth(CHAIN, 2):.2f} at its second (every $K$ that drafts the position pooled). The tree
keeps a candidate at least as often as the chain's token alone is accepted ({"; ".join(pos)}): the
difference is what its alternatives add (none at a depth where the tuned tree has no
alternatives), and the acceptance still falls from the first depth to the second.
The head builds its first draft position from the target's features and each later one from its
own (notebook 05)."""
)
display(Markdown("\n\n".join(lines)))

dtypes = sorted({res["settings"]["dtype"] for res in results.values()})
same_dtype = (
    f"Every run is in {dtypes[0]}."
    if len(dtypes) == 1
    else f"The runs differ in dtype ({', '.join(dtypes)}) as well as in draft."
)
display(
    Markdown(
        f"""**Caveats.** {rng_(n_per_cat, "d")} prompts per category and
{results[MAIN]["settings"]["max_new_tokens"]} tokens each: the prompt bootstrap intervals are wide.
{same_dtype} The recommended runs and the chain differ in the head's weights as well as in the
step's shape ({results[MAIN]["settings"]["draft"]} against {results[CHAIN]["settings"]["draft"]}).
Deep positions are reached a handful of times at the early exit's $\\alpha$.

**What's next.** Notebook 05: how the trained draft was made, and how it compares with the other
ways to draft."""
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
