"""Prompt lookup (``specdec_lib.drafters.ngram``) on hand-made sequences and against a brute-force
search, and exactness on the tiny random models: greedy equality with the autoregressive decoder
and the chi-square test of the law of the first two tokens at T = 1."""

import pytest
import torch
from conftest import N_LAW, first_two_law_test

from specdec_lib.decoding import (
    AutoregressiveDecoder,
    SpeculativeDecoder,
)
from specdec_lib.drafters import NgramDrafter
from specdec_lib.sampling import Warp

V = 32
PROMPT = torch.tensor([[0, 5, 9, 3]])
REPEATING = torch.tensor([[14, 0, 14, 2, 14, 0, 14]])  # n-gram drafts of 2 tokens from the start


def _propose(drafter, seq, k=10):
    tokens, q = drafter.propose(torch.tensor(seq), k, Warp(), None)
    return tokens.tolist(), q


# --------------------------------------------------------------------------------------------
# NgramDrafter
# --------------------------------------------------------------------------------------------


def test_ngram_takes_latest_match():
    d = NgramDrafter(V, max_ngram=2)
    # "1 2" occurs at 0 (then 7) and at 3 (then 8): the latest wins, continued to the end.
    assert _propose(d, [1, 2, 7, 1, 2, 8, 5, 1, 2])[0] == [8, 5, 1, 2]
    assert d.match(torch.tensor([1, 2, 7, 1, 2, 8, 5, 1, 2])) == (5, 2)


def test_ngram_prefers_longer_ngrams():
    seq = [3, 1, 2, 9, 0, 1, 2, 6, 3, 1, 2]
    assert _propose(NgramDrafter(V, max_ngram=3), seq, k=2)[0] == [9, 0]  # "3 1 2" at 0
    assert _propose(NgramDrafter(V, max_ngram=2), seq, k=2)[0] == [6, 3]  # latest "1 2"
    assert _propose(NgramDrafter(V, max_ngram=1), [5, 2, 6, 2], k=2)[0] == [6, 2]


def test_ngram_at_most_k_and_max_tokens():
    seq = [4, 5, 6, 7, 8, 9, 1, 2, 3, 4]
    assert _propose(NgramDrafter(V), seq, k=3)[0] == [5, 6, 7]
    assert _propose(NgramDrafter(V, max_tokens=2), seq, k=8)[0] == [5, 6]
    assert _propose(NgramDrafter(V), seq, k=1)[0] == [5]
    # The continuation stops where the sequence ends.
    assert _propose(NgramDrafter(V), [4, 5, 6, 4], k=10)[0] == [5, 6, 4]
    assert _propose(NgramDrafter(V), [7, 7], k=10)[0] == [7]


@pytest.mark.parametrize(
    "seq, kwargs",
    [
        ([1, 2, 3, 4], {}),
        ([7], {}),
        ([5, 1, 2, 1], {"min_ngram": 2}),  # "1" recurs, "2 1" does not
        ([9, 9], {"min_ngram": 2, "max_ngram": 2}),  # too short for an earlier bigram
    ],
)
def test_ngram_no_match_gives_no_drafts(seq, kwargs):
    tokens, q = NgramDrafter(V, **kwargs).propose(torch.tensor(seq), 5, Warp(), None)
    assert tokens.shape == (0,) and tokens.dtype == torch.long
    assert q.shape == (0, V) and q.dtype == torch.float32


def test_ngram_rows_are_one_hot_and_deterministic():
    d = NgramDrafter(V)
    ids = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6, 3, 1, 4])
    tokens, q = d.propose(ids, 4, Warp(), None)
    assert tokens.tolist() == [1, 5, 9, 2]
    assert q.dtype == torch.float32 and q.device == ids.device
    assert torch.equal(q, torch.nn.functional.one_hot(tokens, V).float())
    g = torch.Generator().manual_seed(0)
    again, q2 = d.propose(ids, 4, Warp(temperature=0.3, top_k=3), g)
    assert torch.equal(again, tokens) and torch.equal(q2, q)


def _brute_force_match(seq, min_ngram, max_ngram):
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        for start in range(len(seq) - 1, n - 1, -1):  # the continuation starts at seq[start]
            if seq[start - n : start] == seq[-n:]:
                return start, n
    return None


@pytest.mark.parametrize("min_ngram, max_ngram", [(1, 1), (1, 3), (2, 4)])
def test_ngram_matches_brute_force(min_ngram, max_ngram):
    g = torch.Generator().manual_seed(max_ngram)
    d = NgramDrafter(V, min_ngram=min_ngram, max_ngram=max_ngram)
    for _ in range(300):
        L = int(torch.randint(1, 40, (1,), generator=g))
        seq = torch.randint(0, 3, (L,), generator=g).tolist()
        assert d.match(torch.tensor(seq)) == _brute_force_match(seq, min_ngram, max_ngram), seq


# --------------------------------------------------------------------------------------------
# DynamicK on a fake drafter
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# Exactness on the tiny models: greedy
# --------------------------------------------------------------------------------------------


def test_ngram_greedy_equals_autoregressive(tiny_pair):
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    proposed = accepted = 0
    for prompt in ([0, 5, 9, 3], [7, 7, 7, 7], [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]):
        for K in (2, 5):
            sd = SpeculativeDecoder(NgramDrafter(V), tiny_pair.target, K=K, temperature=0)
            r = sd.generate_ids(torch.tensor([prompt]), 60)
            assert r.tokens == ar.generate_ids(torch.tensor([prompt]), 60).tokens
            proposed += r.n_proposed
            accepted += r.n_accepted
    assert proposed > 100 and accepted > 10


# --------------------------------------------------------------------------------------------
# Exactness on the tiny models: the law at T = 1
# --------------------------------------------------------------------------------------------


def test_ngram_law_matches_target(tiny_pair):
    res, drafted = first_two_law_test(tiny_pair, NgramDrafter(V), REPEATING, N_LAW, seed=2)
    assert all(d[0] == 2 for d in drafted)
    assert res.pvalue > 1e-3, res


# --------------------------------------------------------------------------------------------
# Bad arguments
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, kwargs, name",
    [
        ((0,), {}, "vocab_size"),
        (("32",), {}, "vocab_size"),
        ((True,), {}, "vocab_size"),
        ((V,), {"max_ngram": 0}, "max_ngram"),
        ((V,), {"max_ngram": 1, "min_ngram": 2}, "max_ngram"),
        ((V,), {"max_ngram": 2.0}, "max_ngram"),
        ((V,), {"min_ngram": 0}, "min_ngram"),
        ((V,), {"max_tokens": 0}, "max_tokens"),
        ((V,), {"max_tokens": 2.5}, "max_tokens"),
    ],
)
def test_ngram_bad_arguments(args, kwargs, name):
    with pytest.raises(ValueError, match=name):
        NgramDrafter(*args, **kwargs)


def test_ngram_vocabulary_checked_by_the_decoder(tiny_pair):
    with pytest.raises(ValueError, match="vocab"):
        SpeculativeDecoder(NgramDrafter(V + 1), tiny_pair.target, K=2)
