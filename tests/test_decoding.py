"""Decoders on tiny random Llama models: the law of a 2-token continuation against exact
enumeration, greedy equality, cache vs no cache, lengths, EOS, determinism, bad input."""

from collections import Counter

import numpy as np
import pytest
import torch

from specdec_lib.decoding import AutoregressiveDecoder, SpeculativeDecoder
from specdec_lib.drafters import BaseDrafter, ModelDrafter
from specdec_lib.research.stats import chisquare_gof, exact_continuation_law
from specdec_lib.sampling import Warp, prototype_correction, verify

PROMPT = torch.tensor([[0, 5, 9, 3]])


def _continuation_test(pair, decoder, m=2, n=2500):
    law = exact_continuation_law(pair.target, PROMPT, decoder.warp, m)
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    for _ in range(n):
        toks = tuple(decoder.generate_ids(PROMPT, m).tokens)
        assert toks in index, f"emitted {toks}, which has probability 0 under the target"
        counts[index[toks]] += 1
    probs = np.array([law[k] for k in keys])
    return chisquare_gof(probs=probs, counts=counts)


@pytest.mark.parametrize(
    "K, temperature, top_p",
    [(1, 1.0, None), (3, 0.8, 0.9), (4, 1.3, None)],
)
def test_two_token_law_matches_target(tiny_pair, K, temperature, top_p):
    dec = SpeculativeDecoder(
        tiny_pair.draft, tiny_pair.target, K=K, temperature=temperature, top_p=top_p, seed=K
    )
    res = _continuation_test(tiny_pair, dec)
    assert res.pvalue > 1e-3, res


@pytest.mark.parametrize(
    "K, tree, scale, top_p", [(2, (1,), 0.5, None), (2, (3, 2), 0.6, None), (1, (3,), 1.8, 0.9)]
)
def test_the_law_is_the_targets_whatever_temperature_the_drafts_are_drawn_at(
    tiny_pair, K, tree, scale, top_p
):
    """Drafts drawn at another temperature than the target's (a sharper or flatter q, a tree's
    alternatives drawn from it without replacement): the output law is still the target's,
    since the rule reads the q the drafts were drawn from."""
    dec = SpeculativeDecoder(
        tiny_pair.draft, tiny_pair.target, K=K, tree=tree, temperature=1.0, top_p=top_p,
        seed=K, draft_temperature_scale=scale,
    )  # fmt: skip
    assert dec.draft_warp.temperature == pytest.approx(scale)
    res = _continuation_test(tiny_pair, dec)
    assert res.pvalue > 1e-3, res


def test_the_draft_temperature_scale_is_checked_and_greedy_ignores_it(tiny_pair):
    for bad in (0, -1.0, float("nan"), "x"):
        with pytest.raises(ValueError, match="draft_temperature_scale"):
            SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, draft_temperature_scale=bad)
    greedy = SpeculativeDecoder(
        tiny_pair.draft, tiny_pair.target, K=2, temperature=0, draft_temperature_scale=0.5
    )
    assert greedy.draft_warp is greedy.warp
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    assert greedy.generate_ids(PROMPT, 20).tokens == ar.generate_ids(PROMPT, 20).tokens


def test_prototype_rule_fails_on_models(tiny_pair):
    def wrong(*args, **kw):
        return verify(*args, correction=prototype_correction)

    # q uniform-ish vs peaked p makes rejections frequent and the bias large.
    dec = SpeculativeDecoder(
        tiny_pair.draft, tiny_pair.target, K=1, temperature=1.0, seed=0, verifier=wrong
    )
    res = _continuation_test(tiny_pair, dec, m=2, n=4000)
    assert res.pvalue < 1e-6, res


def test_autoregressive_law_matches_target(tiny_pair):
    dec = AutoregressiveDecoder(tiny_pair.target, temperature=0.9, top_k=10, seed=0)
    assert _continuation_test(tiny_pair, dec, n=2000).pvalue > 1e-3


@pytest.mark.parametrize("K", [1, 2, 3, 5, 8])
def test_greedy_speculative_equals_greedy_autoregressive(tiny_pair, K):
    g = torch.Generator().manual_seed(K)
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    sd = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, K=K, temperature=0)
    for _ in range(5):
        prompt = torch.randint(0, 32, (1, int(torch.randint(1, 8, (1,), generator=g))), generator=g)
        a = ar.generate_ids(prompt, 40).tokens
        s = sd.generate_ids(prompt, 40)
        assert s.tokens == a
        assert len(a) == 40


@pytest.mark.parametrize("K", [1, 3, 6])
def test_cache_and_no_cache_give_same_tokens(tiny_pair, K):
    kw = dict(K=K, temperature=1.0, top_k=20)
    with_cache = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, seed=11, **kw)
    without = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, seed=11, use_cache=False, **kw)
    for _ in range(3):
        a = with_cache.generate_ids(PROMPT, 30)
        b = without.generate_ids(PROMPT, 30)
        assert a.tokens == b.tokens
        assert a.n_accepted == b.n_accepted
    ar1 = AutoregressiveDecoder(tiny_pair.target, seed=3).generate_ids(PROMPT, 30)
    ar2 = AutoregressiveDecoder(tiny_pair.target, seed=3, use_cache=False).generate_ids(PROMPT, 30)
    assert ar1.tokens == ar2.tokens


@pytest.mark.parametrize("n", [0, 1, 2, 7, 33])
@pytest.mark.parametrize("K", [1, 4, 10])
def test_exactly_max_new_tokens(tiny_pair, n, K):
    r = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, K=K, seed=0).generate_ids(PROMPT, n)
    assert len(r.tokens) == n
    assert all(k <= K for k in (len(s.draft_tokens) for s in r.steps))
    assert sum(len(s.emitted) for s in r.steps) == n


def test_counters_and_records(tiny_pair):
    r = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, K=4, seed=0).generate_ids(PROMPT, 60)
    assert r.n_steps == len(r.steps)
    assert r.n_proposed == sum(len(s.draft_tokens) for s in r.steps)
    assert r.n_accepted == sum(s.n_accepted for s in r.steps)
    assert 0 <= r.alpha <= 1
    for s in r.steps:
        n = s.n_accepted
        assert s.accepted == [True] * n + [False] * (len(s.draft_tokens) - n)
        assert s.emitted[:n] == s.draft_tokens[:n]
        assert len(s.emitted) == n + 1
    assert [t for s in r.steps for t in s.emitted] == r.tokens


def test_eos_ends_output(tiny_pair):
    # Find a token that greedy decoding emits, then declare it EOS.
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    full = ar.generate_ids(PROMPT, 20).tokens
    eos = full[5]
    first = full.index(eos)
    for K in (1, 3, 8):
        sd = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, K=K, temperature=0)
        r = sd.generate_ids(PROMPT, 20, eos_token_id=eos)
        assert r.tokens == full[: first + 1]
        assert r.eos_reached
    r = ar.generate_ids(PROMPT, 20, eos_token_id=[eos, 31])
    assert r.tokens[-1] in (eos, 31) and r.eos_reached


def test_sampled_eos_nothing_after(tiny_pair):
    sd = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, K=5, temperature=1.5, seed=0)
    hits = 0
    for _ in range(30):
        r = sd.generate_ids(PROMPT, 40, eos_token_id=7)
        if 7 in r.tokens:
            hits += 1
            assert r.tokens.index(7) == len(r.tokens) - 1
    assert hits > 0


def test_same_seed_same_tokens(tiny_pair):
    def run(seed):
        d = SpeculativeDecoder(
            tiny_pair.draft, tiny_pair.target, K=3, temperature=1.0, top_p=0.95, seed=seed
        )
        return [d.generate_ids(PROMPT, 25).tokens for _ in range(3)]

    assert run(5) == run(5)
    assert run(5) != run(6)
    d = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, K=3, seed=1)
    assert d.generate_ids(PROMPT, 25, seed=9).tokens == d.generate_ids(PROMPT, 25, seed=9).tokens


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"K": 0}, "K"),
        ({"K": -2}, "K"),
        ({"K": 2.0}, "K"),
        ({"K": True}, "K"),
        ({"temperature": -0.5}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"seed": -1}, "seed"),
    ],
)
def test_decoder_bad_arguments(tiny_pair, kwargs, name):
    with pytest.raises(ValueError, match=name):
        SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, **kwargs)


@pytest.mark.parametrize(
    "ids, n, name",
    [
        (torch.tensor([[0, 1], [2, 3]]), 5, "batch"),
        (torch.tensor([[]], dtype=torch.long), 5, "empty"),
        (PROMPT, -1, "max_new_tokens"),
        (PROMPT, 1.5, "max_new_tokens"),
        (PROMPT, 600, "context length"),
        (torch.tensor([[0, 99]]), 3, r"\[0, 32\)"),
        (torch.tensor([[0.5, 1.0]]), 3, "integer"),
    ],
)
def test_generate_bad_input(tiny_pair, ids, n, name):
    for dec in (
        SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, K=2),
        AutoregressiveDecoder(tiny_pair.target),
    ):
        with pytest.raises(ValueError, match=name):
            dec.generate_ids(ids, n)


def test_vocab_mismatch_refused(tiny_pair):
    from specdec_lib.tiny import tiny_random_llama

    other = tiny_random_llama(0, vocab_size=40)
    with pytest.raises(ValueError, match="vocab"):
        SpeculativeDecoder(other, tiny_pair.target)


def test_nan_logits_detected(tiny_pair):
    class Broken(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model
            self.config = model.config

        def forward(self, **kw):
            out = self.model(**kw)
            out.logits[..., 3] = float("nan")
            return out

    bad = Broken(tiny_pair.target)
    with pytest.raises(ValueError, match="NaN"):
        AutoregressiveDecoder(bad).generate_ids(PROMPT, 3)
    with pytest.raises(ValueError, match="NaN"):  # greedy takes the argmax: checked as well
        AutoregressiveDecoder(bad, temperature=0).generate_ids(PROMPT, 3)
    with pytest.raises(ValueError, match="NaN"):
        SpeculativeDecoder(tiny_pair.draft, bad, K=2).generate_ids(PROMPT, 3)


def test_ngram_style_drafter_plugs_in(tiny_pair):
    """A BaseDrafter with only propose can draft; one-hot q stays exact (greedy check). An
    object without the protocol's hooks is refused by name."""

    class RepeatLast(BaseDrafter):
        def propose(self, ids, k, warp, generator, threshold=None):
            tok = ids[-1].repeat(k)
            return tok, torch.nn.functional.one_hot(tok, 32).float()

    class ThreeMethods:
        reset = rollback = propose = None

    with pytest.raises(ValueError, match="BaseDrafter"):
        SpeculativeDecoder(ThreeMethods(), tiny_pair.target)

    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0).generate_ids(PROMPT, 30).tokens
    sd = SpeculativeDecoder(RepeatLast(), tiny_pair.target, K=3, temperature=0).generate_ids(
        PROMPT, 30
    )
    assert sd.tokens == ar


def test_warp_shared_by_draft_and_target(tiny_pair):
    d = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, temperature=0.7, top_k=5, top_p=0.9)
    assert d.warp == Warp(0.7, 5, 0.9)
    counts = Counter(tuple(d.generate_ids(PROMPT, 1).tokens) for _ in range(200))
    law = exact_continuation_law(tiny_pair.target, PROMPT, d.warp, 1)
    assert set(counts) <= set(law)  # nothing outside the warped support


def test_top_k_one_is_greedy(tiny_pair):
    greedy = AutoregressiveDecoder(tiny_pair.target, temperature=0).generate_ids(PROMPT, 20).tokens
    for K in (1, 4):
        sd = SpeculativeDecoder(
            tiny_pair.draft, tiny_pair.target, K=K, temperature=1.0, top_k=1, seed=K
        )
        assert sd.generate_ids(PROMPT, 20).tokens == greedy


@pytest.mark.parametrize("K, top_k", [(2, None), (3, 8)])
def test_three_token_law_with_multi_token_drafts(tiny_pair, K, top_k):
    """m = 3 new tokens with K >= 2: the first step drafts two tokens, so the law covers several
    drafts per step, partial acceptance, cache rollback and the bonus token."""
    dec = SpeculativeDecoder(
        tiny_pair.draft, tiny_pair.target, K=K, temperature=1.0, top_k=top_k, seed=100 + K
    )
    law = exact_continuation_law(tiny_pair.target, PROMPT, dec.warp, 3)
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    drafted = 0
    for _ in range(2500):
        r = dec.generate_ids(PROMPT, 3)
        counts[index[tuple(r.tokens)]] += 1
        drafted = max(drafted, max(len(s.draft_tokens) for s in r.steps))
    assert drafted == 2
    res = chisquare_gof(probs=np.array([law[k] for k in keys]), counts=counts, max_bins=60)
    assert res.pvalue > 1e-3, res


def test_model_drafter_zero_drafts(tiny_pair):
    tokens, probs = ModelDrafter(tiny_pair.draft).propose(torch.tensor([0, 3]), 0, Warp(1.0), None)
    assert tokens.numel() == 0 and probs.shape == (0, tiny_pair.target.config.vocab_size)


def test_keep_moves_only_the_entries_out_of_place():
    """_move_into_place makes cache entries ``src`` positions ``base, base + 1, ...`` whatever
    the path (parents first, so its entries increase), as a gather would, moving only those out
    of place."""
    from types import SimpleNamespace

    from specdec_lib.decoding import TargetState

    g = torch.Generator().manual_seed(0)
    for src in ([4, 5, 6], [4, 6], [5, 7, 8], [4, 5, 9], [6]):
        layers = [
            SimpleNamespace(
                keys=torch.randn(1, 2, 10, 3, generator=g),
                values=torch.randn(1, 2, 10, 3, generator=g),
            )
            for _ in range(2)
        ]
        want = [(x.keys[..., src, :].clone(), x.values[..., src, :].clone()) for x in layers]
        kept = [(x.keys[..., :4, :].clone(), x.values[..., :4, :].clone()) for x in layers]
        state = TargetState.__new__(TargetState)
        state.cache = SimpleNamespace(layers=layers)
        state._move_into_place(src, 4)
        n = len(src)
        for layer, (k, v), (k0, v0) in zip(layers, want, kept, strict=True):
            assert torch.equal(layer.keys[..., 4 : 4 + n, :], k)
            assert torch.equal(layer.values[..., 4 : 4 + n, :], v)
            assert torch.equal(layer.keys[..., :4, :], k0) and torch.equal(
                layer.values[..., :4, :], v0
            )
