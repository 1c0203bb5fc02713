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
# # 05 · Drafting strategies: how a draft is made, and how to choose one
#
# **Aim.** Notebooks 03 and 04 measured speculative decoding with the default pair's untrained
# early-exit draft: it is exact, and it is slower than decoding without it, because the draft is
# almost always wrong ($\alpha < 0.1$). Speculative decoding pays only when the draft agrees with the
# target often (high $\alpha$) and costs little (low $c$). No packaged small model shares SmolLM2's
# tokenizer, so this notebook makes one — offline, on this CPU — and compares it with the other ways
# to draft:
#
# | drafter | what it is | cost $c$ |
# |---|---|---|
# | early exit | the target's first 4 layers and its own head, untrained | ≈ 0.3 |
# | prompt lookup (n-gram) | copy what followed the latest earlier occurrence of the last 1-3 tokens | ≈ 0 |
# | distilled layers | a small LM: the target's frozen embedding and head around 2 of its layers, distilled | ≈ 0.1 |
# | feature-level head | one Llama layer reading the target's hidden state and the next token (EAGLE) | ≈ 0.07 |
#
# and, on top of any of them, a **dynamic draft length** (Hugging Face's heuristic schedule and a
# confidence threshold) next to a fixed $K$.
#
# **Theory (Leviathan et al. 2022).** With acceptance rate $\alpha$ at every position, a step with
# $K$ drafts emits on average $\tau(K) = (1 - \alpha^{K+1}) / (1 - \alpha)$ tokens, and costs
# $K\,t_\text{draft} + t_\text{target}(K+1)$. Relative to one target pass per token, the speedup is
#
# $$S(K) = \frac{\tau(K)}{K c + t_\text{target}(K+1) / t_\text{target}(1)}, \qquad c = t_\text{draft} / t_\text{target}(1).$$
#
# So a draft has two numbers, $\alpha$ and $c$, and the machine has one curve, $t_\text{target}(n)$:
# how much a pass over $n$ tokens costs more than a pass over one. In float32 on this CPU a 2-token
# pass costs about 1.6 times a 1-token pass; in bfloat16 about 1.03 times (`../shared/MEASURED.md`,
# re-measured below). That is the lever that makes a CPU speedup possible at all.
#
# **How the draft is trained.**
#
# 1. *On-policy data* (DistillSpec, Zhou et al. 2023, arXiv 2310.08461): the target samples
#    continuations of 400 hand-written prompts at $T = 1$, in bfloat16, in batches
#    (`python -m specdec_lib gen-data`). Only the token ids are committed (`data/drafter/onpolicy/`,
#    uint16).
# 2. *Teacher pass*: `train-drafter` teacher-forces the target over the stored ids and keeps its
#    distribution $p_j$ (top 64 tokens) and hidden states at every position, in a local cache.
# 3. *Distillation*: the draft's $q_j$ is trained towards $p_j$ with a cross-entropy plus
#    $1 - \sum_x \min(p_j(x), q_j(x))$, the probability of a rejection — the quantity speculative
#    decoding pays for. The draft proposes only the 8,192 tokens that carry most of the target's
#    probability: $q = 0$ elsewhere, which is still exact (a token the draft never proposes is emitted
#    through the residual) and makes the draft's output layer six times cheaper.
# 4. *Measurement*: $\alpha$ by decoding on 45 held-out prompts (`eval-drafter`), and speed by the
#    benchmark (`bench --draft trained`), never from the training loss.

# %%
import numpy as np
import pandas as pd
from IPython.display import display

from specdec_lib import plotting
from specdec_lib.config import DATA_DIR, quick
from specdec_lib.plotting import savefig
from specdec_lib.results import read_json
from specdec_lib.theory import expected_tokens_per_step
from specdec_lib.training import load_manifest, summary

pd.set_option("display.precision", 3)
QUICK = quick()
DRAFTER = DATA_DIR / "drafter"
EXPERIMENTS = DRAFTER / "experiments"
print("quick mode:", QUICK)

# %% [markdown]
# ## 1. The data: on-policy samples from the target
#
# `python -m specdec_lib gen-data` samples continuations of the 400 training prompts from the target
# in bfloat16, 64 prompts at a time, up to 256 new tokens each, at $T = 1$ with no top-k (the plain
# law the drafter must match). The first shards were made with transformers' `generate`; the rest with
# the library's own loop (`training.data.sample_batch`), which drops a row from the batch (and its KV cache)
# as soon as it emits EOS instead of padding it to the end: with an instruct model fed raw prompts,
# many rows stop early (some at once), and `generate` kept paying for them. Both sample the target's
# law (the own loop is tested against the exact law on the tiny models, with rows leaving the batch).

# %%
manifest = load_manifest(DRAFTER / "onpolicy")
shards = pd.DataFrame(manifest["shards"])
shards["tokens/s"] = shards.generated_tokens / shards.seconds
by_sampler = shards.groupby("sampler").agg(
    shards=("shard", "count"), tokens=("generated_tokens", "sum"), seconds=("seconds", "sum")
)
by_sampler["tokens/s"] = by_sampler.tokens / by_sampler.seconds
s = summary(DRAFTER / "onpolicy")
by_sampler

# %%
# NBVAL_CHECK_OUTPUT
print("on-policy data of at least 1M generated tokens:", s["generated_tokens"] >= 1_000_000)
print("every shard records its sampler:", set(shards.sampler) <= {"hf", "own"})

# %%
print(
    f"{s['generated_tokens']:,} generated tokens in {s['sequences']:,} sequences "
    f"({s['shards']} shards), {s['seconds'] / 3600:.2f} h of generation"
)


# %% [markdown]
# ## 2. Which architecture? A pilot at equal data
#
# Before scaling the data, four kinds of draft were trained on the same first 11 shards (about 114k
# generated tokens; the 12th shard is held out) and measured by decoding on the 45 held-out prompts
# ($K = 1$, $T = 1$, 48 new tokens each; every proposal is judged, so $lpha$ is the per-token
# acceptance rate), with their cost $c$ measured in bfloat16 through the same `Drafter` interface the
# decoder uses:
#
# * **feature head, last layer**: one Llama layer (initialised from the target's last layer) reading
#   the target's last hidden state and the next token (EAGLE);
# * **feature head, fused**: the same, reading target layers 2, 14 and 29, fused (EAGLE-3's idea);
# * **layers 0 + 29** and **layers 0 + 1 + 29**: a small LM on tokens made of copies of those target
#   layers between the target's frozen embedding and output rows (the "target-initialised layers"
#   draft of `../shared/MEASURED.md`).
#
# The first two pilot runs (`feat_last`, `feat_fused`) fed the target's raw hidden state to the head;
# it has a few dimensions with values in the hundreds (RMS ≈ 100s against ≈ 1 for the token
# embeddings), which drowned the token. The head now RMS-normalises both inputs and brings them back
# to the residual stream's scale (`featn_*`); the records keep both (`feat_fused` has a training
# record only: its weights predate the change and no longer load). `feat_last`'s cost was measured
# before the drafter learnt to warp only its 8,192 tokens (about 0.01 of $c$ more).

# %%
def load_experiments(prefix=""):
    rows, curves = [], {}
    for path in sorted(EXPERIMENTS.glob(f"{prefix}*.eval.json")):
        name = path.name.removesuffix(".eval.json")
        ev = read_json(path)
        tr = read_json(EXPERIMENTS / f"{name}.train.json")
        st = tr["settings"]
        r1 = ev["by_temperature"]["1"]
        rows.append(
            {
                "draft": name,
                "arch": st["arch"] if st["arch"] == "layers" else f"feature {st['feature_layers']}",
                "train tokens": tr["train_tokens"],
                "epochs": st["epochs"],
                "lr": st["lr"],
                "alpha (T=1, decoding)": r1["alpha"],
                "proposals": r1["proposed"],
                "alpha bound (top-64, held-out shard)": tr["history"][-1]["eval_alpha"],
                "c (bf16)": ev["costs"]["c"],
                "t_target(2)/t_target(1)": ev["costs"]["t_target_s"][1]
                / ev["costs"]["t_target_s"][0],
            }
        )
        curves[name] = pd.DataFrame(tr["history"])
    return pd.DataFrame(rows).set_index("draft"), curves


pilot, pilot_curves = load_experiments("pilot_")
pilot["S(K=1) predicted"] = [
    expected_tokens_per_step(r["alpha (T=1, decoding)"], 1)
    / (r["c (bf16)"] + r["t_target(2)/t_target(1)"])
    for _, r in pilot.iterrows()
]
pilot

# %%
# NBVAL_CHECK_OUTPUT
best = pilot["alpha (T=1, decoding)"].idxmax()
print("architectures compared at equal data:", sorted(set(pilot.arch)))
print("highest acceptance in the pilot:", best)

# %%
fig = plotting.pilot_curves(
    {name.removeprefix("pilot_"): h for name, h in pilot_curves.items()},
    title="Pilot: acceptance on the held-out shard during training (114k tokens)",
)
savefig("05_pilot_curves", fig);

# %% [markdown]
# **Reading the pilot.** At equal data and equal training steps:
#
# * normalising the head's inputs is what made the feature head work at all (`featn_last` against
#   `feat_last`, which also had fewer epochs and a lower learning rate);
# * reading three target layers (2, 14, 29) beats reading the last one, at the same cost: the fusion
#   is one extra matrix product per drafted token;
# * the token-level drafts built from target layers accept less *and* cost more: they must rebuild
#   the context from token embeddings with two or three layers, where the feature head starts from
#   the target's own summary of it. (`../shared/MEASURED.md` saw the opposite order with 51k tokens
#   and the raw, unnormalised head: 0.30 against 0.26; with normalised inputs the head wins.)
#
# The chosen architecture is therefore the **fused feature head** (one layer, target layers 2, 14,
# 29). Its held-out acceptance flattened as the learning rate decayed, while the acceptance on its
# training batches kept climbing above it (the records' `train_alpha` against `eval_alpha`): with
# 114k tokens the head starts to learn its data by heart. The next step is the data.

# %% [markdown]
# ## 3. The drafter trained on all the data
#
# The chosen head, trained on the full on-policy set: every shard but the last two (188 shards,
# about 2M positions; the last two are held out), 3 epochs, peak learning rate $10^{-3}$, 8 sequences
# per step (the defaults of `train-drafter`). The data was doubled once: the head trained on the first
# 92 shards (982k positions) was the committed drafter before, and is kept as a point of the learning
# curve (§4, `lc_92shards`).
#
# ```bash
# python -m specdec_lib train-drafter --feature-layers 2 14 -1 --epochs 3 --lr 1e-3 --eval-shards 2 \
#     --out data/drafter/feature_head.safetensors
# python -m specdec_lib eval-drafter --draft data/drafter/feature_head.safetensors \
#     --temperatures 1 0.7 0 --out data/results/drafter_eval_feature_head.json --card data/drafter/feature_head.md
# ```
#
# The weights (`data/drafter/feature_head.safetensors`, only the head's own tensors) and the model card
# (`data/drafter/feature_head.md`) are committed; `load_pair("default")` uses them (its default
# draft, `draft="trained"`). The curve below is the held-out
# $\sum_x \min(p, q)$ over the target's top 64 tokens during training (a bound computed from the
# cached teacher, not a decoding measurement); the table is measured by decoding.

# %%
RESULTS = DATA_DIR / "results"
full_train = read_json(DRAFTER / "feature_head.train.json")
full_eval = read_json(RESULTS / "drafter_eval_feature_head.json")
hist = pd.DataFrame(full_train["history"])
steps_per_epoch = hist.step.max() / full_train["settings"]["epochs"]
hist["tokens seen"] = hist.step / steps_per_epoch * full_train["train_tokens"]
prov = full_train["provenance"]
print(
    f"trained on {full_train['train_tokens']:,} positions ({full_train['train_sequences']:,} sequences), "
    f"{full_train['settings']['epochs']} epochs, {hist.seconds.max() / 60:.0f} min of training on "
    f"{prov['cpu']} ({prov['torch_threads']} threads), torch {prov['torch']}, commit {prov['git_commit'][:12]}, {prov['date'][:10]}"
)

by_T = pd.DataFrame(
    {
        T: {
            "alpha (K=1, decoding)": r["alpha"],
            "accepted": r["accepted"],
            "proposed": r["proposed"],
        }
        for T, r in full_eval["by_temperature"].items()
    }
).T.rename(index={"1": "T = 1", "0.7": "T = 0.7", "0": "greedy"})
by_T["c (bf16)"] = full_eval["costs"]["c"]
by_T

# %%
# NBVAL_CHECK_OUTPUT
alpha_T1 = full_eval["by_temperature"]["1"]["alpha"]
print(
    "the issue's acceptance target (alpha >= 0.45 at K = 1, T = 1, held-out prompts) met:",
    alpha_T1 >= 0.45,
)
print("the issue's cost target (c <= 0.1) met:", full_eval["costs"]["c"] <= 0.1)

# %%
fig = plotting.full_training(hist, alpha_decoding=alpha_T1)
savefig("05_full_training", fig);

# %% [markdown]
# ## 4. Learning curves: acceptance against data and compute
#
# The same recipe on the first 11 shards (the pilot, 114k positions), the first 30 and 92 shards
# (`data/drafter/experiments/lc_*`) and all 188 training shards (the committed drafter), each measured
# by decoding on the held-out prompts at $K = 1$, $T = 1$ (the pilot with 48 new tokens per prompt,
# the others with 64). The second panel is the compute axis: held-out acceptance against training time
# for every run, each on its own held-out shards (the pilot's: shard 11; `lc_*`: shards 92-93, the
# last two when they were trained; the full run: shards 188-189), so the panels' levels differ a
# little by shard as well as by run.

# %%
points = [
    {
        "run": "pilot (11 shards)",
        "train tokens": pilot.loc["pilot_featn_fused", "train tokens"],
        "alpha": pilot.loc["pilot_featn_fused", "alpha (T=1, decoding)"],
    }
]
lc_curves = {"pilot (11 shards)": pilot_curves["pilot_featn_fused"]}
for path in sorted(EXPERIMENTS.glob("lc_*.eval.json")):
    name = path.name.removesuffix(".eval.json")
    tr = read_json(EXPERIMENTS / f"{name}.train.json")
    name = name.removeprefix("lc_").replace("shards", " shards")
    points.append(
        {
            "run": name,
            "train tokens": tr["train_tokens"],
            "alpha": read_json(path)["by_temperature"]["1"]["alpha"],
        }
    )
    lc_curves[name] = pd.DataFrame(tr["history"])
# Shards by number where the record has them; older records: every shard but the held-out ones.
n_full = len(
    full_train.get("train_shards") or range(s["shards"] - full_train["settings"]["eval_shards"])
)
points.append(
    {
        "run": f"full ({n_full} shards)",
        "train tokens": full_train["train_tokens"],
        "alpha": alpha_T1,
    }
)
lc_curves[f"full ({n_full} shards)"] = hist
curve = pd.DataFrame(points).sort_values("train tokens").set_index("run")

fig = plotting.learning_curves(curve, lc_curves)
savefig("05_learning_curves", fig)
curve

# %% [markdown]
# **Capacity against data.** The same recipe with two head layers instead of one, on the same 982k
# positions as `lc_92shards` (`train-drafter --n-layers 2 --max-shards 92`;
# `data/drafter/experiments/two_layers.*`): does a bigger head buy more acceptance than it costs?

# %%
two = EXPERIMENTS / "two_layers.eval.json"
if two.exists():
    ev2, tr2 = read_json(two), read_json(EXPERIMENTS / "two_layers.train.json")
    ev1, tr1 = (
        read_json(EXPERIMENTS / "lc_92shards.eval.json"),
        read_json(EXPERIMENTS / "lc_92shards.train.json"),
    )
    assert tr1["train_tokens"] == tr2["train_tokens"]  # equal data
    cap = pd.DataFrame(
        [
            {
                "head": "1 layer (lc_92shards)",
                "alpha (T=1, decoding)": ev1["by_temperature"]["1"]["alpha"],
                "bound (held-out)": tr1["history"][-1]["eval_alpha"],
                "c (bf16)": ev1["costs"]["c"],
                "training min": tr1["history"][-1]["seconds"] / 60,
            },
            {
                "head": "2 layers",
                "alpha (T=1, decoding)": ev2["by_temperature"]["1"]["alpha"],
                "bound (held-out)": tr2["history"][-1]["eval_alpha"],
                "c (bf16)": ev2["costs"]["c"],
                "training min": tr2["history"][-1]["seconds"] / 60,
            },
        ]
    ).set_index("head")
    t = np.array(ev1["costs"]["t_target_s"])
    cap["S(K=1) predicted"] = [
        (1 + r["alpha (T=1, decoding)"]) / (r["c (bf16)"] + t[1] / t[0]) for _, r in cap.iterrows()
    ]
    display(cap)
else:
    print("not measured yet:", two.name)

# %% [markdown]
# ## 5. Every drafter, at $T = 1$, $0.7$ and greedy
#
# $\alpha$ by decoding at $K = 1$ on the 45 held-out prompts (every proposal judged) and $c$ measured
# in bfloat16 through the `Drafter` interface, for the untrained early exit, prompt lookup (n-gram),
# and the trained head (`eval-drafter --draft early-exit | ngram | <weights>`; the early exit with 32
# new tokens per prompt, the others with 64). The distilled-layers draft of the pilot is shown at
# $T = 1$ only (its weights were an experiment's and are not kept).
#
# Prompt lookup is a different kind of draft: it proposes only when the last tokens occurred earlier
# in the context, so it drafts on a fraction of the steps, and $\alpha$ is over the steps where it
# proposed (the `proposed` counts of `drafters`). Its $c$ is a Python dictionary lookup.

# %%
EVALS = {
    "early exit (untrained)": "drafter_eval_early_exit.json",
    "prompt lookup (n-gram)": "drafter_eval_ngram.json",
    f"feature head (trained, {full_train['train_tokens'] / 1e6:.1f}M positions)": "drafter_eval_feature_head.json",
}


def eval_rows(files):
    # One row per (drafter, temperature) from eval-drafter result files; section 9 reuses it.
    rows = []
    for name, fname in files.items():
        if not (RESULTS / fname).exists():
            print(f"{name}: not measured yet ({fname})")
            continue
        ev = read_json(RESULTS / fname)
        for T, r in ev["by_temperature"].items():
            rows.append(
                {
                    "drafter": name,
                    "T": {"1": "1.0", "0.7": "0.7", "0": "greedy"}[T],
                    "alpha": r["alpha"],
                    "proposed": r["proposed"],
                    "c (bf16)": ev["costs"]["c"],
                }
            )
    return rows


def alpha_table(rows):
    df = pd.DataFrame(rows)
    return df.pivot_table(index="drafter", columns="T", values="alpha").join(
        df.groupby("drafter")["c (bf16)"].first()
    )


rows = eval_rows(EVALS)
layers = pilot.loc["pilot_layers_0_1_29"]
rows.append(
    {
        "drafter": "distilled layers 0+1+29 (pilot, 114k tokens)",
        "T": "1.0",
        "alpha": layers["alpha (T=1, decoding)"],
        "proposed": layers["proposals"],
        "c (bf16)": layers["c (bf16)"],
    }
)
drafters = pd.DataFrame(rows)
alpha_table(rows)

# %% [markdown]
# What each drafter's $\alpha$ and $c$ predict, with the i.i.d. model of the introduction and the
# bfloat16 pass costs measured with the trained head's evaluation ($t_\text{target}(n)$ for
# $n = 1..6$). It is optimistic in two ways: for prompt lookup it assumes a draft at every step, and
# for the trained head it assumes the acceptance of the first draft position at every position,
# while the head accepts less further along (0.45, 0.38, 0.41 at positions 1-3 at $K = 3$:
# `data/results/drafter_eval_feature_head_K3.json`). Section 6 measures.

# %%
t_bf16 = np.array(full_eval["costs"]["t_target_s"])
Ks = np.arange(1, len(t_bf16))
t1 = drafters[drafters["T"] == "1.0"].set_index("drafter")
predicted = pd.DataFrame(
    [
        {
            "drafter": f"{name} (α = {r.alpha:.2f}, c = {r['c (bf16)']:.2f})",
            "K": k,
            "speedup": expected_tokens_per_step(r.alpha, int(k))
            / (k * r["c (bf16)"] + t_bf16[k] / t_bf16[0]),
        }
        for name, r in t1.iterrows()
        for k in Ks
    ]
)
fig = plotting.predicted_by_drafter(predicted)
savefig("05_predicted_by_drafter", fig);

# %% [markdown]
# ## 6. Predicted and measured speedup against $K$ (bfloat16, this CPU)
#
# `python -m specdec_lib bench --dtype bfloat16 --draft trained|ngram` on the 20 benchmark prompts of
# notebook 03 (50 new tokens each), with the autoregressive baseline in the same dtype and the same
# process, and transformers' own `generate()` as a second baseline. Hugging Face's assisted generation
# runs only where it can drive the same draft: prompt lookup (`prompt_lookup_num_tokens`); it has no
# way to run a feature-level head.

# %%
from specdec_lib.bench import per_prompt_frame, runs_frame

BENCH = {
    "trained, T = 1.0": "bench_default_trained_bfloat16_T1.json",
    "trained, greedy": "bench_default_trained_bfloat16_greedy.json",
    "n-gram, T = 1.0": "bench_default_ngram_bfloat16_T1.json",
}
bench = {name: read_json(RESULTS / f) for name, f in BENCH.items() if (RESULTS / f).exists()}
frames = {name: runs_frame(res) for name, res in bench.items()}
for name, res in bench.items():
    p = res["provenance"]
    print(
        f"{name}: {res['status']}, {p['date'][:16]} on {p['cpu']} ({p['torch_threads']} threads), commit {p['git_commit'][:12]}"
    )
summary_rows = []
for name, df in frames.items():
    spec = df[df.method == "speculative"]
    best = spec.loc[spec.speedup.idxmax()]
    hf_ar = df[df.method == "hf_autoregressive"].speedup
    summary_rows.append(
        {
            "run": name,
            "best K": int(best.K),
            "speedup": best.speedup,
            "predicted": best.predicted_speedup,
            "alpha_iid": best.alpha_iid,
            "tokens/step": best.tau,
            "HF generate() / ours (AR)": float(hf_ar.iloc[0]) if len(hf_ar) else np.nan,
        }
    )
best_table = pd.DataFrame(summary_rows).set_index("run")
best_table

# %%
panels = {}
for name, res in bench.items():
    df, pp = frames[name], per_prompt_frame(res)
    spec = df[df.method == "speculative"].set_index("K")
    band = pp[pp.method == "speculative"].groupby("K")["speedup"].quantile([0.25, 0.75]).unstack()
    hf = df[df.method == "hf_assisted"].set_index("K")
    panels[name] = spec[["speedup", "predicted_speedup"]].assign(
        q25=band[0.25], q75=band[0.75], hf_speedup=hf.speedup
    )
fig = plotting.speedup_vs_K(
    panels,
    hf_label="HF assisted (prompt lookup)",
    target=1.3,
    ylabel="speedup over autoregressive (bf16)",
    ylim=(0, None),
    legend_loc="best",
    panel_size=(5.2, 4),
    suptitle="SmolLM2-135M-Instruct on this CPU, bfloat16: speculative vs autoregressive, same process",
)
savefig("05_speedup_vs_K", fig);

# %%
# NBVAL_CHECK_OUTPUT
best_trained = best_table.loc["trained, T = 1.0", "speedup"]
print(
    "one candidate per position, bf16 head weights: the issue's speed target "
    "(>= 1.3x over autoregressive at the best K, bf16, T = 1) met:",
    best_trained >= 1.3,
)
print("(two candidates and int8 head weights: section 9)")
print(
    "speculative decoding with the trained draft faster than autoregressive at T = 1:",
    best_trained > 1.0,
)

# %% [markdown]
# ## 7. The dtype: float32 against bfloat16
#
# The benchmark measures, in its own process, the cost of a cached target pass over $n$ tokens. In
# float32 (notebook 03's run) a pass over 2 tokens costs far more than one; in bfloat16 (this CPU has
# avx512_bf16) the pass is memory-bound and a few more tokens are almost free — which is what lets a
# draft with $\alpha \approx 0.4$ pay at all. Both curves below were measured with one thread
# (float32: notebook 03's $T = 1$ run, $n = 1..9$; bfloat16: the trained pair's one-thread run,
# $n = 1..4$); the one-token pass itself is about 2.1 times faster in bfloat16.

# %%
# Both with one thread: notebook 03's float32 run and the trained pair's one-thread bf16 run.
fp32_run = read_json(RESULTS / "bench_default_float32_T1.json")
bf16_run = read_json(RESULTS / "bench_default_trained_bfloat16_T1_1thread.json")
assert fp32_run["provenance"]["torch_threads"] == bf16_run["provenance"]["torch_threads"] == 1
fp32, bf16 = fp32_run["costs"], bf16_run["costs"]
costs = pd.DataFrame(
    {
        "float32 (ms)": pd.Series(fp32["t_target_s"]) * 1e3,
        "bfloat16 (ms)": pd.Series(bf16["t_target_s"]) * 1e3,
    }
)
costs.index = costs.index + 1
costs.index.name = "tokens in the pass"
costs["float32 / one token"] = costs["float32 (ms)"] / costs["float32 (ms)"].iloc[0]
costs["bfloat16 / one token"] = costs["bfloat16 (ms)"] / costs["bfloat16 (ms)"].iloc[0]
fig = plotting.dtype_pass_costs(costs)
savefig("05_dtype_pass_costs", fig)
costs.dropna().round(3)

# %% [markdown]
# The number of threads matters too: the same trained pair with one thread instead of two
# (`bench ... --threads 1 --K 1 2 3 --methods autoregressive speculative`).

# %%
one = RESULTS / "bench_default_trained_bfloat16_T1_1thread.json"
if one.exists():
    r1 = read_json(one)
    two = bench["trained, T = 1.0"]
    rows = []
    for label, res in (("2 threads", two), ("1 thread", r1)):
        df = runs_frame(res)
        sp = df[df.method == "speculative"].set_index("K")
        rows.append(
            {
                "threads": label,
                "t_target(1) ms": res["costs"]["t_target_s"][0] * 1e3,
                "c": res["costs"]["c"],
                "AR tokens/s": float(df[df.method == "autoregressive"].tokens_per_s.iloc[0]),
                **{f"speedup K={k}": sp.speedup.get(k, np.nan) for k in (1, 2, 3)},
            }
        )
    display(pd.DataFrame(rows).set_index("threads"))
else:
    print("not measured yet:", one.name)

# %% [markdown]
# ## 8. Dynamic against fixed draft length
#
# Two schedules on top of the trained head, both exact (the length of a draft is a stopping time of
# the draft's own randomness): Hugging Face's heuristic (start at $K$, +2 after a fully accepted step,
# −1 otherwise) and a confidence threshold (draft up to $K$, stop after a draft token with
# $q(x) < 0.4$, HF's default `assistant_confidence_threshold`, and 0.2). Same prompts; each run has
# its own autoregressive baseline, measured in the same process; speedup against it:
#
# ```bash
# python -m specdec_lib bench --draft trained --dtype bfloat16 --schedule heuristic --K 1 3 --methods autoregressive speculative
# python -m specdec_lib bench --draft trained --dtype bfloat16 --schedule threshold --K 3 5 --methods autoregressive speculative
# python -m specdec_lib bench --draft trained --dtype bfloat16 --schedule threshold --threshold 0.2 --K 2 3 \
#     --methods autoregressive speculative --out data/results/bench_default_trained_threshold0.2_bfloat16_T1.json
# ```

# %%
DYN = {
    "fixed K": "bench_default_trained_bfloat16_T1.json",
    "heuristic schedule (K = initial)": "bench_default_trained_heuristic_bfloat16_T1.json",
    "confidence threshold 0.4 (K = maximum)": "bench_default_trained_threshold_bfloat16_T1.json",
    "confidence threshold 0.2 (K = maximum)": "bench_default_trained_threshold0.2_bfloat16_T1.json",
}
dyn_rows = []
for name, f in DYN.items():
    if not (RESULTS / f).exists():
        print(f"{name}: not measured yet ({f})")
        continue
    df = runs_frame(read_json(RESULTS / f))
    for _, r in df[df.method == "speculative"].iterrows():
        dyn_rows.append(
            {
                "schedule": name,
                "K": int(r.K),
                "speedup": r.speedup,
                "tokens/step": r.tau,
                "alpha": r.alpha,
            }
        )
dynamic = pd.DataFrame(dyn_rows)
dynamic.pivot_table(index="K", columns="schedule", values="speedup")

# %% [markdown]
# ## 9. Several candidates for the first position
#
# At $K = 1$ the step's target pass checks one draft token; a pass over 3 tokens costs about the same
# as over 2 in bfloat16 (§7). So check *two* candidates for the first position in the same pass, side
# by side (each sees the prefix, not the other: a tree-shaped attention mask, one shared position),
# and try them in turn — **recursive rejection** (SpecInfer, Miao et al. 2023; drawn without
# replacement as in Jeon et al. 2024):
#
# $$p_1 = p;\quad c_i \sim q_i:\ \text{accept with } \min\Big(1, \frac{p_i(c_i)}{q_i(c_i)}\Big),\ \text{else } p_{i+1} = \text{norm}\big(\max(0, p_i - q_i)\big);\quad \text{after the last: sample } p_{m+1}.$$
#
# Each stage is one ordinary speculative-sampling step whose target is $p_i$; by induction from the
# last stage back, stage $i$ emits a token with law $p_i$ whatever $q_i$ is (it may depend on the
# earlier candidates), so the token emitted has law $p$. The decoder draws $c_2$ from the draft's
# $q$ with $c_1$ removed (renormalised): a token already rejected has $p_2 = 0$ and would be a wasted
# try. Under greedy decoding $q_i$ is a point mass on the draft's $i$-th best token, the same rule.
# When an alternative is accepted, the target's pass already holds the law of the token after it:
# a bonus token, as after a fully accepted chain. With $K > 1$ the chain continues from $c_1$ only.
#
# The exact law, by enumerating every ordered draw (`stats.exact_candidates_law`, which runs the
# decoder's own stage functions through `candidates.candidate_stage`), is $p$; with the prototype's correction
# in place of the residual it is not:

# %%
# NBVAL_CHECK_OUTPUT
import torch

from specdec_lib.sampling import prototype_correction
from specdec_lib.stats import exact_candidates_law, tv

g = torch.Generator().manual_seed(0)
worst, wrong = 0.0, 0.0
for V in (3, 5, 8):
    for width in (1, 2, 3):
        for _ in range(3):
            p = torch.softmax(2 * torch.randn(V, generator=g, dtype=torch.float64), 0)
            q = torch.softmax(3 * torch.randn(V, generator=g, dtype=torch.float64), 0)
            worst = max(worst, tv(exact_candidates_law(p, q, width), p))
            wrong = max(wrong, tv(exact_candidates_law(p, q, width, prototype_correction), p))
print("residual rule, 1-3 candidates, V = 3, 5, 8: law == p to 1e-12:", worst < 1e-12)
print("prototype's correction: largest TV from p =", round(wrong, 2))

# %% [markdown]
# The chi-square tests of the decoder with alternatives on the tiny models (the law of 2-token
# continuations, several $K$, widths and warps), greedy equality with the autoregressive output (on
# the tiny models and on SmolLM2 with the trained head), and cache against no-cache are in
# `tests/test_candidates.py`, `tests/test_feature.py` and `tests/test_models.py`.
#
# **int8 weights for the head.** The draft step is memory-bound: after each target pass the head's
# ~20 MB of bfloat16 weights come back from DRAM. Stored as int8 (one scale per output row; torch's
# weight-only int8 kernel over bfloat16 activations), it reads half the bytes: the draft step falls
# from about 2 to 1.2–1.4 ms ($c$ from 0.09–0.10 to about 0.06). The draft's $q$ changes a little, so its
# acceptance is measured again on the held-out prompts (`--draft trained-int8`); speculative sampling
# stays exact, since $q$ is still the law the drafts are drawn from.

# %%
alpha_table(
    eval_rows(
        {
            "trained head, bf16 weights": "drafter_eval_feature_head.json",
            "trained head, int8 weights": "drafter_eval_feature_head_int8.json",
            "trained head, int8 weights, width 2": "drafter_eval_feature_head_int8_w2.json",
        }
    )
)

# %% [markdown]
# Measured side by side, bfloat16, the 20 benchmark prompts ($\alpha$ counts a position as accepted
# when any of its candidates is). The final runs, two repeats per prompt:
#
# ```bash
# python -m specdec_lib bench --draft trained-int8 --dtype bfloat16 --K 1 2 3 --width 2 --repeats 2 \
#     --methods autoregressive speculative hf_autoregressive              # and --temperature 0
# ```
#
# (and a replicate at $T = 1$ with other sampling seeds, `--seed 1`, checked in the last cell of
# this section), and the exploration before them, one repeat (`--draft trained|trained-int8`, `--width 1|2|3`,
# `--schedule heuristic`, `--K 1 2`, `--methods autoregressive speculative`; each file's settings are
# in its provenance):

# %%
WIDTH = {
    ("T = 1", "bf16", "fixed", 1): "bench_default_trained_bfloat16_T1.json",
    ("T = 1", "bf16", "fixed", 2): "bench_default_trained_w2_bfloat16_T1.json",
    ("T = 1", "bf16", "fixed", 3): "bench_default_trained_w3_bfloat16_T1.json",
    ("T = 1", "bf16", "heuristic", 1): "bench_default_trained_heuristic_bfloat16_T1.json",
    ("T = 1", "bf16", "heuristic", 2): "bench_default_trained_heuristic_w2_bfloat16_T1.json",
    ("T = 1", "int8", "fixed", 1): "bench_default_trained-int8_bfloat16_T1.json",
    ("T = 1", "int8", "fixed", 2): "bench_default_trained-int8_w2_bfloat16_T1.json",
    ("greedy", "bf16", "fixed", 1): "bench_default_trained_bfloat16_greedy.json",
    ("greedy", "bf16", "fixed", 2): "bench_default_trained_w2_bfloat16_greedy.json",
    ("greedy", "int8", "fixed", 2): "bench_default_trained-int8_w2_bfloat16_greedy.json",
}
width_rows = []
for (dec, weights, sched, w), f in WIDTH.items():
    if not (RESULTS / f).exists():
        print(f"not measured yet: {f}")
        continue
    res = read_json(RESULTS / f)
    df = runs_frame(res)
    for _, r in df[(df.method == "speculative") & (df.K <= 3)].iterrows():
        width_rows.append(
            {
                "decoding": dec,
                "head": weights,
                "schedule": sched,
                "width": w,
                "K": int(r.K),
                "repeats": res["settings"]["repeats"],
                "speedup": r.speedup,
                "predicted": r.predicted_speedup,
                "alpha": r.alpha,
                "tokens/step": r.tau,
            }
        )
widths = pd.DataFrame(width_rows).set_index(["decoding", "head", "schedule", "width", "K"])
widths

# %%
fig = plotting.width_speedups(widths, target=1.3)
savefig("05_width", fig);

# %%
# NBVAL_CHECK_OUTPUT
final = {
    dec: runs_frame(read_json(RESULTS / f))
    for dec, f in {
        "T = 1": "bench_default_trained-int8_w2_bfloat16_T1.json",
        "T = 1, replicate (seed 1)": "bench_default_trained-int8_w2_bfloat16_T1_seed1.json",
        "greedy": "bench_default_trained-int8_w2_bfloat16_greedy.json",
    }.items()
}
for dec, df in final.items():
    best = df[df.method == "speculative"].speedup.max()
    print(f"{dec}: int8 head, width 2, best K: >= 1.3x over autoregressive (bf16):", best >= 1.3)

# %% [markdown]
# ## 10. What we learnt (the runs of 2026-12-01; the tables above are the source)
#
# **Data was the limit, and on-policy data at scale fixed it.** The same head accepted 0.33 of its
# drafts at $T = 1$ when trained on 114k positions, 0.40 on 318k, 0.49 on 982k and **0.52 on 1.99M**
# (0.53 at $T = 0.7$, 0.51 greedy) on 45 held-out prompts, at a cost $c \approx 0.1$ of a target pass
# in bfloat16 (§3-§5). The gain per doubling is shrinking (about +0.05 per doubling up to 982k, +0.03
# for the last one), and the training acceptance still ends above the held-out one: more data would
# still help, a little. The draft targets ($\alpha \ge 0.45$ at $T = 1$, $c \le 0.1$) are met.
# Doubling the data raised greedy acceptance the most (0.44 → 0.51): the argmax of a better-fitted
# $q$ agrees with the target's more often.
#
# **Capacity is not the lever here (§4).** A second head layer, on the same 982k positions, raised
# the acceptance from 0.49 to 0.50 and the cost from 0.09 to 0.13: the predicted speedup at $K = 1$
# falls slightly (1.28 against 1.30). Data was worth more than capacity at this scale.
#
# **Which drafter.** At $T = 1$ the trained head accepts about seven times as often as the untrained
# early exit (0.07) at a third of its cost; prompt lookup is nearly free ($c < 0.01$) but drafts
# rarely and mostly wrongly at $T = 1$ (0.12), and does better as the temperature falls (0.40 greedy),
# where the target repeats its context more. Under greedy decoding a draft is accepted only when its
# argmax is the target's argmax ($\alpha = \sum_x \min(p, q)$ gives no partial credit), and still the
# head's greedy acceptance is as high as at $T = 1$.
#
# **The speed, measured side by side in bfloat16 (§6, §8).** With the trained head, one candidate per
# position, speculative decoding beats autoregressive decoding in the same dtype and process: 1.19×
# at $K = 1$ and 1.24× at $K = 2$ at $T = 1$, 1.26× at $K = 1$ greedy. Prompt lookup is about
# break-even at $T = 1$ (Hugging Face's own prompt lookup, on the same prompts, 0.95×). **With one
# candidate per position, the 1.3× is not reached** (two candidates and int8 weights reach
# it: below). The cost model says why (measured / predicted speedup is 0.94–1.02 at every $K$):
#
# * at $K = 1$ the step costs $c + t_\text{target}(2)/t_\text{target}(1) \approx 0.09 + 1.03$ target
#   passes and yields $1 + \alpha \approx 1.42$ tokens on the benchmark prompts ($\alpha = 0.43$
#   there, lower than the 0.52 of the held-out prompts: the 20 benchmark prompts are a different mix):
#   1.27× predicted, 1.19× measured;
# * longer drafts help only up to $K = 2$, because the head was trained for one step: beyond the
#   first draft token it reads its own output instead of the target's (fused) features, and
#   acceptance falls to about 0.2–0.35 at positions 2-3 (§5, and notebook 04 §3). Training the chain
#   (EAGLE-3's "training-time test": feed the head's own features during training) targets exactly
#   that;
# * $c$: the head's weights (about 20 MB in bfloat16: the 8,192 output rows, the layer, the fusion)
#   are read from memory after every target pass has evicted them from the cache; at the bandwidth
#   the target's own pass reaches (about 270 MB in 20–26 ms) that alone is 1.5–2 ms, $c \approx 0.07$–$0.08$,
#   against 0.09–0.10 measured. int8 weights halve those bytes (below).
#
# **Two candidates and int8 weights (§9): 1.35× at $T = 1$, 1.39× greedy.** Checking a second
# candidate for the first position in the same pass raises the acceptance of that position from 0.48
# to 0.57 at $T = 1$ (0.50 to 0.64 greedy) on the held-out prompts (int8 head), for a pass over one
# more token (about 1.00–1.02× the cost of a 2-token pass). Storing the head's weights as int8 lowers $c$ from 0.098 to
# 0.058, at an acceptance of 0.48 instead of 0.52 at $T = 1$ (0.50 against 0.51 greedy, 0.53 against
# 0.53 at $T = 0.7$). Together, in the final runs (two repeats of the 20 prompts): **1.35× at
# $K = 2$, $T = 1$** (1.31× at $K = 1$ and $K = 3$) and **1.39× at $K = 2$ greedy** (1.33–1.34× at
# $K = 1, 3$), above the 1.3× at every $K$ measured; measured / predicted is 0.93–0.98. A
# replicate at $T = 1$ with other sampling seeds (`--seed 1`) measured 1.31×, 1.32× and 1.29× at
# $K = 1, 2, 3$: the best $K$ is above 1.3× in both, by 0.02–0.05. The
# single-repeat exploration runs scatter by about ±0.05 (the autoregressive baseline alone moved
# between 39 and 46 tokens/s from run to run), so their order is not significant; a third candidate
# gained nothing over two.
#
# **Dynamic length (§8).** Both schedules are exact; Hugging Face's heuristic matches the best fixed
# $K$ (1.24–1.25× against 1.24×), the confidence threshold does as well at 0.4 (1.20–1.22×) and a
# little better at 0.2 (1.24–1.27×): they draft more where the head is confident and stop where it
# is not.
#
# **Float32 against bfloat16 (§7).** With one thread, a float32 pass over 2 tokens costs 1.6× a
# one-token pass on this CPU (up to 2.1× for 3 tokens), a bfloat16 pass 1.02×, and the one-token pass
# is itself about 2.1× faster in bfloat16: in float32 even this trained head could not pay for
# itself (with the same $\alpha$ and $c$, $1.52 / (0.1 + 1.64) < 1$ at $K = 1$).
#
# **Threads.** With one thread instead of two the whole pair is slower (35 against 43 tokens/s
# autoregressive) and the speedup a little higher (1.21× and 1.28× at $K = 1, 2$ against 1.19× and
# 1.24×): $c$ is about the same (0.091 against 0.093), a 2-token pass costs slightly less relative to
# one (1.02× against 1.03×), and the decoder's fixed work per step weighs less against a slower pass.
