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
# # 01 · The acceptance rule: why speculative sampling is exact
#
# **What this notebook finds.** The acceptance rule (accept a draft token $x \sim q$ with
# probability $\min(1, p(x)/q(x))$, otherwise emit a token of $\operatorname{norm}(\max(0, p - q))$,
# and add a bonus token from the target when all $K$ drafts pass) emits tokens distributed exactly as
# the target's $p$: at one position, over a $K$-token step, and over a whole generation; it accepts a
# draft with probability $\alpha = \sum_x \min(p(x), q(x))$. Computed by exact enumeration, the output
# law of the library's code path equals $p$ to float64 rounding on every pair of distributions
# tried, and the rule written out below as a short function has the same law as the library's.
# Exactness breaks in two ways, both shown with exact laws: the prototype's correction biases the
# output, and so does a ratio built from a distribution other than the one the draft was drawn from.
# Under a constant acceptance rate a step yields $(1 - \alpha^{K+1})/(1 - \alpha)$ tokens on average,
# and the predicted speedup has a best $K$ that grows with $\alpha$ and shrinks with the draft's cost;
# greedy decoding is the same rule at temperature 0. The checked cells below carry the numbers. This
# is the first notebook of the series and assumes nothing from the others.

# %% [markdown]
# **Aim.** In speculative decoding a cheap *draft* model proposes $K$ tokens and an expensive *target*
# model checks all of them in one forward pass. This notebook derives the rule that decides which
# proposals to keep, proves that the tokens it emits follow *exactly* the target's distribution, and
# checks the proof numerically, to machine precision, on the library's own code path
# (`specdec_lib.sampling.verify`). It then shows what breaks exactness: the correction step of
# **the prototype**, an earlier implementation of speculative sampling (the one this series
# corrects) that, after a rejection, samples from $p$ with the rejected token removed instead of from
# $\operatorname{norm}(\max(0, p - q))$; and a draft distribution in the ratio that is not the one
# the token was drawn from. Finally it derives how many tokens one step yields and what that means
# for speed, and shows that greedy decoding is the same algorithm at temperature 0.
#
# References: Y. Leviathan, M. Kalman, Y. Matias, *Fast Inference from Transformers via Speculative
# Decoding*, 2022 ([arXiv:2211.17192](https://arxiv.org/abs/2211.17192)); C. Chen et al.,
# *Accelerating Large Language Model Decoding with Speculative Sampling*, 2023
# ([arXiv:2302.01318](https://arxiv.org/abs/2302.01318)).
#
# **Contents**
#
# 1. From rejection sampling to speculative sampling
# 2. The theorem and its proof (one position, then a $K$-token step), and the rule as code
# 3. Exact numerical check of `verify`
# 4. The prototype's correction is wrong
# 5. The distributions in the ratio must be the ones sampled from
# 6. How many tokens per step, and how much faster
# 7. Greedy decoding as the limit $T \to 0$
# 8. Discussion: what we showed, what's next
#
# Everything here is exact arithmetic on small distributions or a short seeded Monte Carlo run; the
# notebook runs on a CPU in well under a minute. With `SPECDEC_QUICK=1` the Monte Carlo part uses
# fewer samples; the outputs of the cells marked `# NBVAL_CHECK_OUTPUT` are the same in both modes.

# %%
# %matplotlib inline
import itertools
import math
import warnings
from collections import defaultdict
from fractions import Fraction
from functools import cache

import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

# tqdm.auto (imported by the decoders) warns when ipywidgets is missing; no progress bars here.
warnings.filterwarnings("ignore", message="IProgress not found")

from specdec_lib import config, costs
from specdec_lib.figures import acceptance_rule as figs
from specdec_lib.figures.provenance import data_read
from specdec_lib.figures.style import savefig
from specdec_lib.research import stats
from specdec_lib.sampling import (
    Warp,
    acceptance_rate,
    prototype_correction,
    residual,
    residual_correction,
    sample,
    step_distributions,
    verify,
)

QUICK = config.quick()
SEED = 1
print("quick mode:", QUICK)

# %% [markdown]
# ## 1. From rejection sampling to speculative sampling
#
# **Notation**, used in every notebook of the series, with the same names in the code:
#
# | symbol | in code | meaning |
# |---|---|---|
# | $p$ | `p`, `target_probs` | the target (verifier) model's distribution of the next token |
# | $q$ | `q`, `draft_probs` | the draft model's distribution of the next token: the one the draft token was *actually sampled from* |
# | $V$ | `V` | vocabulary size |
# | $K$ | `K` | number of draft tokens proposed in one step |
# | $\alpha$ | `alpha` | acceptance rate $\alpha = \sum_x \min(p(x), q(x))$ |
# | $c$ | `c` | cost of one draft forward pass, in units of one target forward pass |
# | $r$ | `residual(p, q)` | the residual distribution $r = \operatorname{norm}(\max(0, p - q))$ |
#
# **Rejection sampling.** The textbook way to sample from $p$ with proposals from $q$: choose $M$ with
# $p(x) \le M\,q(x)$ for every $x$, propose $x \sim q$, accept it with probability
# $p(x) / (M q(x))$, and otherwise discard it and propose again. The accepted token is exactly
# $p$-distributed, but it takes $M$ proposals on average, and no finite $M$ exists when $q$ misses a
# token that $p$ can produce.
#
# **Speculative sampling** changes two things. It takes $M = 1$: a proposal $x \sim q$ is accepted
# with probability $\min(1, p(x)/q(x))$, so tokens that the draft under-proposes ($q(x) \le p(x)$) are
# always kept and tokens it over-proposes are thinned down to $p(x)$. And after a rejection it does not
# propose again: it draws *one* token from the **residual**, the part of $p$ that the accepted proposals
# cannot supply. Every proposal therefore yields exactly one token, accepted or corrected, and that is
# what allows the draft to run $K$ tokens ahead.
#
# > **The rule.** Draw $x \sim q$. Accept $x$ with probability $\min\!\left(1, \dfrac{p(x)}{q(x)}\right)$.
# > Otherwise emit $y \sim r$, where
# > $$r(y) = \frac{\max\bigl(0,\ p(y) - q(y)\bigr)}{\sum_z \max\bigl(0,\ p(z) - q(z)\bigr)}.$$
#
# In a language model $p$ and $q$ are the next-token distributions of the target and the draft given
# the text so far. One **step** of speculative decoding: the draft proposes $x_0, \dots, x_{K-1}$
# autoregressively; the target scores the text plus all $K$ drafts in one forward pass, which gives
# $p_0, \dots, p_K$; the rule is applied left to right and the step stops at the first rejection; if
# nothing is rejected, one **bonus** token is drawn from $p_K$.
#
# **The rule as code.** One step, written out. `coin(a)` returns `True` with probability $a$ and
# `draw(probs)` returns a token with law `probs`; they are arguments so that section 2.3 can
# enumerate every outcome of this very function and compare its law with the library's. The
# library's `verify` applies the same rule with one uniform per position, drawn all at once, and
# checks its inputs.


# %%
def speculative_step(x, q, p, coin, draw):
    # x: the K draft tokens, x[i] drawn from q[i]; p: the target's K + 1 rows p_0, ..., p_K.
    K = len(x)
    for i in range(K):
        if not coin(min(1.0, float(p[i, x[i]] / q[i, x[i]]))):  # reject x_i ...
            r = (p[i] - q[i]).clamp(min=0)  # ... and emit a token of r = norm(max(0, p_i - q_i))
            return [*x[:i], draw(r / r.sum())]
    return [*x, draw(p[K])]  # all K drafts accepted: a bonus token from p_K


# %% [markdown]
# A small example with $V = 8$: $\alpha$ from `acceptance_rate`, $r$ from `residual`.

# %%
# NBVAL_CHECK_OUTPUT
p = torch.tensor([0.30, 0.20, 0.15, 0.12, 0.10, 0.06, 0.04, 0.03], dtype=torch.float64)
q = torch.tensor([0.12, 0.28, 0.05, 0.20, 0.10, 0.15, 0.02, 0.08], dtype=torch.float64)
alpha = float(acceptance_rate(p, q))
r = residual(p, q)
print(f"alpha = {alpha:.2f}   1 - TV(p, q) = {1 - stats.tv(p, q):.2f}")
print("r =", np.round(r.numpy(), 3))

# %% [markdown]
# The left panel shows $p$ and $q$. The right panel shows where the emitted token comes from: the
# accepted drafts supply $q(x)\min(1, p(x)/q(x)) = \min(p(x), q(x))$ (orange), the residual supplies
# the rest, $\max(0, p(x) - q(x))$ (green), and together they fill $p$ exactly (blue outline). The
# residual puts mass only on the tokens the draft under-proposes.

# %%
fig = figs.acceptance_split(p, q, torch.minimum(p, q), (1 - alpha) * r, alpha=alpha)
savefig("01_residual", fig)


# %% [markdown]
# ## 2. The theorem and its proof
#
# ### 2.1 One position
#
# **Theorem.** Let $x \sim q$ be accepted with probability $a(x) = \min(1, p(x)/q(x))$, and after a
# rejection let $y \sim r$ be emitted instead. Then for every token $x$
#
# $$
# P(\text{output} = x) \;=\; q(x)\,\min\!\left(1, \frac{p(x)}{q(x)}\right) + (1 - \alpha)\, r(x) \;=\; p(x),
# \qquad
# \alpha = P(\text{accept}) = \sum_x \min\bigl(p(x), q(x)\bigr) = 1 - \mathrm{TV}(p, q),
# $$
#
# where $\mathrm{TV}(p, q) = \tfrac12 \sum_x |p(x) - q(x)|$ is the total-variation distance.
#
# **Proof.**
#
# 1. *Acceptance probability.*
#    $P(\text{accept}) = \sum_x q(x) \min\bigl(1, p(x)/q(x)\bigr) = \sum_x \min\bigl(q(x), p(x)\bigr) = \alpha$.
#    A token with $q(x) = 0$ is never proposed and contributes 0 on both sides.
# 2. *$\alpha = 1 - \mathrm{TV}(p,q)$.* With $\min(a, b) = \tfrac12(a + b - |a - b|)$ and
#    $\sum_x p(x) = \sum_x q(x) = 1$:
#    $\alpha = 1 - \tfrac12 \sum_x |p(x) - q(x)| = 1 - \mathrm{TV}(p, q)$.
# 3. *The residual's normaliser is $1 - \alpha$.* Since $\max(0, p - q) = p - \min(p, q)$,
#    $\sum_z \max(0, p(z) - q(z)) = 1 - \alpha$, so $(1 - \alpha)\, r(x) = \max(0, p(x) - q(x))$.
# 4. *The output.* The output is $x$ either when $x$ is proposed and accepted, with probability
#    $q(x)\,a(x) = \min(p(x), q(x))$, or when the proposal, *whichever token it was*, is rejected
#    (probability $1 - \alpha$ in total) and the residual draw gives $x$. Hence
#    $$P(\text{output} = x) = \min\bigl(p(x), q(x)\bigr) + \max\bigl(0, p(x) - q(x)\bigr) = p(x). \qquad \blacksquare$$
#
# Three remarks that the rest of the notebook relies on.
#
# * The correction in step 4 does not depend on which token was rejected: the proof only uses the total
#   rejection probability $1 - \alpha$. A correction that depends on the rejected token, like the
#   prototype's (section 4), is not covered by the proof, and fails.
# * In steps 1 and 4, $q$ is the distribution $x$ was **drawn from**. If the ratio used some other
#   $q'$, the accepted mass would be $q(x)\min(1, p(x)/q'(x)) \ne \min(p(x), q(x))$ and step 4 would
#   break (section 5).
# * Edge cases. If $q = p$ then $\alpha = 1$ and nothing is ever rejected ($r$ is $0/0$ and never used;
#   `residual` returns $p$ there). If $p$ and $q$ have disjoint supports then $\alpha = 0$, every draft
#   is rejected and $r = p$: the step falls back to sampling the target.
#
# ### 2.2 A $K$-token step
#
# Let $s$ be the text so far. The draft samples $x_i \sim q_i = q(\cdot \mid s, x_{<i})$ for
# $i = 0, \dots, K-1$. The target, in **one** forward pass over $s, x_0, \dots, x_{K-1}$, returns
# $p_i = p(\cdot \mid s, x_{<i})$ for $i = 0, \dots, K$ (a causal model outputs the next-token
# distribution at every position of its input); $p_K$ is its distribution after all $K$ drafts. With independent uniforms $u_i$, draft $x_i$ is accepted iff
# $u_i < \min\bigl(1, p_i(x_i) / q_i(x_i)\bigr)$. Let $n$ be the position of the first rejection
# ($n = K$ if there is none). The step emits the $n + 1$ tokens
#
# $$
# x_0, \dots, x_{n-1},\ y,
# \qquad
# y \sim \begin{cases} r_n = \operatorname{norm}\bigl(\max(0,\ p_n - q_n)\bigr) & \text{if } n < K \text{ (correction)},\\[2pt]
# p_K & \text{if } n = K \text{ (bonus)}.\end{cases}
# $$
#
# The drafts after a rejection, $x_{n+1}, \dots$, are thrown away: they were drawn given $x_n$, which
# is not part of the output.
#
# **Claim.** For each position $i \le K$ that the step reaches, the token emitted at position $i$,
# given that $i$ is reached and given the emitted prefix $t = (x_0, \dots, x_{i-1})$, is distributed as
# $p(\cdot \mid s, t)$. Hence the text a step emits has the target's law, and since the next step starts
# from the new text with fresh randomness, so does the whole generation.
#
# **Proof**, by induction over the positions $i$. Let $A_i$ be the event that $x_0, \dots, x_{i-1}$
# were all accepted ($A_0$ always holds), and condition on $A_i$ and $x_{<i} = t$.
#
# * *The draft at $i$ is still a fresh sample of $q_i$.* $x_i$ was drawn from $q(\cdot \mid s, t)$ with
#   new randomness, and $A_i$ depends only on $x_{<i}$ and $u_{<i}$. So, given $A_i$ and $x_{<i} = t$,
#   still $x_i \sim q_i$, and $u_i$ is a fresh uniform.
# * *Case $i < K$.* Position $i$ is then exactly the one-position situation of 2.1 with
#   $(p, q) = (p_i, q_i)$: it emits $x_i$ (accepted) or $y \sim r_i$ (rejected). By the theorem the
#   emitted token is distributed as $p_i = p(\cdot \mid s, t)$.
# * *Case $i = K$: the bonus.* On $A_K$ the step emits $y \sim p_K = p(\cdot \mid s, x_{<K})$, the
#   target's own conditional. There is no draft to check, and the verifying pass has computed $p_K$
#   anyway, so the extra token is free.
# * *Induction.* If $x_i$ is accepted, the step moves to $i + 1$ on the event $A_{i+1}$ with emitted
#   prefix $(t, x_i)$, and the same argument applies.
#
# Multiplying the conditionals, $P(\text{emitted } z_0, \dots, z_m) = \prod_j p(z_j \mid s, z_{<j})$,
# the target's law. $\blacksquare$
#
# The step reaches position $i$ with probability $P(A_i)$; when the distributions do not depend on the
# prefix this is $\prod_{j<i} \alpha_j$ with $\alpha_j = \sum_x \min(p_j(x), q_j(x))$. These reach
# probabilities decide the speed (section 6).
#
# ### 2.3 The rule on the page is the library's rule
#
# `speculative_step` of section 1 and the library's `verify` should apply the same rule. We check
# that exactly, on small vocabularies, by comparing two exact laws of the tokens one step emits when
# the distributions $q_0, \dots, q_{K-1}$ and $p_0, \dots, p_K$ are fixed:
#
# * `exact_law` runs `speculative_step` along every path of its random choices (each draft
#   $x_i \sim q_i$, each accept-or-reject coin, the final draw), multiplies the probabilities of the
#   choices made on each path, and adds them up by output;
# * `library_step_law` enumerates every draft sequence and reads the acceptance probabilities and the
#   distribution of the final token from `sampling.step_distributions`, the numbers `verify` samples
#   from (section 3 says more about them).
#
# The cases: $V \in \{2, 3, 4\}$, $K \in \{1, 2, 3\}$, and four kinds of rows: $p$ and $q$ drawn
# uniformly on the simplex, $q = p$, $q$ with a token it never proposes, and $p$ and $q$ on disjoint
# halves of the vocabulary. So that the comparison can fail, the library's law is also computed with
# the prototype's correction plugged in (section 4): it must then differ from the rule's.


# %%
class NewChoice(Exception):
    # Raised when a run reaches a random choice that its path does not fix yet.
    pass


def run_along(run, path):
    # run(coin, draw) with its random choices fixed by path: (its output, the path's probability).
    made, prob = [], 1.0

    def choose(probs):
        nonlocal prob
        if len(made) == len(path):  # a choice the path does not fix: branch on its outcomes
            raise NewChoice([path + (k,) for k, pk in enumerate(probs) if pk > 0])
        k = path[len(made)]
        made.append(k)
        prob *= float(probs[k])
        return k

    out = run(lambda a: choose([1 - a, a]) == 1, choose)
    return out, prob


def exact_law(run):
    # The exact law of run(coin, draw)'s output: run it along every path of its random choices.
    law, paths = defaultdict(float), [()]
    while paths:
        path = paths.pop()
        try:
            out, prob = run_along(run, path)
        except NewChoice as branch:
            paths += branch.args[0]
            continue
        law[tuple(out)] += prob
    return dict(law)


def one_step(q, p):
    # One step of speculative_step with its drafts drawn too: x_i ~ q_i.
    return lambda coin, draw: speculative_step([draw(q_i) for q_i in q], q, p, coin, draw)


def library_step_law(q, p, correction=residual_correction):
    # The exact law of the tokens one step emits, from the numbers verify samples from.
    K, V = q.shape
    law = defaultdict(float)
    for x in itertools.product(range(V), repeat=K):  # every draft sequence
        accept, final = step_distributions(torch.tensor(x), q, p, correction)
        reach = math.prod(float(q[i, x[i]]) for i in range(K))  # P(draft = x)
        for n in range(K + 1):  # n drafts accepted, then the corrected or bonus token y
            stop = reach * (1 - float(accept[n])) if n < K else reach
            for y in range(V):
                law[x[:n] + (y,)] += stop * float(final[n, y])
            if n < K:
                reach *= float(accept[n])
    return dict(law)


def step_case(kind, V, K, rng):
    # Fixed draft rows q [K, V] and target rows p [K + 1, V] of one kind.
    p, q = rng.dirichlet(np.ones(V), size=K + 1), rng.dirichlet(np.ones(V), size=K)
    if kind == "q = p":
        q = p[:K].copy()
    elif kind == "q with zeros":
        q[:, 0] = 0  # token 0 is never proposed
    elif kind == "disjoint supports":
        p[:, V // 2 :], q[:, : V // 2] = 0, 0
    return (torch.from_numpy(d / d.sum(1, keepdims=True)) for d in (q, p))


def tv_law(a, b):
    # Total-variation distance between two laws given as {outcome: probability}.
    return 0.5 * sum(abs(a.get(z, 0.0) - b.get(z, 0.0)) for z in a.keys() | b.keys())


# %%
# NBVAL_CHECK_OUTPUT
rng = np.random.default_rng([SEED, 2])
rule_rows = []
for V, K in itertools.product((2, 3, 4), (1, 2, 3)):
    for kind in ("random", "q = p", "q with zeros", "disjoint supports"):
        q, p = step_case(kind, V, K, rng)
        rule = exact_law(one_step(q, p))
        rule_rows.append(
            {
                "kind": kind,
                "V": V,
                "TV library": tv_law(rule, library_step_law(q, p)),
                "TV prototype": tv_law(rule, library_step_law(q, p, prototype_correction)),
            }
        )
rule_check = pd.DataFrame(rule_rows)
# At V = 2, p without the rejected token is the residual: the prototype can only differ for V >= 3.
random3 = rule_check[(rule_check.kind == "random") & (rule_check.V >= 3)]
print("cases:", len(rule_check))
print(
    "law of speculative_step == law of the library's rule (TV < 1e-12):",
    rule_check["TV library"].max() < 1e-12,
)
print(
    "with the prototype's correction, the laws differ on every random case with V >= 3 (TV > 0.01):",
    bool((random3["TV prototype"] > 0.01).all()),
)

# %% [markdown]
# ## 3. Exact numerical check of `verify`
#
# `verify` draws its uniforms against the numbers returned by `sampling.step_distributions`: the
# acceptance probability of every draft position and the distribution of the final token for every
# possible stopping point. `stats.exact_output_law(p, q)` enumerates every draft token $x$ of the
# vocabulary, calls the same `step_distributions`, and returns, in float64,
#
# $$
# P(\text{output} = y) = q(y)\,a(y) + \sum_x q(x)\,\bigl(1 - a(x)\bigr)\,c_x(y),
# $$
#
# where $a$ is the acceptance probability and $c_x$ the distribution sampled after rejecting $x$. So the
# check below tests the code that runs, not a second implementation of the formula. (That `verify`
# samples correctly *from* these numbers is a statistical question: notebook 02 tests it with
# chi-square tests, on a real model.)
#
# **Test cases.** Pairs $(p, q)$ drawn from seven families, for $V \in \{3, 10, 100, 1000\}$:
#
# | family | how $p$ and $q$ are drawn |
# |---|---|
# | peaked | $p, q \sim \mathrm{Dirichlet}(0.1, \dots, 0.1)$ independently: most mass on a few tokens |
# | flat | $p, q \sim \mathrm{Dirichlet}(10, \dots, 10)$: close to uniform |
# | LM-like | $p = \mathrm{softmax}(3z)$, $q = \mathrm{softmax}(3z + z')$ with $z, z'$ standard normal: a draft that roughly agrees with the target |
# | q = p | $p \sim \mathrm{Dirichlet}(1)$, $q = p$ ($\alpha = 1$) |
# | near p | $q \propto p \cdot e^{10^{-6} z}$: $1 - \alpha$ of order $10^{-7}$, a residual built from tiny differences |
# | q with zeros | $q \sim \mathrm{Dirichlet}(1)$ with about half of its entries set to 0 |
# | disjoint supports | $p$ and $q$ on complementary halves of the vocabulary ($\alpha = 0$) |


# %%
def softmax(z):
    z = np.exp(z - z.max())
    return z / z.sum()


def draw_pair(family, V, rng):
    # One (p, q) pair of the given family, as float64 arrays summing to 1.
    if family == "peaked":
        return rng.dirichlet(np.full(V, 0.1), size=2)
    if family == "flat":
        return rng.dirichlet(np.full(V, 10.0), size=2)
    if family == "LM-like":
        z = 3 * rng.normal(size=V)
        return softmax(z), softmax(z + rng.normal(size=V))
    p = rng.dirichlet(np.ones(V))
    if family == "q = p":
        return p, p.copy()
    if family == "near p":
        q = p * np.exp(1e-6 * rng.normal(size=V))
        return p, q / q.sum()
    if family == "q with zeros":
        q = rng.dirichlet(np.ones(V)) * (rng.random(V) < 0.5)
        q[rng.integers(V)] += 0.1  # keep at least one token proposable
        return p, q / q.sum()
    if family == "disjoint supports":
        perm, k = rng.permutation(V), V // 2
        p, q = np.zeros(V), np.zeros(V)
        p[perm[:k]] = rng.dirichlet(np.ones(k))
        q[perm[k:]] = rng.dirichlet(np.ones(V - k))
        return p, q
    raise ValueError(family)


FAMILIES = ["peaked", "flat", "LM-like", "q = p", "near p", "q with zeros", "disjoint supports"]
N_PAIRS = {3: 100, 10: 100, 100: 100, 1000: 10}

# %%
rng = np.random.default_rng([SEED, 3])
rows = []
for V, n_pairs in N_PAIRS.items():
    for family in FAMILIES:
        for _ in range(n_pairs):
            p, q = (torch.from_numpy(d) for d in draw_pair(family, V, rng))
            rows.append(
                {
                    "family": family,
                    "V": V,
                    "alpha": float(acceptance_rate(p, q)),
                    "tv_correct": stats.tv(stats.exact_output_law(p, q), p),
                    "tv_prototype": stats.tv(stats.exact_output_law(p, q, prototype_correction), p),
                }
            )
cases = pd.DataFrame(rows)
max_tv = cases.pivot_table(index="family", columns="V", values="tv_correct", aggfunc="max")
print("max TV(output law of verify, p) over the pairs of each family and V:")
max_tv.loc[FAMILIES].map(lambda v: f"{v:.1e}")

# %%
# NBVAL_CHECK_OUTPUT
print("pairs checked:", len(cases))
print("alpha ranges over [0, 1]:", cases.alpha.min() < 1e-12 and cases.alpha.max() > 1 - 1e-12)
print("max TV(output, p) < 1e-12:", cases.tv_correct.max() < 1e-12)

# %% [markdown]
# The output law of the rule, as implemented, equals $p$ up to float64 rounding ($10^{-16}$ to
# $10^{-15}$, growing slowly with $V$ as rounding errors add up) for every pair: peaked and flat,
# $\alpha$ from 0 to 1, drafts with zeros, a residual built from differences of order $10^{-7}$.
#
# **A $K$-position step.** `stats.exact_step_law(q_dists, p_dists)` does the same for one whole step
# whose $K$ draft distributions $q_0, \dots, q_{K-1}$ and $K + 1$ target distributions
# $p_0, \dots, p_K$ are fixed. It returns the probability of reaching each position and the law of
# the token emitted there given that it is reached. The claim of 2.2 says that law is $p_i$, and the
# reach probability is $\prod_{j<i} \alpha_j$. Here $K = 4$, $V = 50$, with drafts of varying quality.

# %%
g = torch.Generator().manual_seed(SEED)
K, V = 4, 50
logits_p = 2 * torch.randn(K + 1, V, generator=g, dtype=torch.float64)
noise = torch.tensor([0.3, 1.0, 2.0, 4.0], dtype=torch.float64).view(
    K, 1
)  # a worse draft further out
logits_q = logits_p[:K] + noise * torch.randn(K, V, generator=g, dtype=torch.float64)
p_dists, q_dists = logits_p.softmax(-1), logits_q.softmax(-1)

reach, emitted = stats.exact_step_law(q_dists, p_dists)
alphas = acceptance_rate(p_dists[:K], q_dists)
print("alpha_i       :", np.round(alphas.numpy(), 3))
print("P(reach i)    :", np.round(reach.numpy(), 4))
print("prod alpha_<i :", np.round(torch.cat([torch.ones(1), alphas.cumprod(0)]).numpy(), 4))

# %%
# NBVAL_CHECK_OUTPUT
tv_step = [stats.tv(emitted[i], p_dists[i]) for i in range(K + 1)]
reach_expected = torch.cat([torch.ones(1, dtype=torch.float64), alphas.cumprod(0)])
print("every position emits p_i (max TV < 1e-12):", max(tv_step) < 1e-12)
print("P(reach i) = prod_{j<i} alpha_j:", torch.allclose(reach, reach_expected, rtol=0, atol=1e-12))

# %% [markdown]
# **A whole generation, with context-dependent distributions.** `exact_step_law` holds the
# distributions fixed per position. In a language model $q_i$ and $p_i$ depend on the drafts before
# position $i$, which is what the conditioning argument of 2.2 is about. To check that argument too, we
# take a toy "language model" over $V = 3$ tokens whose target and draft distributions are arbitrary
# (seeded random) functions of the whole prefix, and compute by enumeration the exact law of the first
# $m = 4$ tokens produced by repeated speculative steps: every draft sequence, every stopping point,
# every corrected or bonus token, then the next step from the new prefix. Each step goes through
# `step_distributions`, so any correction can be plugged in. The reference is the target's own law,
# $\prod_j p(z_j \mid z_{<j})$.

# %%
V_toy, M_TOY = 3, 4
rng = np.random.default_rng([SEED, 23])
# Target and draft next-token distributions for every prefix up to the longest one a step can see.
P_TOY, Q_TOY = {}, {}
for length in range(M_TOY + 4):
    for ctx in itertools.product(range(V_toy), repeat=length):
        z = 1.5 * rng.normal(size=V_toy)
        P_TOY[ctx] = torch.from_numpy(softmax(z))
        Q_TOY[ctx] = torch.from_numpy(softmax(z + rng.normal(size=V_toy)))


def target_law(m):
    # P(z_0..z_{m-1}) = prod_j p(z_j | z_<j)
    return {
        z: math.prod(float(P_TOY[z[:j]][z[j]]) for j in range(m))
        for z in itertools.product(range(V_toy), repeat=m)
    }


def speculative_law(m, K, correction=residual_correction):
    # Exact law of the first m tokens emitted by repeated speculative steps with K drafts each.
    @cache
    def law_from(prefix):
        if len(prefix) >= m:
            return {prefix[:m]: 1.0}
        law = defaultdict(float)
        for x in itertools.product(range(V_toy), repeat=K):  # every draft sequence
            q_i = torch.stack([Q_TOY[prefix + x[:i]] for i in range(K)])
            p_i = torch.stack([P_TOY[prefix + x[:i]] for i in range(K + 1)])
            accept, final = step_distributions(torch.tensor(x), q_i, p_i, correction)
            reach = math.prod(float(q_i[i, x[i]]) for i in range(K))  # P(draft = x)
            for n in range(K + 1):  # n = number accepted
                stop = reach * (1 - float(accept[n])) if n < K else reach
                for y in range(V_toy):  # the corrected (n < K) or bonus (n = K) token
                    for z, pz in law_from(prefix + x[:n] + (y,)).items():
                        law[z] += stop * float(final[n, y]) * pz
                if n < K:
                    reach *= float(accept[n])
        return dict(law)

    return law_from(())


reference = target_law(M_TOY)
seq_rows = [
    {
        "K": K,
        "TV correct rule": tv_law(speculative_law(M_TOY, K), reference),
        "TV prototype": tv_law(speculative_law(M_TOY, K, prototype_correction), reference),
    }
    for K in (1, 2, 3)
]
seq = pd.DataFrame(seq_rows).set_index("K")
print(f"exact law of the first {M_TOY} tokens, {V_toy**M_TOY} sequences, vs the target's law:")
seq.map(lambda v: f"{v:.1e}")

# %%
# NBVAL_CHECK_OUTPUT
print(
    "whole generation exact for K = 1, 2, 3 (TV < 1e-12):",
    bool((seq["TV correct rule"] < 1e-12).all()),
)
print(
    "prototype correction biased for K = 1, 2, 3 (TV > 0.01):",
    bool((seq["TV prototype"] > 0.01).all()),
)

# %% [markdown]
# ## 4. The prototype's correction is wrong
#
# The prototype applies the acceptance test correctly, but after rejecting draft token $x$ it
# samples from $p$ with *only the entry of $x$* reduced: it subtracts $\min(p(x), q(x))$ from $p(x)$
# and renormalises. A rejection is only possible when $p(x) < q(x)$, so
# that subtraction removes $p(x)$ entirely: the prototype samples from **$p$ with $x$ removed**,
#
# $$
# c_x^{\text{proto}}(y) = \frac{p(y)\,[y \ne x]}{1 - p(x)}
# \qquad\text{instead of}\qquad
# r(y) = \frac{\max(0, p(y) - q(y))}{1 - \alpha}.
# $$
#
# The library keeps this mistake as `sampling.prototype_correction`, only to show that the checks can
# fail. The same mistake (adjusting only the rejected entry instead of subtracting the two
# distributions) was once reported, and fixed, in a public EAGLE implementation
# ([SafeAILab/EAGLE#20](https://github.com/SafeAILab/EAGLE/issues/20)).
#
# Why it is wrong: after a rejection the output must supply only what the accepted drafts could not,
# $\max(0, p - q)$, which lives on the tokens the draft *under*-proposes. $p$ without $x$ also puts
# mass on tokens that the accepted drafts already cover in full, and those end up over-represented.
#
# **Worked example, $V = 3$, by hand.** $p = (\tfrac12, \tfrac14, \tfrac14)$,
# $q = (\tfrac14, \tfrac14, \tfrac12)$. The accepted mass is $\min(p, q) = (\tfrac14, \tfrac14, \tfrac14)$,
# so $\alpha = \tfrac34$. Only token 2 can be rejected ($p(2) < q(2)$), with total probability
# $q(2) - p(2) = \tfrac14$.
#
# * Correct rule: $r = \operatorname{norm}(\max(0, p - q)) = \operatorname{norm}(\tfrac14, 0, 0) = (1, 0, 0)$, and the output is
#   $(\tfrac14, \tfrac14, \tfrac14) + \tfrac14 (1, 0, 0) = (\tfrac12, \tfrac14, \tfrac14) = p$.
# * Prototype: $p$ without token 2 is $(\tfrac12, \tfrac14, 0) / \tfrac34 = (\tfrac23, \tfrac13, 0)$, and the
#   output is $(\tfrac14, \tfrac14, \tfrac14) + \tfrac14 (\tfrac23, \tfrac13, 0) = (\tfrac{5}{12}, \tfrac13, \tfrac14)$.
#
# Token 1, which the draft proposes exactly as often as the target wants ($p(1) = q(1)$), receives an
# extra $\tfrac1{12}$ that token 0 is missing: $\mathrm{TV} = \tfrac1{12} \approx 0.083$. The same
# computation in exact fractions, and the library's float64 law for comparison:

# %%
# NBVAL_CHECK_OUTPUT
F = Fraction
p3 = [F(1, 2), F(1, 4), F(1, 4)]
q3 = [F(1, 4), F(1, 4), F(1, 2)]
accepted3 = [min(a, b) for a, b in zip(p3, q3, strict=True)]  # q(x) min(1, p(x)/q(x))
rejected3 = [b - a for a, b in zip(accepted3, q3, strict=True)]  # q(x) (1 - min(1, p(x)/q(x)))
resid3 = [max(F(0), a - b) / (1 - sum(accepted3)) for a, b in zip(p3, q3, strict=True)]


def p_without(x):
    return [F(0) if y == x else p3[y] / (1 - p3[x]) for y in range(3)]


correct3 = [accepted3[y] + sum(rejected3) * resid3[y] for y in range(3)]
proto3 = [accepted3[y] + sum(rejected3[x] * p_without(x)[y] for x in range(3)) for y in range(3)]
tv3 = sum(abs(a - b) for a, b in zip(proto3, p3, strict=True)) / 2
print("correct rule:", [str(v) for v in correct3], " = p:", correct3 == p3)
print("prototype   :", [str(v) for v in proto3], " TV from p:", tv3)

lib3 = stats.exact_output_law(
    torch.tensor([0.5, 0.25, 0.25]), torch.tensor([0.25, 0.25, 0.5]), prototype_correction
)
print(
    "library's exact law of the prototype agrees:",
    np.allclose(lib3.numpy(), [float(v) for v in proto3], atol=1e-15),
)

# %% [markdown]
# **How large is the bias on random distributions?** We draw $p$ and $q$ independently and uniformly
# on the probability simplex ($\mathrm{Dirichlet}(1, \dots, 1)$, a typical "random toy distribution"),
# for $V \in \{3, 10, 100, 1000\}$, and compute the exact output law of the prototype's rule.

# %%
rng = np.random.default_rng([SEED, 4])
N_BIAS = {3: 400, 10: 400, 100: 400, 1000: 40}
bias_rows = []
for V, n_pairs in N_BIAS.items():
    for _ in range(n_pairs):
        p, q = (torch.from_numpy(rng.dirichlet(np.ones(V))) for _ in range(2))
        bias_rows.append(
            {
                "V": V,
                "alpha": float(acceptance_rate(p, q)),
                "tv_prototype": stats.tv(stats.exact_output_law(p, q, prototype_correction), p),
                "tv_correct": stats.tv(stats.exact_output_law(p, q), p),
            }
        )
bias = pd.DataFrame(bias_rows)
summary = bias.groupby("V").agg(
    pairs=("alpha", "size"),
    mean_alpha=("alpha", "mean"),
    proto_tv_mean=("tv_prototype", "mean"),
    proto_tv_5pct=("tv_prototype", lambda s: s.quantile(0.05)),
    proto_tv_95pct=("tv_prototype", lambda s: s.quantile(0.95)),
    correct_tv_max=("tv_correct", "max"),
)
summary["correct_tv_max"] = summary["correct_tv_max"].map(lambda v: f"{v:.1e}")
summary.round(3)

# %%
# NBVAL_CHECK_OUTPUT
print(
    "prototype: mean TV(output, p) > 0.05 for V >= 10:",
    bias[bias.V >= 10].tv_prototype.mean() > 0.05,
)
print(
    "prototype: TV > 0.05 on every pair with V >= 100:",
    bool((bias[bias.V >= 100].tv_prototype > 0.05).all()),
)
print("correct rule on the same pairs: max TV < 1e-12:", bias.tv_correct.max() < 1e-12)

# %%
means = summary.proto_tv_mean
display(
    Markdown(
        "The prototype's output law is off by a total-variation distance of "
        + ", ".join(f"{means[V]:.3f} at $V = {V}$" for V in means.index)
        + f" on average (5–95 % range {summary.proto_tv_5pct[100]:.3f}–"
        f"{summary.proto_tv_95pct[100]:.3f} at $V = 100$). On the same pairs the correct rule's "
        "output law stays within "
        f"$10^{{{math.ceil(math.log10(max(bias.tv_correct.max(), 1e-300)))}}}$ of $p$ in total "
        "variation."
    )
)

# %% [markdown]
# And on the test families of section 3 (mean TV of the prototype's output law from $p$). It is exact
# only where no correction mass can land in the wrong place: $q = p$ (nothing is rejected) and
# disjoint supports (every rejected $x$ has $p(x) = 0$, so "$p$ without $x$" is $p$, which is then
# also the residual).

# %%
cases.pivot_table(index="family", columns="V", values="tv_prototype", aggfunc="mean").loc[
    FAMILIES
].map(lambda v: f"{v:.1e}")

# %% [markdown]
# **Where the mass goes.** The figure repeats the right panel of the section-1 figure for the
# prototype's rule (left): the accepted drafts are the same, but the correction mass (red) is spread
# over every token in proportion to $p$, including the tokens that $q$ already over-proposes. On the
# right, the distribution of the bias over random pairs.

# %%
p, q = (
    torch.tensor(v, dtype=torch.float64)
    for v in (
        [0.30, 0.20, 0.15, 0.12, 0.10, 0.06, 0.04, 0.03],
        [0.12, 0.28, 0.05, 0.20, 0.10, 0.15, 0.02, 0.08],
    )
)
accepted = torch.minimum(p, q)
proto_law = stats.exact_output_law(p, q, prototype_correction)
fig = figs.prototype_bias(
    p,
    accepted,
    proto_law - accepted,
    tv_example=stats.tv(proto_law, p),
    bias=bias,
    summary=summary,
    tv_correct_max=bias.tv_correct.max(),
)
savefig("01_prototype_bias", fig)


# %% [markdown]
# ## 5. The distributions in the ratio must be the ones sampled from
#
# The proof used $q$ twice: as the law of the draft token, and in the ratio $p(x)/q(x)$ and the
# residual. If the draft token is drawn from $q_{\text{true}}$ but the rule is given $q_{\text{used}}$,
# the output law is
#
# $$
# P(\text{output} = y) = q_{\text{true}}(y)\,a(y) + \Bigl(\sum_x q_{\text{true}}(x)\,\bigl(1 - a(x)\bigr)\Bigr)\, r_{\text{used}}(y),
# \qquad a(x) = \min\!\Bigl(1, \frac{p(x)}{q_{\text{used}}(x)}\Bigr),\quad r_{\text{used}} = \operatorname{norm}(\max(0, p - q_{\text{used}})),
# $$
#
# which is $p$ when $q_{\text{used}} = q_{\text{true}}$ and in general not otherwise. The enumeration is
# a few lines on top of `step_distributions`:


# %%
def law_mismatched(p, q_true, q_used):
    # Exact output law when x ~ q_true but the rule (ratio and residual) is given q_used.
    V = p.shape[0]
    accept, final = step_distributions(torch.arange(V), q_used.expand(V, V), p.expand(V + 1, V))
    return q_true * accept + (q_true * (1 - accept)) @ final[:V]


def f64(probs):
    # Warp works in float32; renormalise in float64 so that float32 rounding (~1e-8) does not
    # hide the machine-precision result.
    probs = probs.double()
    return probs / probs.sum()


# %% [markdown]
# **Example 1: a greedy draft scored with its softmax.** A common shortcut: the draft picks its argmax
# $x^\ast$ (so $q_{\text{true}}$ is one-hot), but the rule is given the draft's softmax. Then $x^\ast$ is
# accepted with probability $\min(1, p(x^\ast)/q_{\text{used}}(x^\ast))$, which is not $p(x^\ast)$, and
# the residual never returns $x^\ast$ when $p(x^\ast) < q_{\text{used}}(x^\ast)$. Told the truth
# ($q = $ one-hot, which is `Warp(temperature=0)` on the draft's logits), the same rule is exact: it
# accepts $x^\ast$ with probability $p(x^\ast)$ and otherwise samples $p$ without $x^\ast$.

# %%
g = torch.Generator().manual_seed(SEED + 5)
V = 8
logits_p = 1.5 * torch.randn(V, generator=g)
logits_q = logits_p + torch.randn(V, generator=g)
p = f64(Warp(1.0).probs(logits_p))  # the target samples at T = 1
q_soft = f64(Warp(1.0).probs(logits_q))
q_greedy = f64(Warp(0.0).probs(logits_q))  # what the greedy draft actually samples from
law_wrong = law_mismatched(p, q_greedy, q_soft)
law_right = law_mismatched(p, q_greedy, q_greedy)
x_star = int(logits_q.argmax())
tv_greedy_softmax = stats.tv(law_wrong, p)
print(f"draft argmax x* = {x_star}: p(x*) = {p[x_star]:.3f}, softmax q(x*) = {q_soft[x_star]:.3f}")
print(
    f"scored with softmax: P(output = x*) = {law_wrong[x_star]:.3f}, TV from p = {tv_greedy_softmax:.3f}"
)
print(
    f"scored with one-hot: P(output = x*) = {law_right[x_star]:.3f}, TV from p = {stats.tv(law_right, p):.1e}"
)

# %% [markdown]
# Here $p(x^\ast) > q_{\text{used}}(x^\ast)$, so the softmax-scored rule accepts $x^\ast$ every time:
# the output is the draft's argmax with probability 1, whatever the target says. Scored as one-hot,
# the same draft yields exactly $p$.

# %%
fig = figs.mismatched_q(p, law_wrong, law_right, x_star)
savefig("01_mismatched_q", fig)
# %% [markdown]
# **Example 2: warps.** Temperature, top-$k$ and top-$p$ change the distribution that is sampled. The
# library's `Warp` applies the same transformation (through transformers' own logits processors) to
# the draft's and the target's logits, and the rule is given exactly those warped distributions:
# $q = W(\ell_q)$, $p = W(\ell_p)$. The output then follows the warped target $W(\ell_p)$ exactly. If
# instead the draft token is sampled from the warped $q$ but the ratio uses the draft's plain softmax
# (the warp forgotten on one side), the output is biased. 50 random logit pairs ($V = 50$, target logits
# $2z$, draft logits $2z + z'$) per warp:

# %%
g = torch.Generator().manual_seed(SEED + 6)
V = 50
WARPS = [
    Warp(1.0),
    Warp(0.7),
    Warp(0.7, top_k=10),
    Warp(1.0, top_p=0.9),
    Warp(0.5, top_k=20, top_p=0.95),
    Warp(0.0),
]
warp_rows = []
for _ in range(50):
    logits_p = 2 * torch.randn(V, generator=g)
    logits_q = logits_p + torch.randn(V, generator=g)
    q_plain = f64(torch.softmax(logits_q, -1))
    for warp in WARPS:
        p, q = f64(warp.probs(logits_p)), f64(warp.probs(logits_q))
        warp_rows.append(
            {
                "warp": warp.describe(),
                "alpha": float(acceptance_rate(p, q)),
                "TV, same warp in the ratio": stats.tv(law_mismatched(p, q, q), p),
                "TV, plain softmax in the ratio": stats.tv(law_mismatched(p, q, q_plain), p),
            }
        )
warps = pd.DataFrame(warp_rows)
warp_table = warps.groupby("warp", sort=False).agg(
    mean_alpha=("alpha", "mean"),
    max_tv_consistent=("TV, same warp in the ratio", "max"),
    mean_tv_plain=("TV, plain softmax in the ratio", "mean"),
)
warp_table.map(lambda v: f"{v:.3f}" if v > 1e-3 else f"{v:.1e}")

# %%
# NBVAL_CHECK_OUTPUT
sampled_warps = warps[~warps.warp.isin(["T=1", "greedy"])]
print("same warp on both sides: max TV < 1e-12:", warps["TV, same warp in the ratio"].max() < 1e-12)
print(
    "warp forgotten in the ratio (T != 1 or top-k/top-p): mean TV > 0.01:",
    sampled_warps["TV, plain softmax in the ratio"].mean() > 0.01,
)
print(
    "greedy draft scored with its softmax (T = 1 target): TV from p > 0.01:",
    tv_greedy_softmax > 0.01,
)


# %% [markdown]
# Two rows are exact even with the plain softmax in the ratio, for reasons worth stating: at $T = 1$
# without truncation the warp *is* the plain softmax, and under greedy warping the target is one-hot,
# so the rule accepts exactly when the draft token is the target's argmax and otherwise the residual is
# that argmax, whatever $q$ says. The general lesson: **hand the rule the distributions the tokens
# were actually drawn from**, warps included.

# %% [markdown]
# ## 6. How many tokens per step, and how much faster
#
# Assume, as Leviathan et al. do, that each draft is accepted with the same probability $\alpha$,
# independently of the other positions ("i.i.d. $\alpha$"). The number of accepted drafts $n$ is then a
# geometric variable capped at $K$: $P(n \ge i) = \alpha^i$ for $0 \le i \le K$. A step always emits
# $n + 1$ tokens (the accepted drafts, then one corrected or bonus token), so
#
# $$
# \mathbb{E}[\text{tokens per step}] = \mathbb{E}[n + 1] = \sum_{i=0}^{K} P(n \ge i) = \sum_{i=0}^{K} \alpha^i = \frac{1 - \alpha^{K+1}}{1 - \alpha}
# \qquad (\text{Leviathan et al., eq. 1, with } \gamma = K),
# $$
#
# which runs from 1 at $\alpha = 0$ to $K + 1$ at $\alpha = 1$.
#
# **Walltime.** Measure time in target forward passes. One step costs $K$ draft passes, $cK$, plus one
# target pass over the $K + 1$ positions, which is assumed to cost the same as a pass over one position
# (decoding is memory-bound; notebook 03 measures how true that is). Autoregressive decoding emits one
# token per target pass, so the expected walltime improvement is (Leviathan et al., Theorem 3.8)
#
# $$
# \text{speedup}(\alpha, K, c) = \frac{1 - \alpha^{K+1}}{(1 - \alpha)(cK + 1)} .
# $$
#
# The numerator saturates at $1/(1-\alpha)$ while the denominator grows linearly in $K$, so there is an
# optimal $K$ (`costs.optimal_K`).
#
# **The prototype's speedup formula.** The prototype also predicts its speedup as
# "$K \times$ acceptance rate". That formula ignores the stop at the first rejection (it counts
# drafts after a rejection as if they could still be accepted), ignores the corrected or bonus token
# (so it predicts less than one token per step at $K = 1$, a slowdown), and ignores the cost of the
# draft. Its "acceptance rate" is also a different quantity: it counts corrected and bonus tokens as
# accepted, so it can exceed 1. At $\alpha = 0.71$ (claimed by the prototype) and $K = 5$ the formula gives
# $5 \times 0.71 = 3.55$; the expected number of tokens per step is
# $(1 - 0.71^6)/(1 - 0.71) \approx 3.01$ (checked below), and the speedup is lower still once the
# draft's cost counts.
#
# **Monte Carlo check with `verify`.** To test the formula for $\mathbb{E}[\text{tokens per step}]$ we
# need a pair with a known $\alpha$: take $p \sim \mathrm{Dirichlet}(1)$ on tokens 0-9 and
# $q = \alpha p + (1 - \alpha) s$ with $s$ uniform on tokens 10-19. Then
# $\min(p, q) = \alpha p$ and the acceptance rate is exactly $\alpha$. The same $(p, q)$ at every
# position makes the acceptances i.i.d.; each step samples $K$ drafts from $q$ with `sample` and runs
# `verify` on them.


# %%
def pair_with_alpha(alpha, rng):
    # p on tokens 0-9, q = alpha * p + (1 - alpha) * uniform(10-19): sum_x min(p, q) = alpha exactly.
    p = torch.cat(
        [torch.from_numpy(rng.dirichlet(np.ones(10))), torch.zeros(10, dtype=torch.float64)]
    )
    s = torch.cat(
        [torch.zeros(10, dtype=torch.float64), torch.full((10,), 0.1, dtype=torch.float64)]
    )
    return p, alpha * p + (1 - alpha) * s


N_STEPS = 1_000 if QUICK else 5_000
ALPHAS_MC, KS_MC = (0.5, 0.8, 0.95), (1, 2, 4, 8)
rng = np.random.default_rng([SEED, 6])
mc_rows = []
for a_i, alpha in enumerate(ALPHAS_MC):
    p, q = pair_with_alpha(alpha, rng)
    assert abs(float(acceptance_rate(p, q)) - alpha) < 1e-12
    for K in KS_MC:
        g = torch.Generator().manual_seed(1000 * SEED + 10 * a_i + K)
        P, Q = p.expand(K + 1, -1), q.expand(K, -1)
        tokens = np.array([len(verify(sample(Q, g), Q, P, g).tokens) for _ in range(N_STEPS)])
        mc_rows.append(
            {
                "alpha": alpha,
                "K": K,
                "mean": tokens.mean(),
                "se": tokens.std(ddof=1) / np.sqrt(N_STEPS),
                "theory": costs.expected_tokens_per_step(alpha, K),
            }
        )
mc = pd.DataFrame(mc_rows)
mc["z"] = (mc["mean"] - mc["theory"]) / mc["se"]
print(f"{N_STEPS} steps per (alpha, K)")
mc.round(3)

# %%
# NBVAL_CHECK_OUTPUT
print("(alpha, K) combinations:", len(mc))
print(
    "Monte Carlo mean within 4 standard errors of (1 - alpha^(K+1)) / (1 - alpha):",
    bool((mc.z.abs() < 4).all()),
)
print(
    "E[tokens per step] at alpha = 0.71, K = 5:", round(costs.expected_tokens_per_step(0.71, 5), 3)
)

# %%
K_grid = np.arange(1, 11)
expected = {alpha: costs.expected_tokens_per_step(alpha, K_grid) for alpha in ALPHAS_MC}
fig = figs.tokens_per_step(K_grid, expected, mc, n_steps=N_STEPS)
savefig("01_tokens_per_step", fig)
# %% [markdown]
# **Speedup against $K$.** Theorem 3.8 for three acceptance rates and two draft costs; the star marks
# the optimal $K$. The right panel contrasts the prediction at $\alpha = 0.71$ (claimed by the
# prototype) with the prototype's
# "$K \times$ acceptance rate" at the same $\alpha$. Beyond the optimum a longer draft costs more
# than it gains, and with an expensive draft ($c = 0.3$ at $\alpha = 0.71$, $K \ge 8$) speculative decoding is
# *slower* than plain decoding. The table after the figure lists the optimal $K$ over a grid; it
# grows with $\alpha$ and shrinks with $c$, and only for a very good, very cheap draft
# ($\alpha = 0.9$, $c = 0.01$) does it go beyond the $K \le 16$ shown.

# %%
K_grid = np.arange(1, 17)
CLAIMED_ALPHA = 0.71
settings = [(a, c) for a in (0.6, 0.8, 0.9) for c in (0.05, 0.25)]
settings += [(CLAIMED_ALPHA, c) for c in (0.0, 0.1, 0.3)]
curves = pd.DataFrame(
    [
        {"alpha": a, "c": c, "K": K, "speedup": costs.walltime_speedup(a, K, c)}
        for a, c in settings
        for K in K_grid
    ]
)
k_opt = {(a, c): costs.optimal_K(a, c, K_max=16) for a, c in settings if c > 0}
optima = pd.DataFrame(
    [
        {"alpha": a, "c": c, "K": K, "speedup": costs.walltime_speedup(a, K, c)}
        for (a, c), K in k_opt.items()
    ]
)
fig = figs.speedup_theory(curves, optima, claimed_alpha=CLAIMED_ALPHA)
savefig("01_speedup_vs_K", fig)
# %%
# NBVAL_CHECK_OUTPUT
opt = pd.DataFrame(
    {
        f"c = {c}": [costs.optimal_K(a, c, K_max=64) for a in (0.6, 0.7, 0.8, 0.9)]
        for c in (0.01, 0.05, 0.1, 0.25)
    },
    index=pd.Index([0.6, 0.7, 0.8, 0.9], name="alpha"),
)
print("optimal K (searched over 1..64) by alpha and c:")
print(opt.to_string())

# %% [markdown]
# ## 7. Greedy decoding as the limit $T \to 0$
#
# `Warp(temperature=0)` turns logits into the one-hot distribution on the argmax. This is the limit of
# the tempered softmax: with $\ell^\ast$ the largest logit and $\Delta > 0$ its gap to the second,
#
# $$
# \mathrm{TV}\bigl(\mathrm{softmax}(\ell / T),\ \text{one-hot}(\arg\max \ell)\bigr) = 1 - \mathrm{softmax}(\ell/T)_{\arg\max}
# = \frac{\sum_{j \ne \ast} e^{(\ell_j - \ell^\ast)/T}}{\sum_j e^{(\ell_j - \ell^\ast)/T}} \le (V - 1)\, e^{-\Delta / T} \xrightarrow[T \to 0]{} 0 .
# $$
#
# With one-hot $p$ (on $t^\ast$) and one-hot $q$ (on $x^\ast$), the rule needs no special case:
# the draft token is $x^\ast$; it is accepted with probability $\min(1, p(x^\ast)/q(x^\ast)) = p(x^\ast)$,
# which is 1 if $x^\ast = t^\ast$ and 0 otherwise; after a rejection the residual
# $\operatorname{norm}(\max(0, p - q))$ is one-hot on $t^\ast$. So the same `verify` accepts exactly when
# the argmaxes agree and otherwise emits the target's argmax, which is greedy decoding of the target.
# We check this on 300 random steps with $K = 3$:

# %%
g = torch.Generator().manual_seed(SEED + 7)
greedy = Warp(temperature=0)
K, V, n_checks = 3, 20, 300
ok, n_accepted_hist = 0, np.zeros(K + 1, dtype=int)
for _ in range(n_checks):
    logits_p = torch.randn(K + 1, V, generator=g)
    logits_q = logits_p[:K] + torch.randn(K, V, generator=g)
    p, q = greedy.probs(logits_p), greedy.probs(logits_q)
    x = sample(q, g)  # the draft's argmax at every position
    verdict = verify(x, q, p, g)
    agree = (logits_q.argmax(-1) == logits_p[:K].argmax(-1)).long()
    n_expected = int(agree.cumprod(0).sum())  # leading positions where the argmaxes agree
    ok += (
        torch.equal(x, logits_q.argmax(-1))
        and verdict.n_accepted == n_expected
        and torch.equal(
            verdict.tokens, logits_p[: n_expected + 1].argmax(-1)
        )  # = greedy target tokens
    )
    n_accepted_hist[verdict.n_accepted] += 1
print("steps by number of accepted drafts (0..K):", n_accepted_hist.tolist())

# %%
# NBVAL_CHECK_OUTPUT
print(
    f"steps where verify accepted iff the argmaxes agree and emitted the target's argmax: {ok} / {n_checks}"
)
print("all:", ok == n_checks)

# %% [markdown]
# The limit, seen on one set of logits ($V = 10$): the tempered softmax collapses onto the argmax at the
# rate of the bound above, and the acceptance rate $\alpha(T)$ between a draft and a target, both warped
# at temperature $T$, tends to 1 when their argmaxes agree and to 0 when they differ.

# %%
g = torch.Generator().manual_seed(SEED + 8)
V = 10
ell = torch.randn(V, generator=g, dtype=torch.float64).float()
T_grid = np.logspace(-2.3, 0.5, 60)
top2 = torch.topk(ell, 2).values
gap = float(top2[0] - top2[1])
tv_onehot = [stats.tv(Warp(float(T)).probs(ell), greedy.probs(ell)) for T in T_grid]

ell_agree = ell + 0.5 * torch.randn(V, generator=g)
while int(ell_agree.argmax()) != int(ell.argmax()):
    ell_agree = ell + 0.5 * torch.randn(V, generator=g)
ell_differ = ell.clone()
ell_differ[torch.topk(ell, 2).indices[1]] += 2 * gap  # second-best becomes the draft's argmax


def alpha_T(T, ell_q):
    return float(acceptance_rate(Warp(float(T)).probs(ell), Warp(float(T)).probs(ell_q)))


order = torch.argsort(ell, descending=True)
fig = figs.greedy_limit(
    {T: Warp(T).probs(ell)[order] for T in (1.0, 0.3, 0.1, 0.03)},
    T_grid,
    tv_onehot,
    bound=(V - 1) * np.exp(-gap / T_grid),
    alpha_agree=[alpha_T(T, ell_agree) for T in T_grid],
    alpha_differ=[alpha_T(T, ell_differ) for T in T_grid],
)
savefig("01_greedy_limit", fig)
# %%
# NBVAL_CHECK_OUTPUT
print(
    "TV(softmax(l/T), one-hot) below the bound for every T:",
    all(t <= (V - 1) * math.exp(-gap / T) + 1e-7 for t, T in zip(tv_onehot, T_grid, strict=True)),
)
print(
    "Warp(T = 0.005) equals Warp(0) to float32 precision:",
    stats.tv(Warp(0.005).probs(ell), greedy.probs(ell)) < 1e-6,
)

# %% [markdown]
# ## 8. Discussion
#
# **What we showed.**
#
# * The rule (accept $x \sim q$ with probability $\min(1, p(x)/q(x))$, otherwise sample
#   $\operatorname{norm}(\max(0, p - q))$) emits tokens distributed exactly as $p$, and accepts with
#   probability $\alpha = \sum_x \min(p(x), q(x)) = 1 - \mathrm{TV}(p, q)$. For a $K$-token step,
#   stopping at the first rejection and drawing the bonus from $p_K$ keeps every position exact, by
#   induction over positions conditioned on the accepted prefix.
# * The rule fits in a short function (`speculative_step`, section 1), whose exact law is the
#   law of the library's rule on every case of section 2.3; the prototype's correction plugged into
#   the library changes it.
# * Computed exactly from the library's `step_distributions` (the numbers `verify` samples from), the
#   output law matches $p$ to float64 rounding on all the pairs of section 3 ($V$ from 3 to 1000,
#   peaked, flat, $q = p$, disjoint supports, drafts with zeros), for a $K = 4$ step, and for a whole
#   generation with context-dependent toy distributions.

# %%
large = summary.proto_tv_mean[summary.index >= 100]
display(
    Markdown(
        "* The prototype's correction (sample $p$ with the rejected token removed) is biased: "
        "$\\tfrac1{12}$ in total variation on the hand-worked $V = 3$ example; on random "
        f"$\\mathrm{{Dirichlet}}(1)$ pairs a mean TV of {summary.proto_tv_mean[10]:.3f} at $V = 10$ "
        f"and {large.min():.3f}–{large.max():.3f} at $V = 100$–$1000$; "
        f"{seq['TV prototype'].min():.3f}–{seq['TV prototype'].max():.3f} on the whole-generation "
        "toy check ($K = 1, 2, 3$). It is exact only in degenerate cases ($q = p$, disjoint supports)."
    )
)

# %% [markdown]
# * The rule must be given the distributions the tokens were drawn from: a greedy draft scored with
#   its softmax, or a warp applied to the sampling but not to the ratio, breaks exactness; the same
#   `Warp` on both sides keeps it.
# * Under i.i.d. acceptance a step emits $(1 - \alpha^{K+1})/(1 - \alpha)$ tokens on average (confirmed
#   by Monte Carlo with `verify`), and the walltime factor
#   $(1 - \alpha^{K+1})/((1 - \alpha)(cK + 1))$ has an optimal $K$ that grows with $\alpha$ and shrinks
#   with $c$. The prototype's "$K \times$ acceptance rate" is not this formula.
# * Greedy decoding is the same code path at $T = 0$: `verify` accepts iff the argmaxes agree and
#   otherwise emits the target's argmax.
#
# **Limits.** The exact checks are float64 computations on given distributions; they test the
# arithmetic of the rule, not the sampling in `verify` nor the decoders that produce $p$ and $q$ from
# models with KV caches. The speed formulas assume a constant $\alpha$ and a verification pass that
# costs the same as a one-token pass; neither holds exactly for real models.
#
# **What's next.**
#
# * **Notebook 02** runs the decoders on a real model and tests the tokens they actually sample
#   against the target's law with chi-square tests, which closes the gap between the exact laws
#   computed here and the sampled tokens.
# * **Notebook 03** measures speed: the acceptance rate and draft cost $c$ of a real model pair, the
#   cost of a $(K{+}1)$-token verification pass, and the measured speedup against the prediction of
#   section 6.

# %% [markdown]
# ## The data this page read
#
# Where every number on this page was measured: one line per machine, commit and date. The files
# behind them are folded below it, each with the first 16 digits of its SHA-256; the repository's
# tests recompute those from the committed files, and refuse a page whose outputs came from other
# results.

# %%
data_read()
