"""The deliberately wrong pieces (``specdec_lib.testing``) fail the tests the right decoder passes:
the chi-square test of two-token continuations, and greedy equality with autoregressive decoding."""

from test_decoding import PROMPT, _continuation_test

from specdec_lib.decoding import AutoregressiveDecoder, SpeculativeDecoder
from specdec_lib.testing import StaleCacheState, wrong_bonus_row_verify


def test_stale_cache_rejected_by_the_law_test(tiny_pair):
    # K = 1 and independent random models: the first step is often rejected, and the second
    # token is then drawn after the rejected draft's stale cache entry.
    bad = SpeculativeDecoder(
        tiny_pair.draft, tiny_pair.target, K=1, seed=0, target_state=StaleCacheState
    )
    res = _continuation_test(tiny_pair, bad, m=2, n=4000)
    assert res.pvalue < 1e-6, res


def test_stale_cache_breaks_greedy_equality(tiny_pair):
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0).generate_ids(PROMPT, 30).tokens
    good = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, K=3, temperature=0)
    bad = SpeculativeDecoder(
        tiny_pair.draft, tiny_pair.target, K=3, temperature=0, target_state=StaleCacheState
    )
    assert good.generate_ids(PROMPT, 30).tokens == ar
    assert bad.generate_ids(PROMPT, 30).tokens != ar


def test_wrong_bonus_row_rejected_by_the_law_test(tiny_pair):
    # A self-draft accepts every draft, so every step ends with a bonus token.
    bad = SpeculativeDecoder(
        tiny_pair.target, tiny_pair.target, K=1, seed=0, verifier=wrong_bonus_row_verify
    )
    res = _continuation_test(tiny_pair, bad, m=2, n=2000)
    assert res.pvalue < 1e-6, res


def test_wrong_bonus_row_breaks_greedy_equality(tiny_pair):
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0).generate_ids(PROMPT, 30).tokens
    bad = SpeculativeDecoder(
        tiny_pair.target, tiny_pair.target, K=2, temperature=0, verifier=wrong_bonus_row_verify
    )
    assert bad.generate_ids(PROMPT, 30).tokens != ar
