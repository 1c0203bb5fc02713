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
import json

import numpy as np
import pandas as pd

from specdec_lib.config import DATA_DIR, RESULTS_DIR, quick

QUICK = quick()
print("quick mode:", QUICK)
""")

write("05_drafting_strategies.ipynb")
