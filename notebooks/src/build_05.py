"""Generate ``notebooks/05_drafting_strategies.ipynb`` (without outputs); see nbbuild.py for the workflow.

Work in progress (session 2): the text of the opening sections; the measured sections follow once the
drafter's data, training runs and benchmarks are committed.
"""

from __future__ import annotations

from nbbuild import code, md, write

md(r"""
# 05 · Drafting strategies: how a draft is made, and how to choose one

**Aim.** Notebooks 03 and 04 measured speculative decoding with the default pair's untrained
early-exit draft: it is exact, and it is slower than decoding without it, because the draft is
almost always wrong ($\alpha < 0.1$). Speculative decoding pays only when the draft agrees with the
target often (high $\alpha$) and costs little (low $c$). No packaged small model shares SmolLM2's
tokenizer, so this notebook makes one — offline, on this CPU — and compares it with the other ways
to draft:

| drafter | what it is | cost $c$ |
|---|---|---|
| early exit | the target's first 4 layers and its own head, untrained | ≈ 0.3 |
| prompt lookup (n-gram) | copy what followed the latest earlier occurrence of the last 1-3 tokens | ≈ 0 |
| distilled layers | a small LM: the target's frozen embedding and head around 2 of its layers, distilled | ≈ 0.1 |
| feature-level head | one Llama layer reading the target's hidden state and the next token (EAGLE) | ≈ 0.07 |

and, on top of any of them, a **dynamic draft length** (Hugging Face's heuristic schedule and a
confidence threshold) next to a fixed $K$.

**Theory (Leviathan et al. 2022).** With acceptance rate $\alpha$ at every position, a step with
$K$ drafts emits on average $\tau(K) = (1 - \alpha^{K+1}) / (1 - \alpha)$ tokens, and costs
$K\,t_\text{draft} + t_\text{target}(K+1)$. Relative to one target pass per token, the speedup is

$$S(K) = \frac{\tau(K)}{K c + t_\text{target}(K+1) / t_\text{target}(1)}, \qquad c = t_\text{draft} / t_\text{target}(1).$$

So a draft has two numbers, $\alpha$ and $c$, and the machine has one curve, $t_\text{target}(n)$:
how much a pass over $n$ tokens costs more than a pass over one. In float32 on this CPU a 2-token
pass costs about 1.6 times a 1-token pass; in bfloat16 about 1.03 times (`../shared/MEASURED.md`,
re-measured below). That is the lever that makes a CPU speedup possible at all.

**How the draft is trained.**

1. *On-policy data* (DistillSpec, Zhou et al. 2023, arXiv 2310.08461): the target samples
   continuations of 400 hand-written prompts at $T = 1$, in bfloat16, in batches
   (`python -m specdec_lib gen-data`). Only the token ids are committed (`data/drafter/onpolicy/`,
   uint16).
2. *Teacher pass*: `train-drafter` teacher-forces the target over the stored ids and keeps its
   distribution $p_j$ (top 64 tokens) and hidden states at every position, in a local cache.
3. *Distillation*: the draft's $q_j$ is trained towards $p_j$ with a cross-entropy plus
   $1 - \sum_x \min(p_j(x), q_j(x))$, the probability of a rejection — the quantity speculative
   decoding pays for. The draft proposes only the 8,192 tokens that carry most of the target's
   probability: $q = 0$ elsewhere, which is still exact (a token the draft never proposes is emitted
   through the residual) and makes the draft's output layer six times cheaper.
4. *Measurement*: $\alpha$ by decoding on 45 held-out prompts (`eval-drafter`), and speed by the
   benchmark (`bench --draft trained`), never from the training loss.
""")

code(r"""
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from specdec_lib.config import DATA_DIR, quick
from specdec_lib.distill import load_manifest, summary
from specdec_lib.plotting import COLORS, savefig
from specdec_lib.results import read_json
from specdec_lib.theory import expected_tokens_per_step

pd.set_option("display.precision", 3)
QUICK = quick()
DRAFTER = DATA_DIR / "drafter"
EXPERIMENTS = DRAFTER / "experiments"
print("quick mode:", QUICK)
""")

md(r"""
## 1. The data: on-policy samples from the target

`python -m specdec_lib gen-data` samples continuations of the 400 training prompts from the target
in bfloat16, 64 prompts at a time, up to 256 new tokens each, at $T = 1$ with no top-k (the plain
law the drafter must match). The first shards were made with transformers' `generate`; the rest with
the library's own loop (`distill.sample_batch`), which drops a row from the batch (and its KV cache)
as soon as it emits EOS instead of padding it to the end: with an instruct model fed raw prompts,
many rows stop early (some at once), and `generate` kept paying for them. Both sample the target's
law (the own loop is tested against the exact law on the tiny models, with rows leaving the batch).
""")

code(r"""
manifest = load_manifest(DRAFTER / "onpolicy")
shards = pd.DataFrame(manifest["shards"])
shards["tokens/s"] = shards.generated_tokens / shards.seconds
by_sampler = shards.groupby("sampler").agg(
    shards=("shard", "count"), tokens=("generated_tokens", "sum"), seconds=("seconds", "sum")
)
by_sampler["tokens/s"] = by_sampler.tokens / by_sampler.seconds
s = summary(DRAFTER / "onpolicy")
by_sampler
""")

code(r"""
# NBVAL_CHECK_OUTPUT
print("on-policy data of at least 1M generated tokens:", s["generated_tokens"] >= 1_000_000)
print("every shard records its sampler:", set(shards.sampler) <= {"hf", "own"})
""")

code(r"""
print(f"{s['generated_tokens']:,} generated tokens in {s['sequences']:,} sequences "
      f"({s['shards']} shards), {s['seconds'] / 3600:.2f} h of generation")
""")

md(r"""
## 2. Which architecture? A pilot at equal data

Before scaling the data, four kinds of draft were trained on the same first 11 shards (about 114k
generated tokens; the 12th shard is held out) and measured by decoding on the 45 held-out prompts
($K = 1$, $T = 1$, 48 new tokens each; every proposal is judged, so $lpha$ is the per-token
acceptance rate), with their cost $c$ measured in bfloat16 through the same `Drafter` interface the
decoder uses:

* **feature head, last layer**: one Llama layer (initialised from the target's last layer) reading
  the target's last hidden state and the next token (EAGLE);
* **feature head, fused**: the same, reading target layers 2, 14 and 29, fused (EAGLE-3's idea);
* **layers 0 + 29** and **layers 0 + 1 + 29**: a small LM on tokens made of copies of those target
  layers between the target's frozen embedding and output rows (the "target-initialised layers"
  draft of `../shared/MEASURED.md`).

The first two pilot runs (`feat_last`, `feat_fused`) fed the target's raw hidden state to the head;
it has a few dimensions with values in the hundreds (RMS ≈ 100s against ≈ 1 for the token
embeddings), which drowned the token. The head now RMS-normalises both inputs and brings them back
to the residual stream's scale (`featn_*`); the records keep both (`feat_fused` has a training
record only: its weights predate the change and no longer load). `feat_last`'s cost was measured
before the drafter learnt to warp only its 8,192 tokens (about 0.01 of $c$ more).
""")

code(r"""
def load_experiments(prefix=""):
    rows, curves = [], {}
    for path in sorted(EXPERIMENTS.glob(f"{prefix}*.eval.json")):
        name = path.name.removesuffix(".eval.json")
        ev = read_json(path)
        tr = read_json(EXPERIMENTS / f"{name}.train.json")
        st = tr["settings"]
        r1 = ev["by_temperature"]["1"]
        rows.append({
            "draft": name,
            "arch": st["arch"] if st["arch"] == "layers" else f"feature {st['feature_layers']}",
            "train tokens": tr["train_tokens"],
            "epochs": st["epochs"],
            "lr": st["lr"],
            "alpha (T=1, decoding)": r1["alpha"],
            "proposals": r1["proposed"],
            "alpha bound (top-64, held-out shard)": tr["history"][-1]["eval_alpha"],
            "c (bf16)": ev["costs"]["c"],
            "t_target(2)/t_target(1)": ev["costs"]["t_target_s"][1] / ev["costs"]["t_target_s"][0],
        })
        curves[name] = pd.DataFrame(tr["history"])
    return pd.DataFrame(rows).set_index("draft"), curves


pilot, pilot_curves = load_experiments("pilot_")
pilot["S(K=1) predicted"] = [
    expected_tokens_per_step(r["alpha (T=1, decoding)"], 1) / (r["c (bf16)"] + r["t_target(2)/t_target(1)"])
    for _, r in pilot.iterrows()
]
pilot
""")

code(r"""
# NBVAL_CHECK_OUTPUT
best = pilot["alpha (T=1, decoding)"].idxmax()
print("architectures compared at equal data:", sorted(set(pilot.arch)))
print("highest acceptance in the pilot:", best)
""")

code(r"""
fig, ax = plt.subplots(figsize=(7, 4))
for name, h in pilot_curves.items():
    ax.plot(h.step, h.eval_alpha, marker="o", ms=3, label=name.removeprefix("pilot_"))
ax.set(xlabel="training step (8 sequences each)", ylabel=r"held-out $\sum_x \min(p, q)$ (top-64 bound)",
       title="Pilot: acceptance on the held-out shard during training (114k tokens)")
ax.legend(fontsize=8)
savefig("05_pilot_curves");
""")

md(r"""
**Reading the pilot.** At equal data and equal training steps:

* normalising the head's inputs is what made the feature head work at all (`featn_last` against
  `feat_last`, which also had fewer epochs and a lower learning rate);
* reading three target layers (2, 14, 29) beats reading the last one, at the same cost: the fusion
  is one extra matrix product per drafted token;
* the token-level drafts built from target layers accept less *and* cost more: they must rebuild
  the context from token embeddings with two or three layers, where the feature head starts from
  the target's own summary of it. (`../shared/MEASURED.md` saw the opposite order with 51k tokens
  and the raw, unnormalised head: 0.30 against 0.26; with normalised inputs the head wins.)

The chosen architecture is therefore the **fused feature head** (one layer, target layers 2, 14,
29). Its held-out acceptance flattened as the learning rate decayed, while the acceptance on its
training batches kept climbing above it (the records' `train_alpha` against `eval_alpha`): with
114k tokens the head starts to learn its data by heart. The next step is
the data: the full on-policy set.

*Status (session 2 of the drafter issue):* the full on-policy data set is generated (section 1);
the full-data training, the learning curve over the data size, the acceptance at
$T = 0.7$ and greedy, the benchmark of the trained pair in bfloat16, the n-gram drafter and the
dynamic draft length follow in the next session. The predicted speedups in the table above use
each draft's measured $\alpha$ and $c$ and the measured $t_\text{target}(2) / t_\text{target}(1)$;
they are predictions, not measurements.
""")

write("05_drafting_strategies.ipynb")
