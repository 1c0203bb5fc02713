"""The acceptance rule: exact laws by enumeration, chi-square at every draft position, and the
prototype's wrong correction as a case that must be rejected."""

import math

import numpy as np
import pytest
import torch
from conftest import random_dist
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from specdec_lib.research.stats import chisquare_gof, exact_output_law, exact_step_law, tv
from specdec_lib.sampling import (
    Warp,
    acceptance_probs,
    acceptance_rate,
    prototype_correction,
    residual,
    residual_correction,
    sample,
    step_distributions,
    verify,
)

# ---------------------------------------------------------------------------------------------
# Exact output law, by enumeration
# ---------------------------------------------------------------------------------------------


def _pairs():
    g = torch.Generator().manual_seed(0)
    cases = []
    for V in (3, 4, 7, 50, 300, 1000):
        for scale in (0.3, 2.0, 6.0):  # flat ... peaked
            cases.append((random_dist(g, V, scale), random_dist(g, V, scale)))
    p = torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=torch.float64)
    q = torch.tensor([0.0, 0.0, 0.3, 0.7], dtype=torch.float64)
    cases.append((p, q))  # disjoint supports
    cases.append((q, p))
    cases.append((p, p.clone()))  # q = p
    cases.append((random_dist(g, 20, 2.0), random_dist(g, 20, 2.0, zeros=10)))  # q with zeros
    cases.append((random_dist(g, 20, 2.0, zeros=10), random_dist(g, 20, 2.0)))  # p with zeros
    return cases


@pytest.mark.parametrize("case", range(len(_pairs())))
def test_exact_output_law_is_p(case):
    p, q = _pairs()[case]
    law = exact_output_law(p, q)
    assert tv(law, p) < 1e-12
    assert abs(float(law.sum()) - 1) < 1e-12


def test_prototype_correction_is_biased():
    g = torch.Generator().manual_seed(1)
    tvs = [
        tv(exact_output_law(p, q, prototype_correction), p)
        for p, q in ((random_dist(g, 10, 1.5), random_dist(g, 10, 1.5)) for _ in range(50))
    ]
    assert np.mean(tvs) > 0.05
    assert max(tvs) > 0.1


def test_exact_step_law_every_position():
    g = torch.Generator().manual_seed(2)
    K, V = 4, 6
    q = torch.stack([random_dist(g, V) for _ in range(K)])
    p = torch.stack([random_dist(g, V) for _ in range(K + 1)])
    reach, emitted = exact_step_law(q, p)
    assert torch.allclose(emitted, p, atol=1e-12)
    alphas = acceptance_rate(p[:K], q)
    expected_reach = torch.cat([torch.ones(1, dtype=torch.float64), torch.cumprod(alphas, 0)])
    assert torch.allclose(reach, expected_reach, atol=1e-12)


def test_alpha_is_one_minus_tv():
    g = torch.Generator().manual_seed(3)
    p, q = random_dist(g, 30), random_dist(g, 30)
    assert math.isclose(float(acceptance_rate(p, q)), 1 - tv(p, q), abs_tol=1e-12)


def test_residual():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.6, 0.2], dtype=torch.float64)
    assert torch.allclose(residual(p, q), torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    assert torch.equal(residual(p, p), p)  # 0/0: any distribution would do; p is returned


def test_acceptance_probs_finite_where_q_is_zero():
    p = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    q = torch.tensor([[0.0, 1.0]])
    a = acceptance_probs(torch.tensor([0]), q, p)
    assert torch.equal(a, torch.tensor([1.0]))


# ---------------------------------------------------------------------------------------------
# verify: structure and sampling
# ---------------------------------------------------------------------------------------------


def test_verify_structure_and_determinism():
    g = torch.Generator().manual_seed(4)
    K, V = 5, 8
    q = torch.stack([random_dist(g, V, 1.0) for _ in range(K)]).float()
    p = torch.stack([random_dist(g, V, 1.0) for _ in range(K + 1)]).float()
    x = torch.stack([sample(q[i], g) for i in range(K)])
    for seed in range(50):
        v1 = verify(x, q, p, torch.Generator().manual_seed(seed))
        v2 = verify(x, q, p, torch.Generator().manual_seed(seed))
        assert torch.equal(v1.tokens, v2.tokens) and v1.n_accepted == v2.n_accepted
        assert 0 <= v1.n_accepted <= K
        assert len(v1.tokens) == v1.n_accepted + 1
        assert torch.equal(v1.tokens[: v1.n_accepted], x[: v1.n_accepted])


def test_verify_edge_cases():
    V = 4
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4]] * 3)
    # p == q: everything accepted, bonus from p_K
    v = verify(torch.tensor([3, 2]), p[:2].clone(), p, torch.Generator().manual_seed(0))
    assert v.n_accepted == 2 and len(v.tokens) == 3
    # disjoint supports: nothing accepted; the correction lies in p's support
    p2 = torch.tensor([[0.5, 0.5, 0.0, 0.0]] * 2)
    q2 = torch.tensor([[0.0, 0.0, 0.5, 0.5]])
    for s in range(20):
        v = verify(torch.tensor([2]), q2, p2, torch.Generator().manual_seed(s))
        assert v.n_accepted == 0 and int(v.tokens[0]) in (0, 1)
    # K = 0: just a token from p_0
    v = verify(
        torch.empty(0, dtype=torch.long), torch.empty(0, V), p[:1], torch.Generator().manual_seed(0)
    )
    assert v.n_accepted == 0 and len(v.tokens) == 1


def test_verify_rejects_nan():
    p = torch.tensor([[float("nan"), 0.5], [0.5, 0.5]])
    q = torch.tensor([[0.5, 0.5]])
    with pytest.raises(ValueError, match="NaN"):
        verify(torch.tensor([0]), q, p)


@pytest.mark.parametrize(
    "args",
    [
        ([0, 1], torch.ones(1, 3) / 3, torch.ones(3, 3) / 3),  # K mismatch with draft_probs
        ([0], torch.ones(1, 3) / 3, torch.ones(1, 3) / 3),  # target_probs not K+1 rows
        ([0], torch.ones(1, 3) / 3, torch.ones(2, 4) / 4),  # vocab mismatch
    ],
)
def test_verify_bad_shapes(args):
    with pytest.raises(ValueError):
        verify(torch.tensor(args[0]), args[1], args[2])


def test_sample_never_emits_zero_probability():
    probs = torch.tensor([0.0, 0.3, 0.0, 0.7, 0.0])
    g = torch.Generator().manual_seed(0)
    draws = sample(probs.expand(20000, 5), g)
    assert set(draws.tolist()) == {1, 3}
    assert chisquare_gof(draws, probs).pvalue > 1e-3


# ---------------------------------------------------------------------------------------------
# Chi-square at every draft position, and a wrong rule that must fail
# ---------------------------------------------------------------------------------------------

N_STEPS = 6000


def _simulate(correction, seed=0, K=3, V=6):
    """Run verify N_STEPS times on position-wise toy distributions (x_i ~ q_i). Returns the
    per-position emitted tokens (given the position is reached) and acceptance counts."""
    g = torch.Generator().manual_seed(100 + seed)
    q = torch.stack([random_dist(g, V, 1.5) for _ in range(K)]).float()
    p = torch.stack([random_dist(g, V, 1.5) for _ in range(K + 1)]).float()
    gen = torch.Generator().manual_seed(seed)
    emitted = [[] for _ in range(K + 1)]
    trials = np.zeros(K, dtype=int)
    accepts = np.zeros(K, dtype=int)
    for _ in range(N_STEPS):
        x = sample(q, gen)
        v = verify(x, q, p, gen, correction=correction)
        toks = v.tokens.tolist()
        for i, t in enumerate(toks):
            emitted[i].append(t)
        for i in range(min(v.n_accepted + 1, K)):
            trials[i] += 1
            accepts[i] += i < v.n_accepted
    return p, q, emitted, trials, accepts


def test_emitted_law_every_position_chisquare():
    p, q, emitted, trials, accepts = _simulate(residual_correction, seed=1)
    K = q.shape[0]
    for i in range(K + 1):
        res = chisquare_gof(torch.tensor(emitted[i]), p[i])
        assert res.n >= 200, res
        assert res.pvalue > 1e-3, f"position {i}: {res}"
    alphas = acceptance_rate(p[:K].double(), q.double())
    for i in range(K):
        bt = sps.binomtest(int(accepts[i]), int(trials[i]), float(alphas[i]))
        assert bt.pvalue > 1e-3, (
            f"acceptance at position {i}: {accepts[i]}/{trials[i]} vs {float(alphas[i]):.3f}"
        )


def test_prototype_rule_is_rejected():
    p, q, emitted, *_ = _simulate(prototype_correction)
    pvals = [chisquare_gof(torch.tensor(emitted[i]), p[i]).pvalue for i in range(q.shape[0])]
    assert min(pvals) < 1e-6


# ---------------------------------------------------------------------------------------------
# Warps
# ---------------------------------------------------------------------------------------------


def test_warp_greedy_one_hot():
    logits = torch.tensor([[0.1, 2.0, 1.0], [3.0, 3.0, -1.0]])
    probs = Warp(temperature=0).probs(logits)
    assert torch.equal(probs, torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))


def test_warp_confidence_reads_the_law_drawn_from_and_the_softmax_in_greedy():
    """A confidence stop reads q(x) where q is the law drawn from, and the draft's softmax where
    greedy decoding's law is one-hot (as transformers' assistant_confidence_threshold does)."""
    logits = torch.log(torch.tensor([0.5, 0.25, 0.15, 0.1]))
    for warp in (Warp(1.0), Warp(0.5), Warp(1.0, top_k=2)):
        q = warp.probs(logits)
        assert warp.confidence(logits, q, 1) == pytest.approx(float(q[1]))
    greedy = Warp(0)
    assert greedy.confidence(logits, greedy.probs(logits), 0) == pytest.approx(0.5)
    assert greedy.confidence(logits.half(), greedy.probs(logits), 1) == pytest.approx(
        0.25, abs=1e-3
    )


def test_warp_top_k_top_p_and_temperature():
    logits = torch.log(torch.tensor([0.5, 0.25, 0.15, 0.1]))
    assert torch.allclose(Warp(1.0).probs(logits), torch.tensor([0.5, 0.25, 0.15, 0.1]), atol=1e-6)
    pk = Warp(1.0, top_k=2).probs(logits)
    assert torch.allclose(pk, torch.tensor([2 / 3, 1 / 3, 0, 0]), atol=1e-6)
    pp = Warp(1.0, top_p=0.7).probs(logits)  # smallest set with mass >= 0.7: {0, 1}
    assert torch.allclose(pp, torch.tensor([2 / 3, 1 / 3, 0, 0]), atol=1e-6)
    pt = Warp(0.5).probs(logits)
    assert torch.allclose(pt, torch.softmax(logits / 0.5, 0), atol=1e-6)


def test_warp_limit_T_to_zero_is_greedy():
    logits = torch.tensor([1.0, 1.5, 0.2])
    p = Warp(0.01).probs(logits)
    assert torch.allclose(p, Warp(0).probs(logits), atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": float("inf")}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_p": float("nan")}, "top_p"),
    ],
)
def test_warp_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Warp(**kwargs)


@pytest.mark.parametrize(
    "warp", [Warp(1.0), Warp(0.7), Warp(0), Warp(1.0, top_k=2), Warp(0.9, top_p=0.8)]
)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_warp_bad_row_becomes_nan(warp, bad):
    """With or without truncation, a row holding NaN or +inf becomes a row of NaN, whole."""
    logits = torch.tensor([[0.0, bad, 1.0, -2.0], [0.0, 1.0, 0.5, -1.0]])
    for x in (logits, logits.bfloat16(), logits[0]):
        probs = warp.probs(x)
        assert torch.isnan(probs if x.dim() == 1 else probs[0]).all()
    assert not torch.isnan(warp.probs(logits)[1]).any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("V", [1, 7, 33, 49152])
def test_bad_rows_and_has_nan_find_every_nan_and_plus_inf(dtype, V):
    """One reduction instead of two masks, so checked everywhere in a row: first, last, and
    across the widths a vectorised kernel works in; -inf (a masked logit) is not bad."""
    from specdec_lib.sampling import bad_rows, has_nan

    base = torch.zeros(2, V, dtype=dtype)
    base[:, 0] = float("-inf")
    assert not bad_rows(base).any() and not has_nan(base, base[:0])
    for j in sorted({0, 1, V // 2, V - 2, V - 1} & set(range(V))):
        for value in (float("nan"), float("inf")):
            x = base.clone()
            x[1, j] = value
            assert bad_rows(x)[:, 0].tolist() == [False, True]
            assert bool(has_nan(base, x)) == (value != value)
        y = base.clone()
        y[1, j] = float("-inf")
        assert not bad_rows(y).any()


def test_greedy_probs_take_the_first_argmax_in_every_dtype():
    logits = torch.tensor([[0.5, 2.0, 2.0, -1.0], [3.0, 3.0, 1.0, 0.0]])
    for dtype in (torch.float32, torch.bfloat16):
        probs = Warp(0.0).probs(logits.to(dtype))
        assert probs.argmax(-1).tolist() == [1, 0] and probs.sum(-1).tolist() == [1.0, 1.0]


def test_step_distributions_match_verify_frequencies():
    """verify samples from step_distributions: the empirical acceptance at K=1 matches."""
    g = torch.Generator().manual_seed(7)
    p = torch.stack([random_dist(g, 5), random_dist(g, 5)]).float()
    q = random_dist(g, 5).float().unsqueeze(0)
    x = torch.tensor([int(torch.argmax(q))])
    a, final = step_distributions(x, q, p)
    gen = torch.Generator().manual_seed(0)
    n = sum(verify(x, q, p, gen).n_accepted for _ in range(4000))
    assert sps.binomtest(n, 4000, float(a[0])).pvalue > 1e-3


@pytest.mark.parametrize("bad", [-1, 5])
def test_verify_refuses_ids_outside_the_vocabulary(bad):
    """Checked at verify's one host read, before any row is indexed by a bad id."""
    p = torch.full((3, 5), 0.2)
    with pytest.raises(ValueError, match=r"draft_tokens must be token ids in \[0, V = 5\)"):
        verify(torch.tensor([1, bad]), p[:2], p)
    with pytest.raises(ValueError, match="integer token ids"):
        verify(torch.tensor([1.0, 2.0]), p[:2], p)


# Property-based tests of verify on random distributions (hypothesis).


@st.composite
def step_inputs(draw):
    V = draw(st.integers(2, 12))
    K = draw(st.integers(0, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)

    def dist():
        logits = torch.randn(V, generator=g) * draw(st.sampled_from([0.1, 1.0, 5.0]))
        mask = torch.rand(V, generator=g) < draw(st.sampled_from([0.0, 0.3, 0.7]))
        mask[torch.randint(0, V, (1,), generator=g)] = False  # keep at least one token
        return torch.softmax(logits.masked_fill(mask, -float("inf")), 0)

    q = torch.stack([dist() for _ in range(K)]) if K else torch.empty(0, V)
    p = torch.stack([dist() for _ in range(K + 1)])
    x = sample(q, g) if K else torch.empty(0, dtype=torch.long)
    return x, q, p, seed


@settings(max_examples=300, deadline=None)
@given(step_inputs())
def test_verify_properties(inputs):
    x, q, p, seed = inputs
    K = x.shape[0]
    v = verify(x, q, p, torch.Generator().manual_seed(seed))
    n = v.n_accepted
    assert 0 <= n <= K
    assert len(v.tokens) == n + 1  # the accepted prefix plus exactly one
    assert torch.equal(v.tokens[:n], x[:n])
    # A token of probability 0 under the target is never emitted: accepted drafts included.
    for i, tok in enumerate(v.tokens.tolist()):
        assert p[i, tok] > 0


@settings(max_examples=100, deadline=None)
@given(
    st.integers(2, 30),
    st.floats(0.05, 3.0),
    st.one_of(st.none(), st.integers(1, 10)),
    st.one_of(st.none(), st.floats(0.05, 1.0)),
    st.integers(0, 1000),
)
def test_warped_support_respected(V, T, top_k, top_p, seed):
    g = torch.Generator().manual_seed(seed)
    w = Warp(T, top_k, top_p)
    p = w.probs(torch.randn(2, V, generator=g))
    q = w.probs(torch.randn(1, V, generator=g))
    x = sample(q, g)
    v = verify(x, q, p, g)
    assert all(p[i, t] > 0 for i, t in enumerate(v.tokens.tolist()))
    if top_k is not None:
        assert int((p[0] > 0).sum()) <= max(top_k, 1) or top_p is not None


@pytest.mark.parametrize(
    "kw", [dict(temperature=0.7), dict(top_k=5), dict(temperature=1.3, top_k=7, top_p=0.8)]
)
def test_the_warps_are_transformers_own(kw):
    """Warp applies transformers' warpers one by one, in generate's order: the same scores bit
    for bit as their LogitsProcessorList."""
    from transformers import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    w = Warp(**kw)
    theirs = LogitsProcessorList()
    if w.temperature != 1.0:
        theirs.append(TemperatureLogitsWarper(w.temperature))
    if w.top_k is not None:
        theirs.append(TopKLogitsWarper(top_k=w.top_k))
    if w.top_p is not None:
        theirs.append(TopPLogitsWarper(top_p=w.top_p))
    logits = torch.randn(3, 40, generator=torch.Generator().manual_seed(0))
    assert torch.equal(w.logits(logits), theirs(None, logits.clone()))
    assert torch.equal(w.logits(logits[0]), theirs(None, logits[:1].clone())[0])
