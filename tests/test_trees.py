"""Draft trees, the one shape of a step: a chain is ``(1,)``, ``width`` candidates for the first
position are ``(width,)``, and trees put candidates at every depth. The exact law by enumeration,
chi-square tests of the sampled rule and of the decoder on tiny models, a wrong correction caught,
greedy equality, cache against no cache, and bad input."""

import itertools

import numpy as np
import pytest
import torch
from conftest import random_dist
from test_decoding import PROMPT, _continuation_test

from specdec_lib import trees
from specdec_lib.decoding import AutoregressiveDecoder, SpeculativeDecoder
from specdec_lib.drafters import DynamicK
from specdec_lib.research.stats import chisquare_gof, exact_tree_law, first_token_law, tv
from specdec_lib.sampling import Warp, WarpedRows, prototype_correction, residual_correction
from specdec_lib.trees import (
    best_alternatives,
    candidate_stage,
    chain_tree,
    draw_alternatives,
    support_stage,
    tree_shape,
    verify_tree,
)


def more_candidates(q, first, n_more, generator=None, support=None):
    """Up to ``n_more`` more candidates after ``first`` for one row ``q``: the tokens and the
    laws they were drawn from (:func:`draw_alternatives` on one row)."""
    tokens, laws, _ = draw_alternatives(q.view(1, -1), first.view(1), [n_more], generator, support)
    return tokens, laws


def _width_law(p, q, width, correction=residual_correction):
    """The exact law of the token emitted by ``width`` candidates for one position, each drawn
    from ``q`` without replacement: the tree ``(width,)`` with one draft depth."""
    law = exact_tree_law(lambda s: p, lambda s: q, (width,), 1, correction)
    return first_token_law(law, p.shape[0])


@pytest.mark.parametrize("V", [2, 5, 9])
@pytest.mark.parametrize("m", [1, 2, 3])
@pytest.mark.parametrize("zeros", [0, 1])
def test_exact_width_law_is_p(V, m, zeros):
    g = torch.Generator().manual_seed(100 * V + 10 * m + zeros)
    for _ in range(3):
        p = random_dist(g, V, zeros=zeros)
        q = random_dist(g, V, scale=3.0, zeros=zeros)
        assert tv(_width_law(p, q, m), p) < 1e-12


def test_exact_law_point_masses_and_equal_laws():
    p = torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64)
    for q in (torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64), p.clone()):
        for m in (1, 2, 3):
            assert tv(_width_law(p, q, m), p) < 1e-12


def test_wrong_correction_is_caught_exactly():
    g = torch.Generator().manual_seed(7)
    p, q = random_dist(g, 6), random_dist(g, 6, scale=3.0)
    assert tv(_width_law(p, q, 2, prototype_correction), p) > 0.01


def test_more_candidates_without_replacement():
    g = torch.Generator().manual_seed(0)
    q = torch.tensor([0.5, 0.3, 0.2, 0.0])
    for _ in range(50):
        toks, laws = more_candidates(q, torch.tensor(0), 3, g)
        assert toks.numel() == 2  # token 3 has no mass: only 1 and 2 are left
        assert sorted(toks.tolist()) == [1, 2]
        assert torch.allclose(laws.sum(-1), torch.ones(2))
        assert float(laws[0, 0]) == 0.0 and float(laws[1, toks[0]]) == 0.0
    toks, laws = more_candidates(torch.tensor([0.0, 1.0]), torch.tensor(1), 2, g)
    assert toks.numel() == 0 and laws.shape == (0, 2)
    # a mass below the float64 rounding of the cumulative sum is never drawn, as with sample
    toks, laws = more_candidates(torch.tensor([1.0, 1e-30, 0.0]), torch.tensor(0), 2, g)
    assert toks.numel() == 0 and laws.shape == (0, 3)


def _sampled_law(p, q, width, n, seed, correction=None):
    """Counts of the token ``width`` candidates for one position emit, drawn and verified by the
    library's own chain_tree and verify_tree."""
    g = torch.Generator().manual_seed(seed)
    counts = np.zeros(p.shape[0])
    kw = {} if correction is None else {"correction": correction}
    for _ in range(n):
        first = torch.multinomial(q, 1, generator=g)
        tokens, parents, laws = chain_tree(first, q.view(1, -1), (width,), g)
        verdict, _ = verify_tree(tokens, parents, laws, p.expand(len(tokens) + 1, -1), g, **kw)
        counts[int(verdict.tokens[0])] += 1
    return counts


def test_sampled_rule_matches_p_and_wrong_rule_fails():
    g = torch.Generator().manual_seed(3)
    p = random_dist(g, 8).float()
    q = random_dist(g, 8, scale=3.0).float()
    right = chisquare_gof(probs=p.double().numpy(), counts=_sampled_law(p, q, 3, 6000, 1))
    assert right.pvalue > 1e-3, right
    wrong = _sampled_law(p, q, 3, 6000, 2, prototype_correction)
    assert tv(_width_law(p.double(), q.double(), 3, prototype_correction), p) > 0.02
    assert chisquare_gof(probs=p.double().numpy(), counts=wrong).pvalue < 1e-6


def test_width_is_a_spelling_of_a_tree(tiny_pair):
    """width=w is the tree (w,) and the chain is the tree (1,): the same decoder, token for token."""
    assert tree_shape() == (1,) and tree_shape(width=3) == (3,) and tree_shape((4, 3)) == (4, 3)
    for a, b in (
        (dict(width=2), dict(tree=(2,))),
        (dict(), dict(tree=(1,))),
        (dict(), dict(width=1)),
    ):
        runs = [
            SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, K=3, seed=4, **kw).generate_ids(
                PROMPT, 30
            )
            for kw in (a, b)
        ]
        assert runs[0].tokens == runs[1].tokens
        assert [s.branch for s in runs[0].steps] == [s.branch for s in runs[1].steps]


@pytest.mark.parametrize("K, width, temperature, top_p", [(1, 3, 0.8, 0.9), (3, 2, 1.3, None)])
def test_two_token_law_matches_target(tiny_pair, K, width, temperature, top_p):
    dec = SpeculativeDecoder(
        tiny_pair.draft,
        tiny_pair.target,
        K=K,
        width=width,
        temperature=temperature,
        top_p=top_p,
        seed=10 * K + width,
    )
    res = _continuation_test(tiny_pair, dec, n=2000)
    assert res.pvalue > 1e-3, res
    steps = [st for seed in range(3) for st in dec.generate_ids(PROMPT, 40, seed=seed).steps]
    assert any(st.branch >= 1 for st in steps), "no alternative was ever accepted"


def _greedy_check(pair, seed, n_prompts, n_alternatives, **shape):
    """Greedy speculative output equals the autoregressive output on random prompts, with at most
    ``n_alternatives`` alternatives per step, and some alternative is accepted."""
    g = torch.Generator().manual_seed(seed)
    ar = AutoregressiveDecoder(pair.target, temperature=0)
    sd = SpeculativeDecoder(pair.draft, pair.target, temperature=0, **shape)
    used = 0
    for _ in range(n_prompts):
        prompt = torch.randint(0, 32, (1, int(torch.randint(1, 8, (1,), generator=g))), generator=g)
        s = sd.generate_ids(prompt, 40)
        assert s.tokens == ar.generate_ids(prompt, 40).tokens
        used += sum(st.branch >= 1 for st in s.steps)
        assert all(len(st.alternatives) <= n_alternatives for st in s.steps)
    assert used > 0, "greedy alternatives were never accepted"


@pytest.mark.parametrize("K, width", [(1, 2), (1, 4), (3, 2), (5, 3)])
def test_greedy_equals_autoregressive(tiny_pair, K, width):
    _greedy_check(tiny_pair, K + width, 5, width - 1, K=K, width=width)


@pytest.mark.parametrize(
    "shape",
    [dict(K=1, width=2), dict(K=3, width=3), dict(K=2, tree=(2, 2)), dict(K=3, tree=(3, 1, 2))],
    ids=["w2", "w3", "tree2-2", "tree3-1-2"],
)
def test_cache_and_no_cache_give_same_tokens(tiny_pair, shape):
    """Width at the first position and trees at every depth: the cached decoder (promote, keep)
    and the re-encoding reference agree token for token and branch for branch."""
    kw = dict(**shape, temperature=1.0, top_k=20)
    a_dec = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, seed=5, **kw)
    b_dec = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, seed=5, use_cache=False, **kw)
    for _ in range(3):
        a, b = a_dec.generate_ids(PROMPT, 30), b_dec.generate_ids(PROMPT, 30)
        assert a.tokens == b.tokens
        assert [s.branch for s in a.steps] == [s.branch for s in b.steps]


def test_counters_with_width(tiny_pair):
    r = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, K=2, width=3, seed=0).generate_ids(
        PROMPT, 60
    )
    assert len(r.tokens) == 60
    assert r.n_accepted == sum(s.n_accepted for s in r.steps)
    for s in r.steps:
        if s.branch >= 1:
            assert s.emitted[0] == s.alternatives[s.branch - 1] and s.accepted[0]


def test_dynamic_k_with_width(tiny_pair):
    drafter = DynamicK(tiny_pair.draft, schedule="heuristic")
    dec = SpeculativeDecoder(drafter, tiny_pair.target, K=4, width=2, temperature=0)
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    assert dec.generate_ids(PROMPT, 30).tokens == ar.generate_ids(PROMPT, 30).tokens


@pytest.mark.parametrize("width", [0, -1, 1.5, True])
def test_bad_width(tiny_pair, width):
    with pytest.raises(ValueError, match="width"):
        SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, width=width)


def test_custom_verifier_checks_chains_only(tiny_pair):
    with pytest.raises(ValueError, match="verifier"):
        SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, width=2, verifier=lambda *a: None)


def test_verify_tree_refuses_ids_outside_the_vocabulary():
    p = torch.full((3, 4), 0.25)
    for parents in ([-1, 0], [-1, -1]):  # a chain (vectorised) and siblings (node by node)
        with pytest.raises(ValueError, match="tokens must be token ids"):
            verify_tree(torch.tensor([1, 4]), parents, p[:2], p)
        with pytest.raises(ValueError, match="tokens must be token ids"):
            verify_tree(torch.tensor([-1, 2]), parents, p[:2], p)


# --------------------------------------------------------------------------------------------
# Draft trees: candidates at every depth
# --------------------------------------------------------------------------------------------


def _context_laws(V, seed, zeros=1):
    """A toy target p(. | prefix) and draft q(. | prefix) over V tokens that depend on the whole
    prefix (each drawn from its own seed, so the order of the calls does not matter), some tokens
    of probability 0 on either side."""

    def law(kind, prefix):
        g = torch.Generator().manual_seed(hash((seed, kind, V) + prefix) % 2**31)
        return random_dist(g, V, scale=1.0 if kind == 0 else 3.0, zeros=zeros)

    return (lambda s: law(0, s)), (lambda s: law(1, s))


def _target_law(p_fn, V, D):
    out = {}
    for seq in itertools.product(range(V), repeat=D):
        pr = float(np.prod([float(p_fn(seq[:t])[seq[t]]) for t in range(D)]))
        if pr > 0:
            out[seq] = pr
    return out


def _law_tv(a, b):
    return sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b)) / 2


@pytest.mark.parametrize(
    "V, widths, K",
    [(3, (2, 2), 2), (4, (3, 1, 2), 3), (4, (2,), 3), (3, (1, 3), 2), (2, (2, 2), 2)],
)
def test_exact_tree_law_is_p(V, widths, K):
    """The law of the first K + 1 tokens of a chain tree's step (and the target after it) is the
    target's, exactly (float64 enumeration of every ordered draw)."""
    for seed in range(2):
        p_fn, q_fn = _context_laws(V, 10 * V + K + seed)
        assert _law_tv(exact_tree_law(p_fn, q_fn, widths, K), _target_law(p_fn, V, K + 1)) < 1e-12


def test_exact_tree_law_catches_a_wrong_correction():
    p_fn, q_fn = _context_laws(4, 3)
    law = exact_tree_law(p_fn, q_fn, (2, 2), 2, prototype_correction)
    assert _law_tv(law, _target_law(p_fn, 4, 3)) > 0.01


def _tree_sample(p_fn, q_fn, widths, K, g, correction=None, support=None):
    """One step of the chain tree on the toy laws, drawn and verified by the library's own
    functions (chain_tree, verify_tree), then completed from the target to K + 1 tokens."""
    tokens, probs, s = [], [], ()
    for _ in range(K):
        q = q_fn(s)
        x = torch.multinomial(q, 1, generator=g)[0]
        tokens.append(x)
        probs.append(q)
        s = s + (int(x),)
    d_tokens, d_probs = torch.stack(tokens), torch.stack(probs)
    if support is not None:  # the draft's rows on its support, as a drafter naming one returns
        d_probs = d_probs[:, support]
    nodes, parents, laws = chain_tree(d_tokens, d_probs, widths, g, support=support)
    paths = []
    for i, j in enumerate(parents):
        paths.append((paths[j] if j >= 0 else ()) + (int(nodes[i]),))
    target = torch.stack([p_fn(())] + [p_fn(path) for path in paths])
    kw = {} if correction is None else {"correction": correction}
    verdict, path = verify_tree(nodes, parents, laws, target, g, support=support, **kw)
    out = tuple(verdict.tokens.tolist())
    assert out[:-1] == tuple(int(nodes[i]) for i in path)
    while len(out) < K + 1:
        out += (int(torch.multinomial(p_fn(out), 1, generator=g)[0]),)
    return out[: K + 1]


SEED_POWERED = 41  # toy laws on which the prototype's correction is off by TV 0.16 (asserted)


def test_sampled_tree_matches_p_and_wrong_rule_fails():
    V, widths, K, n = 4, (2, 2), 2, 4000
    p_fn, q_fn = _context_laws(V, SEED_POWERED, zeros=0)
    law = _target_law(p_fn, V, K + 1)
    assert _law_tv(exact_tree_law(p_fn, q_fn, widths, K, prototype_correction), law) > 0.1
    keys = sorted(law)
    probs = np.array([law[k] for k in keys])
    for correction, should_pass in ((None, True), (prototype_correction, False)):
        g = torch.Generator().manual_seed(5)
        counts = np.zeros(len(keys))
        for _ in range(n):
            counts[keys.index(_tree_sample(p_fn, q_fn, widths, K, g, correction))] += 1
        res = chisquare_gof(probs=probs, counts=counts)
        assert (res.pvalue > 1e-3) if should_pass else (res.pvalue < 1e-6), (correction, res)


def test_chain_tree_shape():
    g = torch.Generator().manual_seed(0)
    q = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.0, 0.0, 1.0, 0.0], [0.1, 0.4, 0.3, 0.2]])
    d = torch.tensor([0, 2, 3])
    tokens, parents, laws = chain_tree(d, q, (3, 2, 2, 5), g)
    # the chain, two alternatives at depth 1, none at depth 2 (no mass left), one at depth 3
    assert parents == [-1, 0, 1, -1, -1, 1]
    assert tokens[:3].tolist() == [0, 2, 3] and sorted(tokens[3:5].tolist()) == [1, 2]
    assert int(tokens[5]) != 3 and float(laws[5, 3]) == 0.0
    assert torch.allclose(laws.sum(-1), torch.ones(6))
    scores = torch.log(q + 1e-9)
    tokens, parents, laws = chain_tree(d, q, (2, 1, 3), g, scores=scores)
    assert parents == [-1, 0, 1, -1, 1, 1] and tokens[3:].tolist() == [1, 1, 2]
    assert laws[3:].max(-1).values.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("K, tree", [(2, (2, 3)), (3, (1, 2, 2))])
def test_tree_three_token_law_matches_target(tiny_pair, K, tree):
    dec = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, K=K, tree=tree, seed=K, top_k=8)
    res = _continuation_test(tiny_pair, dec, m=3, n=1500)
    assert res.pvalue > 1e-3, res
    kept = (s.branch >= 1 for _ in range(20) for s in dec.generate_ids(PROMPT, 60).steps)
    assert any(kept), "no alternative was ever accepted"


@pytest.mark.parametrize("K, tree", [(1, (2,)), (3, (2, 2, 2)), (5, (3, 2, 2, 2, 2))])
def test_tree_greedy_equals_autoregressive(tiny_pair, K, tree):
    alternatives = sum(w - 1 for w in tree[:K])
    _greedy_check(tiny_pair, K, 4, alternatives, K=K, tree=tree)


def test_tree_records(tiny_pair):
    r = SpeculativeDecoder(
        tiny_pair.draft, tiny_pair.target, K=3, tree=(2, 2, 2), seed=0
    ).generate_ids(PROMPT, 60)
    assert len(r.tokens) == 60
    for s in r.steps:
        n = s.n_accepted
        assert s.emitted[:n] == s.draft_tokens[:n] or s.branch >= 1
        if s.branch >= 1:  # an alternative at depth n took the chain's place there
            assert s.emitted[n - 1] == s.alternatives[s.branch - 1]
            assert s.emitted[: n - 1] == s.draft_tokens[: n - 1]
        assert len(s.alternatives) <= 3


@pytest.mark.parametrize("tree", [(), (0, 2), (2, 1.5), "22", 3])
def test_bad_tree(tiny_pair, tree):
    with pytest.raises(ValueError, match="tree"):
        SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, tree=tree)


def test_tree_and_width_refused_together(tiny_pair):
    with pytest.raises(ValueError, match="either width"):
        SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, width=2, tree=(2, 2))
    with pytest.raises(ValueError, match="verifier"):
        SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, tree=(2,), verifier=lambda *a: None)


def test_verify_tree_bad_input():
    p = torch.full((3, 4), 0.25)
    with pytest.raises(ValueError, match="parents"):
        verify_tree(torch.tensor([1, 2]), [0, -1], p[:2], p)
    with pytest.raises(ValueError, match="parents"):
        verify_tree(torch.tensor([1, 2]), [-1], p[:2], p)
    with pytest.raises(ValueError, match=r"\[N \+ 1, V\]"):
        verify_tree(torch.tensor([1, 2]), [-1, 0], p[:2], p[:2])
    with pytest.raises(ValueError, match="tokens"):
        verify_tree(torch.tensor([1, 7]), [-1, 0], p[:2], p)


@pytest.mark.parametrize("row_by_row", [True, False])
def test_greedy_verification_reads_the_argmaxes_and_matches_the_general_rule(
    row_by_row, monkeypatch
):
    """On point-mass target rows, recursive rejection accepts a candidate exactly when it is its
    parent row's argmax, whatever law it was drawn from: verify_tree_greedy gives the tokens and
    the path verify_tree gives on the one-hot rows, for random trees, laws and near-ties, reducing
    the rows it reads one by one (a CPU's way) or every row at once (other devices')."""
    from specdec_lib import trees
    from specdec_lib.sampling import Warp
    from specdec_lib.trees import verify_tree, verify_tree_greedy

    monkeypatch.setattr(trees, "_ROW_BY_ROW", ("cpu",) if row_by_row else ())

    g = torch.Generator().manual_seed(0)
    V = 6
    for trial in range(400):
        N = int(torch.randint(1, 8, (1,), generator=g))
        parents = [int(torch.randint(-1, i, (1,), generator=g)) for i in range(N)]
        logits = torch.randn(N + 1, V, generator=g).round(decimals=1)  # ties happen
        # candidates: often the parent's argmax, sometimes not; laws far from one-hot
        best = logits.argmax(-1)
        tokens = torch.tensor(
            [
                int(best[j + 1])
                if torch.rand((), generator=g) < 0.6
                else int(torch.randint(V, (1,)))
                for j in parents
            ]
        )
        laws = torch.softmax(torch.randn(N, V, generator=g), -1)
        laws[torch.arange(N), tokens] += 0.5
        laws /= laws.sum(-1, keepdim=True)
        fast, fast_path = verify_tree_greedy(tokens, parents, logits)
        slow, slow_path = verify_tree(tokens, parents, laws, Warp(0).probs(logits), g)
        assert fast.tokens.tolist() == slow.tokens.tolist() and fast_path == slow_path, trial
        assert fast.n_accepted == slow.n_accepted
    with pytest.raises(ValueError, match="NaN"):
        verify_tree_greedy(torch.tensor([1]), [-1], torch.tensor([[0.0, float("nan")], [1, 2]]))
    with pytest.raises(ValueError, match="NaN"):  # +inf in the accepted node's row
        verify_tree_greedy(torch.tensor([1]), [-1], torch.tensor([[0.0, 1], [float("inf"), 2]]))
    # a bad row the walk never reads (the rejected node's) changes nothing
    verdict, path = verify_tree_greedy(
        torch.tensor([0]), [-1], torch.tensor([[0.0, 1], [float("nan"), 2]])
    )
    assert verdict.tokens.tolist() == [1] and path == []
    with pytest.raises(ValueError, match="token ids"):
        verify_tree_greedy(torch.tensor([5]), [-1], torch.zeros(2, 3))


def test_support_stage_is_candidate_stage():
    """Where q is 0 off a support S, support_stage holds what is left of p as its part on S and
    a factor of p off S: stage after stage, the acceptance probabilities and the laws passed on
    are candidate_stage's."""
    g = torch.Generator().manual_seed(5)
    V, S = 10, torch.tensor([1, 2, 4, 5, 7, 8])
    p = random_dist(g, V)
    dense, left, off, mass_off = p, p[S], 1.0, float(p.sum() - p[S].sum())
    for i in range(4):
        q = torch.zeros(V, dtype=p.dtype).index_copy(0, S, random_dist(g, 6, scale=3.0))
        a_dense, dense = candidate_stage(dense, q, S[i])
        a, left, off = support_stage(left, off, q[S], i, mass_off)
        assert abs(a - float(a_dense)) < 1e-12
        whole = (p * off).index_copy(0, S, left)
        assert torch.allclose(whole / whole.sum(), dense, rtol=0, atol=1e-12)


@pytest.mark.parametrize("support", [None, torch.tensor([0, 2, 3, 5])], ids=["all", "support"])
def test_alternatives_are_ordered_draws_without_replacement(support):
    """The alternatives are drawn in order, without replacement: P(a, b) =
    r(a) r(b) / (1 - r(a)), r being q without the first candidate, renormalised."""
    q = torch.tensor([0.3, 0.0, 0.25, 0.2, 0.0, 0.25])
    r = q.clone()
    r[0] = 0
    r = (r / r.sum()).tolist()
    pairs = [(a, b) for a in range(6) for b in range(6) if a != b and r[a] * r[b] > 0]
    probs = np.array([r[a] * r[b] / (1 - r[a]) for a, b in pairs])
    g = torch.Generator().manual_seed(11)
    counts = dict.fromkeys(pairs, 0)
    for _ in range(4000):
        toks, laws = more_candidates(
            q if support is None else q[support], torch.tensor(0), 2, g, support
        )
        counts[tuple(toks.tolist())] += 1
    assert chisquare_gof(probs=probs, counts=np.array(list(counts.values()))).pvalue > 1e-3
    on = support if support is not None else torch.arange(6)
    assert laws.shape == (2, on.numel())
    assert torch.allclose(laws[1], torch.tensor([r[t] for t in on.tolist()]).index_fill(
        0, (on == toks[0]).nonzero()[0], 0) / (1 - r[toks[0]]))  # fmt: skip


def _mass_off_support_ignored(left, off, q, i, mass_off):
    """WRONG: support_stage forgetting the target's mass off the support."""
    return support_stage(left, off, q, i, 0.0)


@pytest.mark.parametrize("stage", ["right", "wrong"])
def test_sampled_tree_on_a_support_matches_p(stage, monkeypatch):
    """Laws 0 off a support: alternatives drawn and verified there (the target's law off it
    rescaled, drawn from only when a draw lands there) give p's law, over three tokens; forget
    the target's mass off the support and the test rejects. (Forgetting to rescale it is caught
    exactly, stage by stage, by test_support_stage_is_candidate_stage.)"""
    if stage == "wrong":
        monkeypatch.setattr(trees, "support_stage", _mass_off_support_ignored)
    V, widths, K, n = 5, (3, 2), 2, 4000
    S = torch.tensor([1, 3])
    p_fn, q_full = _context_laws(V, SEED_POWERED, zeros=0)

    def q_fn(s):
        q = torch.zeros(V, dtype=torch.float64).index_copy(0, S, q_full(s)[S])
        return q / q.sum()

    law = _target_law(p_fn, V, K + 1)
    keys = sorted(law)
    g = torch.Generator().manual_seed(6)
    counts = np.zeros(len(keys))
    for _ in range(n):
        counts[keys.index(_tree_sample(p_fn, q_fn, widths, K, g, support=S))] += 1
    res = chisquare_gof(probs=np.array([law[k] for k in keys]), counts=counts)
    assert (res.pvalue > 1e-3) if stage == "right" else (res.pvalue < 1e-6), res


def test_a_walk_made_before_the_pass_verifies_as_one_made_after():
    """A decoder prepares a sampled tree's walk with the tree (trees.prepare_walk), before the
    target's pass; verifying with it draws exactly what verify_tree draws when it makes the walk
    itself, with the generator in the same state. A walk made for another tree is refused."""
    V, S = 10, torch.tensor([1, 2, 4, 5, 7, 8])
    g = torch.Generator().manual_seed(3)
    tokens, parents = torch.tensor([2, 5, 7]), [-1, -1, 0]
    laws = torch.stack([random_dist(g, 6, scale=2.0) for _ in range(3)]).float()
    logits = torch.randn(4, V, generator=g)
    for seed in range(20):
        inside = verify_tree(
            tokens, parents, laws, WarpedRows(logits, Warp(1.0)),
            torch.Generator().manual_seed(seed), support=S,
        )  # fmt: skip
        g2 = torch.Generator().manual_seed(seed)
        walk = trees.prepare_walk(tokens, laws, S, g2)
        before = verify_tree(
            tokens, parents, laws, WarpedRows(logits, Warp(1.0)), g2, support=S, walk=walk
        )
        assert inside[0].tokens.tolist() == before[0].tokens.tolist() and inside[1] == before[1]
    other = trees.prepare_walk(tokens[:2], laws[:2], S)
    with pytest.raises(ValueError, match="walk"):
        verify_tree(tokens, parents, laws, Warp(1.0).probs(logits), support=S, walk=other)


def test_verify_on_a_support_refuses_bad_input():
    S = torch.tensor([0, 2, 3])
    laws = torch.full((3, 3), 1 / 3)
    logits = torch.zeros(4, 5)
    with pytest.raises(ValueError, match="support"):
        verify_tree(torch.tensor([0, 1, 2]), [-1, -1, 0], laws, Warp(1.0).probs(logits), support=S)
    logits[0, 4] = float("nan")
    for rows in (Warp(1.0).probs(logits), WarpedRows(logits, Warp(1.0))):
        with pytest.raises(ValueError, match="NaN"):
            verify_tree(torch.tensor([0, 2, 3]), [-1, -1, 0], laws, rows, support=S)
    with pytest.raises(ValueError, match="NaN"):  # dense laws, rows warped as they are read
        verify_tree(
            torch.tensor([0, 2]),
            [-1, -1],
            torch.full((2, 5), 0.2),
            WarpedRows(logits[:3], Warp(1.0)),
        )


@pytest.mark.parametrize("support", [None, torch.tensor([1, 2, 4, 5])], ids=["all", "support"])
def test_best_alternatives_rank_by_the_scores(support):
    """Greedy alternatives: the next-best tokens by score after the chain's, never one scored
    -inf, per row, as point masses (on the support when given)."""
    inf = float("-inf")
    scores = torch.tensor([[0.0, 5.0, 4.0, inf, 3.0, 1.0], [inf, 2.0, inf, inf, inf, inf]])
    on_support = scores if support is None else scores[:, support]
    tokens, laws, counts = best_alternatives(on_support, torch.tensor([1, 1]), [2, 3], support)
    assert counts == [2, 0] and tokens.tolist() == [2, 4]
    on = torch.arange(6) if support is None else support
    assert laws.shape == (2, on.numel()) and laws.sum(-1).tolist() == [1.0, 1.0]
    assert on[laws.argmax(-1)].tolist() == [2, 4]


def test_the_host_cumulative_sum_is_numpys_bit_for_bit():
    # the inverse-CDF draws on the host read these sums: the kernel that adds them must not
    # change a single value (float32 laws summed in float64, and float64 residuals)
    rng = np.random.default_rng(0)
    for m in (1, 7, 8192, 49152):
        for a in (
            rng.random(m).astype(np.float32),
            rng.dirichlet(np.full(m, 0.05)),
            rng.random(m) ** 8,
        ):
            assert np.array_equal(trees._cumsum64(a), np.cumsum(a, dtype=np.float64))
