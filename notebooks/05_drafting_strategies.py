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
# # 05 · Drafting strategies: making a draft that pays
#
# How to make a draft that the target accepts often and that costs little, for a target no
# packaged small model shares a tokenizer with, and what it buys. What this page finds, rendered
# from the campaign it reads (`data/results/campaign/`):

# %%
from IPython.display import Markdown

from specdec_lib.config import RESULTS_DIR
from specdec_lib.figures import drafting_strategies as figs
from specdec_lib.research.campaign import Campaign

CAMPAIGN = Campaign.read(RESULTS_DIR / "campaign")
Markdown(figs.findings(CAMPAIGN))

# %% [markdown]
# **Aim.** Speculative decoding pays only when the draft agrees with the target often (high
# $\alpha$) and costs little (low $c$). No packaged small model shares SmolLM2's tokenizer, so this
# notebook makes a draft for it, offline, on a CPU, and follows it from end to end:
#
# 1. **the data**: continuations sampled from the target itself (on-policy);
# 2. **the draft**: a one-layer feature-level head (EAGLE) distilled on that data;
# 3. **its acceptance** $\alpha$ and cost $c$, beside the other ways to draft (the untrained early
#    exit of notebooks 03-04, and prompt lookup);
# 4. **the speedup** it buys, measured against autoregressive decoding with 95% intervals.
#
# The side experiments behind the choices made here (the architecture pilot, training detail and
# capacity, what a target pass costs by dtype and with prepacked weights, several candidates per
# position, and draft trees) are in notebook 06.
#
# **Theory (Leviathan et al. 2022).** With acceptance rate $\alpha$ at every position, a step with
# $K$ drafts emits on average $\tau(K) = (1 - \alpha^{K+1}) / (1 - \alpha)$ tokens, and costs
# $K\,t_\text{draft} + t_\text{target}(K+1)$. Relative to one target pass per token, the speedup is
#
# $$S(K) = \frac{\tau(K)}{K c + t_\text{target}(K+1) / t_\text{target}(1)}, \qquad c = t_\text{draft} / t_\text{target}(1).$$
#
# So a draft has two numbers, $\alpha$ and $c$, and the machine has one curve, $t_\text{target}(n)$:
# how much more a pass over $n$ tokens costs than a pass over one. The flatter that curve, the more
# a draft can gain; notebook 06 §3 measures it, in float32 and in bfloat16, with the weights as
# loaded and prepacked.
#
# **How the draft is trained.**
#
# 1. *On-policy data* (DistillSpec, Zhou et al. 2023, arXiv 2310.08461): the target samples
#    continuations of hand-written prompts at $T = 1$, in bfloat16 (`python -m specdec_lib gen-data`).
#    Only the token ids are committed (`data/drafter/onpolicy/`, uint16).
# 2. *Teacher pass*: `train-drafter` teacher-forces the target over the stored ids and keeps its
#    distribution $p_j$ (its top 64 tokens) and hidden states at every position, in a local cache.
# 3. *Distillation*: the draft's $q_j$ is trained towards $p_j$ with a cross-entropy plus
#    $1 - \sum_x \min(p_j(x), q_j(x))$, the probability of a rejection, which is what speculative
#    decoding pays for. The draft proposes only a fixed subset of the vocabulary, the tokens that
#    carry most of the target's probability: $q = 0$ elsewhere, which is still exact (a token the
#    draft never proposes is emitted through the residual) and makes the draft's output layer
#    several times cheaper.
# 4. *Measurement*: $\alpha$ by decoding on held-out prompts (`eval-drafter`), and speed by the
#    benchmark (`bench`), never from the training loss.
#
# Every benchmark and evaluation number on this page comes from one campaign
# (`data/results/campaign/`): one machine, one commit, and each run's command in its manifest. The
# training records (`data/drafter/`) are those of the training runs themselves.
#
# This page uses the acceptance rule of notebook 01 and the cost model and benchmark of notebook 03.

# %%
import numpy as np
import pandas as pd
from IPython.display import display
from scipy import stats as sps

from specdec_lib import bench
from specdec_lib.bench.analysis import position_counts
from specdec_lib.config import DATA_DIR, quick
from specdec_lib.costs import expected_tokens_per_step
from specdec_lib.figures.drafting_strategies import EVALS, LAYOUTS, shape_of
from specdec_lib.figures.provenance import data_read
from specdec_lib.figures.style import savefig
from specdec_lib.figures.words import interval as with_interval
from specdec_lib.results import check_same_machine, read_json
from specdec_lib.training import load_manifest, summary

pd.set_option("display.precision", 3)
QUICK = quick()
DRAFTER = DATA_DIR / "drafter"
EXPERIMENTS = DRAFTER / "experiments"
MACHINE, MACHINE_SHORT = CAMPAIGN.machine, CAMPAIGN.machine_short
TEMPS = {"1": "T = 1", "0.7": "T = 0.7", "0": "greedy"}
# The series' headline (Campaign.headline): the recommended configuration at the best K of its
# T = 1 run among the K its replicate also ran, and the same K on the replicate and in greedy
# decoding, each with its 95% interval.
HEADLINE = CAMPAIGN.headline()
CHOSEN_AS = figs.chosen_as(HEADLINE)
HS = HEADLINE["settings"]
RECOMMENDED = figs.recommended(HS)
evals = CAMPAIGN.runs(EVALS)  # refused if they come from two machines
NGRAM = CAMPAIGN.run("ngram_T1")
ngram_drafting, _ = figs.ngram_rates(NGRAM)
print("quick mode:", QUICK)
print(f"measured on: {MACHINE}")
print(f"campaign commit: {CAMPAIGN.commit}")


def headline_at(run: str) -> str:
    """The headline's speedup and interval in one of its runs (T1, replicate, greedy)."""
    h = HEADLINE[run]
    return with_interval(h["speedup"], h["low"], h["high"])


def cells_at(result: dict, method: str, K: int) -> list[dict]:
    """The cells of one (method, K) of a stored run."""
    return [c for key, c in result["cells"].items() if key.startswith(f"{method}|{K}|")]


# %% [markdown]
# ## 1. The data: on-policy samples from the target
#
# `python -m specdec_lib gen-data` samples continuations of the training prompts from the target in
# bfloat16, in batches, at $T = 1$ with no top-k: the plain law the draft must match. Two samplers
# wrote the shards: transformers' `generate` (`hf`) and the library's own loop
# (`training.data.sample_batch`, `own`), which drops a row from the batch, with its KV cache, as
# soon as it emits EOS instead of padding it to the end. Both sample the target's law (the own loop
# is tested against the exact law on the tiny models, with rows leaving the batch).

# %%
manifest = load_manifest(DRAFTER / "onpolicy")
shards = pd.DataFrame(manifest["shards"])
by_sampler = shards.groupby("sampler").agg(
    shards=("shard", "count"), tokens=("generated_tokens", "sum"), seconds=("seconds", "sum")
)
by_sampler["tokens/s"] = by_sampler.tokens / by_sampler.seconds
s = summary(DRAFTER / "onpolicy")
print(
    f"{s['generated_tokens']:,} generated tokens in {s['sequences']:,} sequences "
    f"({s['shards']} shards), {s['seconds'] / 3600:.2f} h of generation"
)
by_sampler

# %%
# NBVAL_CHECK_OUTPUT
print("on-policy data of at least 1M generated tokens:", s["generated_tokens"] >= 1_000_000)
print("every shard records its sampler:", set(shards.sampler) <= {"hf", "own"})

# %% [markdown]
# ## 2. The draft: a feature-level head
#
# The draft is one Llama layer (initialised from the target's last layer) that reads the target's
# hidden states at layers 2, 14 and 29, fused by one linear map (EAGLE-3's idea), together with the
# embedding of the next token (EAGLE), and predicts the token after it with the target's own output
# rows. A few dimensions of the target's hidden state are far larger than any of the token
# embedding's and would drown it, so the head RMS-normalises both inputs before it mixes them. At equal
# data this head accepts more than a head reading the last layer only and than small LMs made of
# target layers, at a similar or lower cost (notebook 06 §1).
#
# It is trained on every shard but the last two, which are held out:
#
# ```bash
# python -m specdec_lib train-drafter --feature-layers 2 14 -1 --epochs 3 --lr 1e-3 --eval-shards 2 \
#     --out data/drafter/feature_head.safetensors
# python -m specdec_lib eval-drafter --draft trained      # the campaign's run eval_trained
# ```
#
# The weights (`data/drafter/feature_head.safetensors`, only the head's own tensors) and the model
# card (`data/drafter/feature_head.md`) are committed; `load_pair("default")` uses them (its default
# draft, `draft="trained"`). The table is measured by decoding at $K = 1$ on the held-out prompts
# (every proposal is judged, so $\alpha$ is the per-token acceptance rate), with $c$ measured in
# the evaluation's dtype through the same `Drafter` interface the decoder uses.

# %% [markdown]
# **The head, on the page.** Its forward pass and its training loss, written out and run on the
# features the target computes for one sentence. At position $j$ the head reads the target's
# hidden states after token $j - 1$ at its three layers and the embedding of token $x_j$, and
# gives the law $q_j$ of $x_{j+1}$ over its token subset $S$. The loss compares $q_j$ with the
# target's own law $p_j$ of $x_{j+1}$, over the target's 64 most probable tokens: a cross-entropy,
# plus $1 - \sum_x \min(p_j(x), q_j(x))$, the probability that $x \sim q_j$ is rejected. The cell
# checks both against the library: the head's logits bit for bit, and the loss against the
# training loop's terms (`training.distill`, which adds a feature term and, for heads trained to
# draft several steps, the same terms at each step).

# %%
# NBVAL_CHECK_OUTPUT
import torch

from specdec_lib.drafters.heads import rms_normalise
from specdec_lib.lm import capture_features
from specdec_lib.models import load_pair
from specdec_lib.training import distill

pair = load_pair("default", draft="trained")  # float32 target and head
head = pair.draft.head
ids = pair.tokenizer(
    "The capital of France is Paris, and the capital of Italy is", return_tensors="pt"
).input_ids
with torch.inference_mode(), capture_features(pair.target, head.feature_layers) as captured:
    target_logits = pair.target(input_ids=ids).logits[:, 1:]  # p_j: the law of x_{j+1}
features, tokens = captured[-1][:, :-1], ids[:, 1:]  # h_{j-1} at the head's layers, and x_j


def head_logits(features, tokens):
    # q_j's logits over the subset S, from the target's features h_{j-1} and the token x_j
    H = head.fc.out_features
    blocks = rms_normalise(features.unflatten(-1, (-1, H))) * head.w_in  # each layer, normalised
    x = head.fuse(blocks.flatten(-2))  # the layers fused into one H-vector
    e = rms_normalise(head._embed(tokens)) * head.w_emb  # the token's embedding, normalised
    g = head.fc(torch.cat([x * head.scale, e * head.scale], -1))  # one input per position
    h = head.body(inputs_embeds=g).last_hidden_state  # one Llama decoder layer
    return head.output(head._norm(h))  # the target's final norm, and its output rows of S


def teacher(target_logits, top=64):
    # the target's top tokens, their probabilities, and where each sits in S (-1: not in S)
    p, top_ids = torch.softmax(target_logits.float(), -1).topk(top, -1)
    where = torch.full((target_logits.shape[-1],), -1)
    where[head.subset] = torch.arange(len(head.subset))
    return p, where[top_ids]


def head_loss(logits, p, idx):
    # cross-entropy to p over its top tokens, plus the probability of a rejection over them
    in_s = idx >= 0  # q is 0 outside S
    logq = torch.log_softmax(logits.float(), -1).gather(-1, idx.clamp(min=0)) * in_s
    ce = -(p * in_s * logq).sum(-1)
    alpha = torch.minimum(p * in_s, logq.exp() * in_s).sum(-1)
    return (ce + 1 - alpha).mean()


with torch.inference_mode():
    mine = head_logits(features, tokens)
    library = head.logits(head(features, tokens)[0])
    p, idx = teacher(target_logits)
    terms = distill._distill_terms(
        torch.log_softmax(library.float(), -1), idx, p, torch.ones(idx.shape[:2], dtype=bool)
    )
print("the head on the page gives the library's logits, bit for bit:", torch.equal(mine, library))
print(
    "its loss is the training loop's cross-entropy + (1 - alpha):",
    torch.allclose(head_loss(mine, p, idx), terms["ce"] + 1 - terms["alpha"]),
)

# %%
full_train = read_json(DRAFTER / "feature_head.train.json")
full_eval = evals["trained head"]
st = full_train["settings"]
prov = full_train["provenance"]
hist = pd.DataFrame(full_train["history"])
print(
    f"trained on {full_train['train_tokens']:,} positions ({full_train['train_sequences']:,} "
    f"sequences), {st['epochs']:g} epochs, peak learning rate {st['lr']:g}, "
    f"{st['batch_sequences']} sequences per step, draft vocabulary {st['subset_size']:,} tokens; "
    f"{hist.seconds.max() / 60:.0f} min of training on {prov['cpu']} "
    f"({prov['torch_threads']} threads), torch {prov['torch']}"
)
by_T = pd.DataFrame(
    {
        TEMPS[T]: {"alpha (K=1)": r["alpha"], "accepted": r["accepted"], "proposed": r["proposed"]}
        for T, r in full_eval["by_temperature"].items()
    }
).T.astype({"accepted": int, "proposed": int})
by_T[f"c ({full_eval['pair']['dtype']})"] = full_eval["costs"]["c"]
by_T

# %%
# NBVAL_CHECK_OUTPUT
print("held-out prompts:", len(read_json(DRAFTER / "heldout_prompts.json")["prompts"]))
print(
    f"alpha at K = 1 ({', '.join(by_T.index)}):", [round(float(a), 2) for a in by_T["alpha (K=1)"]]
)

# %% [markdown]
# **Acceptance against data.** The same recipe trained on the first 11, 30 and 92 shards
# (`data/drafter/experiments/`: the pilot's fused head and `lc_*`) and on all the training shards,
# each measured by decoding on the held-out prompts at $K = 1$, $T = 1$ (the pilot with 48 new
# tokens per prompt, the others with 64). The right panel is the compute axis: the held-out
# acceptance recorded during training against training time. Training records
# $\sum_x \min(p, q)$ over the target's top 64 tokens only, a **lower bound** on the acceptance
# rate, computed on each run's own held-out shards (so the runs' levels there differ a little by
# shard as well as by run).

# %%
pilot_eval = read_json(EXPERIMENTS / "pilot_featn_fused.eval.json")
pilot_train = read_json(EXPERIMENTS / "pilot_featn_fused.train.json")
n_full = len(full_train.get("train_shards") or range(s["shards"] - st["eval_shards"]))
runs = {"pilot (11 shards)": (pilot_train, pilot_eval)}
for path in sorted(EXPERIMENTS.glob("lc_*.eval.json")):
    name = path.name.removesuffix(".eval.json")
    label = name.removeprefix("lc_").replace("shards", " shards")
    runs[label] = (read_json(EXPERIMENTS / f"{name}.train.json"), read_json(path))
runs[f"all ({n_full} shards)"] = (full_train, full_eval)
curve = pd.DataFrame(
    [
        {
            "run": name,
            "train tokens": tr["train_tokens"],
            "alpha": ev["by_temperature"]["1"]["alpha"],
        }
        for name, (tr, ev) in runs.items()
    ]
).set_index("run")
trained_on = sorted({tr["provenance"].get("cpu", "a CPU") for tr, _ in runs.values()})
trained_dates = sorted(tr["provenance"]["date"][:10] for tr, _ in runs.values())
fig = figs.learning_curves(
    curve,
    {name: pd.DataFrame(tr["history"]) for name, (tr, _) in runs.items()},
    time_label=f"training time (minutes on {' and '.join(trained_on)}, "
    f"runs of {trained_dates[0]} to {trained_dates[-1]})",
    alpha_label="α at K = 1, T = 1, decoding the held-out prompts\n"
    "(all shards: this campaign; the others: their own runs)",
)
savefig("05_learning_curves", fig)
curve

# %%
doublings = np.log2(curve["train tokens"].iloc[-1] / curve["train tokens"].iloc[0])
last_gain = curve.alpha.iloc[-1] - curve.alpha.iloc[-2]
last_doubling = np.log2(curve["train tokens"].iloc[-1] / curve["train tokens"].iloc[-2])
gap = hist.train_alpha.iloc[-3:].mean() - hist.eval_alpha.iloc[-3:].mean()
display(
    Markdown(
        f"**Data is the lever.** From {curve['train tokens'].iloc[0] / 1e3:.0f}k to "
        f"{curve['train tokens'].iloc[-1] / 1e6:.1f}M positions ({doublings:.1f} doublings) the "
        f"acceptance at $T = 1$ rises from {curve.alpha.iloc[0]:.3f} to {curve.alpha.iloc[-1]:.3f}, "
        f"about {(curve.alpha.iloc[-1] - curve.alpha.iloc[0]) / doublings:+.3f} per doubling on "
        f"average and {last_gain / last_doubling:+.3f} per doubling for the last step. At the end "
        f"of training the bound on the training batches is {gap:.3f} above the held-out one (mean "
        f"of the last three records). A second head layer on the same data is weighed in "
        f"notebook 06 §2."
    )
)

# %% [markdown]
# ## 3. Acceptance: the trained head beside the other drafters
#
# $\alpha$ by decoding at $K = 1$ on the held-out prompts (`eval-drafter`), and $c$ in the same
# process, for the untrained early exit (the target's first 4 layers and its own head), the trained
# head, and the trained head with **int8 weights**: the draft step is memory-bound (after each
# target pass the head's weights come back from DRAM), and int8 weights (one scale per output row,
# torch's weight-only int8 kernel over bfloat16 activations) halve the bytes read. The draft's $q$
# changes a little, so its acceptance is measured again; speculative sampling stays exact, since
# $q$ is still the law the drafts are drawn from. Which head the recommended configuration of §4
# runs is chosen at start-up with the target's dtype and weights (§4's table says which), with a
# draft tree (candidates at each depth, notebook 06 §5) and a stop by confidence.
#
# Prompt lookup (copy what followed the latest earlier occurrence of the last 1-3 tokens) has no
# held-out evaluation: its row is its benchmark run at $K = 1$, $T = 1$, so its $\alpha$ is
# measured in decoding on the **benchmark prompts**, not the held-out ones. It proposes only when
# the last tokens occurred earlier in the context, so its $\alpha$ is over the steps where it
# proposed; its $c$ is a dictionary lookup.

# %%
alphas = pd.DataFrame(
    {
        name: {TEMPS[T]: r["alpha"] for T, r in ev["by_temperature"].items()}
        | {
            "c": ev["costs"]["c"],
            "prompts": "held-out",
            "tokens per prompt": ev["by_temperature"]["1"]["settings"]["max_new_tokens"],
        }
        for name, ev in evals.items()
    }
).T
ngram_row = next(r for r in NGRAM["runs"] if r["method"] == "speculative" and r["K"] == 1)
alphas.loc["prompt lookup (n-gram)"] = {
    "T = 1": ngram_row["alpha"],
    "c": NGRAM["costs"]["c"],
    "prompts": "benchmark",
    "tokens per prompt": NGRAM["settings"]["max_new_tokens"],
}
check_same_machine([*evals.values(), NGRAM], "the drafters' acceptance and cost")
alphas = alphas[[t for t in TEMPS.values() if t in alphas] + ["c", "prompts", "tokens per prompt"]]
alphas.astype(object).where(alphas.notna(), "not measured")

# %%
ee, trained, i8 = (alphas.loc[n] for n in EVALS)
ng = alphas.loc["prompt lookup (n-gram)"]
# Each evaluation divides its draft step by the target pass of its own process: int8's step and
# the head's are compared in milliseconds, and on one base (the target pass of the head's own run).
draft_ms = {n: evals[n]["costs"]["t_draft_s"] * 1e3 for n in EVALS}
base_ms = evals["trained head"]["costs"]["t_target_s"][0] * 1e3
c_i8_same_base = draft_ms["trained head, int8"] / base_ms


def instead(new, old):
    # "0.48 instead of 0.50", or "the same 0.50" when the two agree to the digits shown.
    return (
        f"the same {new:.2f}" if f"{new:.2f}" == f"{old:.2f}" else f"{new:.2f} instead of {old:.2f}"
    )


display(
    Markdown(
        f"At $T = 1$ the trained head accepts {trained['T = 1']:.2f} of its drafts, "
        f"{trained['T = 1'] / ee['T = 1']:.1f} times the untrained early exit ({ee['T = 1']:.2f}), "
        f"at {trained['c'] / ee['c']:.2f} of its cost ($c$ = {trained['c']:.3f} against "
        f"{ee['c']:.3f}). Under greedy decoding a draft is accepted only when its argmax is the "
        f"target's argmax (no partial credit); the head's greedy acceptance is "
        f"{trained['greedy']:.2f}"
        + (
            ", as at $T = 1$"
            if f"{trained['greedy']:.2f}" == f"{trained['T = 1']:.2f}"
            else f", against {trained['T = 1']:.2f} at $T = 1$"
        )
        + ". int8 weights take "
        f"a draft step from {draft_ms['trained head']:.2f} to {draft_ms['trained head, int8']:.2f} "
        f"ms: on the same target pass ({base_ms:.1f} ms) $c$ goes from {trained['c']:.3f} to "
        f"{c_i8_same_base:.3f}, at an acceptance of "
        f"{instead(i8['T = 1'], trained['T = 1'])} at $T = 1$. Prompt lookup costs $c$ = {ng['c']:.3f}; on the "
        f"benchmark prompts at $T = 1$ it drafts at {ngram_drafting:.0%} of the steps, and "
        f"{ng['T = 1']:.2f} of those drafts are accepted."
    )
)

# %% [markdown]
# **Further along a draft.** At $K = 1$ every proposal is judged. With longer drafts, a step judges
# draft position $i$ only when every draft before it was accepted, so the acceptance at position
# $i$ is a rate *given that the position was reached*. The campaign's chain run (`bench --preset
# chain`: the trained head, one candidate per position) gives it, from every step of its runs
# at every $K$ of its grid on the benchmark prompts at $T = 1$ (`bench.analysis.position_counts`), with 95% Wilson
# intervals; positions reached fewer than 50 times are left out.

# %%
CHAIN = CAMPAIGN.run("chain_T1")
K_max = max(CHAIN["settings"]["K"])
reached, accepted = np.zeros(K_max, dtype=int), np.zeros(K_max, dtype=int)
for K in CHAIN["settings"]["K"]:
    r, a = position_counts(cells_at(CHAIN, "speculative", K), K)
    reached[:K] += r
    accepted[:K] += a


def wilson(k: int, n: int) -> tuple[float, float]:
    ci = sps.binomtest(int(k), int(n)).proportion_ci(confidence_level=0.95, method="wilson")
    return ci.low, ci.high


by_position = pd.DataFrame(
    {"reached": reached, "accepted": accepted},
    index=pd.RangeIndex(1, K_max + 1, name="draft position"),
)
by_position = by_position[by_position.reached >= 50]
by_position["rate"] = by_position.accepted / by_position.reached
intervals = [wilson(k, n) for k, n in zip(by_position.accepted, by_position.reached, strict=True)]
by_position["95% low"] = [lo for lo, _ in intervals]
by_position["95% high"] = [hi for _, hi in intervals]
by_position

# %%
held = full_eval["by_temperature"]["1"]
held_ci = wilson(held["accepted"], held["proposed"])
chain_K1 = cells_at(CHAIN, "speculative", 1)
k1 = (sum(c["n_accepted"] for c in chain_K1), sum(c["n_proposed"] for c in chain_K1))
k1_ci = wilson(*k1)
p1 = by_position.loc[1]
later = by_position.iloc[1:]
overlap = held_ci[0] <= k1_ci[1] and k1_ci[0] <= held_ci[1]
all_lower = bool((later["95% high"] < p1["95% low"]).all())
display(
    Markdown(
        f"The chain run's draft is `{CHAIN['settings']['draft']}`: the trained head with its "
        f"{CHAIN['pair']['dtype']} weights, the head of the evaluation above. Its $K = 1$ run "
        f"follows the evaluation's protocol (every proposal judged) on the benchmark prompts and "
        f"accepts {k1[0] / k1[1]:.3f} [{k1_ci[0]:.3f}, {k1_ci[1]:.3f}] of {k1[1]:,} drafts; the "
        f"evaluation accepts {held['alpha']:.3f} [{held_ci[0]:.3f}, {held_ci[1]:.3f}] of "
        f"{held['proposed']:,} on the held-out prompts. "
        + (
            "The two intervals overlap. "
            if overlap
            else "The two intervals do not overlap: the two sets of prompts differ, and so do the "
            "contexts the target visits on them; that difference is between prompts, not between "
            "draft positions. "
        )
        + f"Pooled over $K$, position 1 is judged at every step and accepts {p1.rate:.3f}. "
        + "Given that they were reached, positions "
        + ", ".join(str(i) for i in later.index)
        + " accept "
        + ", ".join(f"{x:.3f}" for x in later.rate)
        + (
            ", each interval below position 1's. The head is trained for one step: beyond the "
            "first draft token it reads its own features instead of the target's. "
            if all_lower
            else " (intervals in the table). "
        )
        + "The probability that a step accepts every draft up to position $i$ is the product of "
        "these rates: " + ", ".join(f"{x:.3f}" for x in by_position.rate.cumprod()) + "."
    )
)

# %% [markdown]
# What each drafter's $\alpha$ at $T = 1$ and $c$ predict through $S(K)$, with the pass costs
# $t_\text{target}(n)$ measured with the trained head's evaluation. The model is optimistic in two
# ways: for prompt lookup it assumes a draft at every step, and for the trained head it assumes the
# first position's acceptance at every position (compare the rates by position above).

# %%
t_eval = np.array(full_eval["costs"]["t_target_s"])
predicted = pd.DataFrame(
    [
        {
            "drafter": f"{name} (α = {r['T = 1']:.2f}, c = {r['c']:.2f}, {r['prompts']} prompts)",
            "K": k,
            "speedup": expected_tokens_per_step(r["T = 1"], int(k))
            / (k * r["c"] + t_eval[k] / t_eval[0]),
        }
        for name, r in alphas.loc[
            ["early exit (untrained)", "prompt lookup (n-gram)", "trained head"]
        ].iterrows()
        for k in range(1, len(t_eval))
    ]
)
fig = figs.predicted_by_drafter(predicted)
savefig("05_predicted_by_drafter", fig)
# %% [markdown]
# ## 4. The speedup
#
# `python -m specdec_lib bench` on the benchmark prompts of notebook 03, each run with its
# autoregressive baseline measured in the same process, dtype and threads. The speedup is pooled
# tokens per second over the baseline's; its interval is a 95% paired bootstrap over prompts
# (`bench.speedup_interval`: a prompt's cells of both methods go together).
#
# Three ways of running the same head appear in the runs, each treated in full in notebook 06:
#
# * **a chain or a tree.** The chain drafts one token per position, $K$ of them. A *draft tree*
#   adds, beside the chain's token at the first depths, alternatives drawn without replacement from
#   the same row of the draft's $q$; the target checks the whole tree in one pass (an attention
#   mask lets each token see only its own branch), and at each depth the candidates are judged one
#   after the other by recursive rejection, at most one kept, so the step's output is still an
#   exact sample of $p$ (notebook 06 §4 writes the rule out and checks its exact law; §5 measures
#   trees against the chain);
# * **a stop by confidence**: the head stops drafting after a token it gave less than 0.4, so $K$
#   caps the draft's length; stopping on the drafts so far keeps the output exact;
# * **the weights' dtype and layout**: the target in float32 or bfloat16, its weights as loaded or
#   laid out once for the matrix product that reads them (*prepacked*); a start-up timing on the
#   machine picks the fastest (notebook 06 §3 measures each).
#
# The runs, from the campaign's manifest:

# %%
SPEED_RUNS = {
    "recommended_T1": ("T = 1", "recommended"),
    "recommended_T1_replicate": ("T = 1", "recommended, replicate"),
    "chain_T1": ("T = 1", "chain (trained head, one candidate)"),
    "ngram_T1": ("T = 1", "prompt lookup"),
    "early_exit_T1": ("T = 1", "early exit (untrained)"),
    "recommended_greedy": ("greedy", "recommended"),
}
results = CAMPAIGN.runs(list(SPEED_RUNS))  # by run name; refused from two machines


def command(run: str) -> str:
    """A campaign run's command, without the output file the campaign gives it."""
    args = CAMPAIGN.command(run)
    keep = [a for i, a in enumerate(args) if a != "--out" and (i == 0 or args[i - 1] != "--out")]
    return " ".join(keep)


display(
    Markdown(
        "| run | command | draft | shape | dtype | $K$ | seed | repeats |\n"
        "|---|---|---|---|---|---|---|---|\n"
        + "\n".join(
            f"| {run} | `{command(run)}` "
            f"| {res['settings']['draft']} | {shape_of(res['settings'])} "
            f"| {res['settings']['dtype']}{LAYOUTS.get(res['settings']['pack'], '')} "
            f"| {min(res['settings']['K'])}-{max(res['settings']['K'])} "
            f"| {res['settings']['seed']} | {res['settings']['repeats']} |"
            for run, res in results.items()
        )
        + f"\n\nEvery run decodes {len(results['recommended_T1']['prompts'])} prompts, "
        f"{results['recommended_T1']['settings']['max_new_tokens']} new tokens each, in the "
        "dtype and weights its settings resolved to on this machine (the table). `recommended` "
        f"is `bench` without flags at the campaign's commit: {RECOMMENDED}."
    )
)

# %%
speed = pd.concat(
    [
        bench.runs_frame(res, intervals=True)
        .query("method == 'speculative'")
        .assign(
            panel=SPEED_RUNS[run][0],
            config=SPEED_RUNS[run][1],
            repeats=res["settings"]["repeats"],
        )
        for run, res in results.items()
    ]
)
cols = [
    "speedup",
    "speedup_low",
    "speedup_high",
    "predicted_speedup",
    "efficiency",
    "alpha_iid",
    "tau",
    "repeats",
]
speed.set_index(["panel", "config", "K"])[cols]

# %%
repeats = sorted(set(speed.repeats))
fig = figs.speedup_intervals(
    speed,
    title=(
        f"Speculative vs autoregressive decoding, SmolLM2-135M-Instruct, {MACHINE_SHORT}\n"
        f"({' or '.join(map(str, repeats))} repeat{'s' if repeats != [1] else ''} of each prompt "
        "per run, runs not pooled)"
    ),
)
savefig("05_speedup_vs_K", fig)
# %%
# NBVAL_CHECK_OUTPUT
H = HEADLINE
print("headline K, chosen on the first run at T = 1:", H["K"])
print(
    "interval above 1 at that K at T = 1, on the replicate and in greedy:",
    all(H[run]["low"] > 1 for run in ("T1", "replicate", "greedy")),
)
print("greedy's own best K is the same K:", H["greedy_best_K"] == H["K"])


# %%
def best(config: str, panel: str = "T = 1") -> pd.Series:
    d = speed[(speed.panel == panel) & (speed.config == config)]
    return d.loc[d.speedup.idxmax()]


def best_text(config: str, panel: str = "T = 1") -> str:
    b = best(config, panel)
    return f"{with_interval(b.speedup, b.speedup_low, b.speedup_high)} at $K = {b.K:.0f}$"


ng_speed = speed[speed.config == "prompt lookup"]
ee_speed = speed[speed.config == "early exit (untrained)"]
eff_trained = speed[speed.config.str.startswith(("recommended", "chain"))].efficiency
eff_ng = ng_speed.efficiency
display(
    Markdown(
        f"**Headline.** On {MACHINE}, the recommended configuration ({RECOMMENDED}) runs at "
        f"$T = 1$ at **{headline_at('T1')}** the speed of autoregressive decoding at "
        f"$K = {H['K']}$ (95% interval over prompts). That $K$ is {CHOSEN_AS.replace('that', 'the')} "
        f"it was chosen on; at the same $K$ the replicate, with other sampling seeds, measured "
        f"{headline_at('replicate')}, and greedy decoding {headline_at('greedy')} (greedy's own "
        f"best $K$: {H['greedy_best_K']}). Tokens per second at that $K$: "
        f"{H['T1']['tokens_per_s']:.1f} against {H['T1']['baseline_tokens_per_s']:.1f} "
        f"autoregressive.\n\n"
        f"The chain, the trained head with one candidate per position, reaches "
        f"{best_text('chain (trained head, one candidate)')}. Prompt lookup ranges over "
        f"{ng_speed.speedup.min():.2f}-{ng_speed.speedup.max():.2f}× for $K$ = "
        f"1-{ng_speed.K.max()}, the untrained early exit over {ee_speed.speedup.min():.2f}-"
        f"{ee_speed.speedup.max():.2f}× for $K$ = 1-{ee_speed.K.max()}. The cost model, with each run's measured acceptance and pass costs, "
        f"predicts the trained head's speedups to within measured / predicted = "
        f"{eff_trained.min():.2f}-{eff_trained.max():.2f}; for prompt lookup the ratio is "
        f"{eff_ng.min():.2f}-{eff_ng.max():.2f}, where the model assumes a draft at every step "
        f"and prompt lookup drafts at {ngram_drafting:.0%} of its steps at $K = 1$."
    )
)

# %% [markdown]
# ## Discussion

# %%
rec = best("recommended")
chain = best("chain (trained head, one candidate)")
display(
    Markdown(
        "The draft is what decides whether speculative decoding pays. The untrained early exit "
        "of notebooks 03-04 is exact, and on this machine its best speedup is "
        f"{best_text('early exit (untrained)')}; prompt lookup costs almost nothing, and at "
        f"$T = 1$ its best is {best_text('prompt lookup')}. A one-layer head reading the target's "
        "own features, distilled on text the target itself wrote, accepts "
        f"{trained['T = 1'] / ee['T = 1']:.1f} times as often as the early exit at "
        f"{trained['c'] / ee['c']:.2f} of its cost (§3); as a "
        f"chain it reaches {chain.speedup:.2f}× and, as recommended ({RECOMMENDED}), "
        f"{rec.speedup:.2f}× at the best $K$ of each.\n\n"
        "The same cost model says where the speedup stops: a draft position is judged only when "
        "every one before it was accepted"
        + (", and the head accepts less at the later positions (§3)" if all_lower else "")
        + ", so each added draft token yields less than the one before it, at the same cost. "
        "int8 weights halve the bytes a draft step reads and take it from "
        f"{draft_ms['trained head']:.2f} to {draft_ms['trained head, int8']:.2f} ms "
        f"($c$ from {trained['c']:.3f} to {c_i8_same_base:.3f} on one target pass). What would move the "
        "speedup further is the draft's acceptance itself (notebook 06 §6 bounds what a tree "
        "of depth 2 can add with this head), more on-policy data (§2), and a machine where a "
        "draft step costs less relative to a target pass (notebook 03 §8 measures a GPU's $c$)."
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
