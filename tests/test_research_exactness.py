"""The exactness grid (``specdec_lib.research.exactness``) on the tiny random pair: a correct
configuration passes the chi-square test against the target's exact law, the failing arms do not."""

import pytest

from specdec_lib.research.exactness import Config, as_frame, shipped_grid


def _tiny_grid(pair, name, faults, n):
    """One configuration of the tiny pair's model draft and ``faults`` on it: K = 1, two tokens."""
    return shipped_grid(
        {name: Config("model", "float32")},
        faults={fault: name for fault in faults},
        n=n,
        prompt="abc",
        first=None,
        K=1,
        length=2,
        load=lambda c: pair,
    )


def _two_token_grid(configs, load):
    """``configs`` on the tiny pair(s) ``load`` gives, no failing arms: 600 outputs of two tokens
    after "abc", K = 2."""
    return shipped_grid(
        configs, faults={}, n=600, prompt="abc", first=None, K=2, length=2, load=load
    )


def test_grid_passes_the_right_decoder_and_rejects_the_faults(tiny_pair):
    faults = ("prototype's correction", "uncropped target cache", "bonus from the wrong row")
    # At n = 800 the faults' p-values were all below 1e-8.
    result = _tiny_grid(tiny_pair, "tiny model draft", faults, n=1000)
    df = as_frame(result).set_index("name")
    assert df.loc["tiny model draft", "p"] > 1e-3
    assert df.loc["prototype's correction", "p"] < 1e-4
    assert df.loc["uncropped target cache", "p"] < 1e-6
    assert df.loc["bonus from the wrong row", "p"] < 1e-6
    assert (df.bins >= 2).all() and df.loc["tiny model draft", "bonus_steps"] > 0


def test_grid_refuses_an_unknown_failing_arm(tiny_pair):
    with pytest.raises(ValueError, match="faults"):
        _tiny_grid(tiny_pair, "tiny", ("a typo",), n=10)


def test_transformers_assisted_generation_is_an_arm_under_the_same_test(tiny_pair):
    result = _two_token_grid(
        {"hf assisted": Config("model", "float32", method="hf_assisted")}, lambda c: tiny_pair
    )
    row = as_frame(result).set_index("name").loc["hf assisted"]
    assert row.kept == 600 and row.proposed == 0 and row.bins >= 2
    assert 0 <= row.p <= 1  # what it finds is reported, either way


def test_a_packed_configuration_is_tested_against_its_own_target(tiny_pair):
    from specdec_lib.models import load_pair

    packed = load_pair("tiny-random", pack=True)
    assert packed.notes["packed"]
    loaded = []

    def load(c):
        loaded.append(c.pack)
        return packed if c.pack else tiny_pair

    result = _two_token_grid(
        {"plain": Config("model", "float32"), "packed": Config("model", "float32", pack=True)}, load
    )
    df = as_frame(result).set_index("name")
    assert loaded == [False, True] and bool(df.loc["packed", "pack"])
    assert (df.p > 1e-3).all() and (df.bins >= 2).all()


def test_a_draft_that_stops_by_confidence_is_an_arm_under_the_same_test(tiny_pair):
    """The configuration ``bench`` runs by default stops its draft by confidence: the grid runs
    it that way (fewer drafts than K a step), under the same test."""
    result = shipped_grid(
        {
            "fixed": Config("model", "float32"),
            "stopped": Config("model", "float32", threshold=0.5),
        },
        faults={},
        n=600,
        prompt="abc",
        first=None,
        K=3,
        length=3,
        load=lambda c: tiny_pair,
    )
    df = as_frame(result).set_index("name")
    assert (df.p > 1e-3).all()
    assert df.loc["stopped", "proposed"] < df.loc["fixed", "proposed"]


def test_the_uncropped_cache_law_is_what_the_faulty_decoder_draws(tiny_pair):
    """stale_cache_law's right law is the target's exact law; its uncropped law is what a decoder
    with an uncropped target cache (prompt lookup, K = 1) draws, and the right law rejects it."""
    from collections import Counter

    import numpy as np
    import torch

    from specdec_lib.decoding import SpeculativeDecoder
    from specdec_lib.drafters import NgramDrafter
    from specdec_lib.research.exactness import stale_cache_law
    from specdec_lib.research.stats import chisquare_law, exact_continuation_law
    from specdec_lib.sampling import Warp
    from specdec_lib.testing import StaleCacheState

    target, warp = tiny_pair.target, Warp(1.0, top_k=4)
    ids = torch.tensor([3, 4, 5, 3, 4, 5, 3, 4])  # prompt lookup drafts 5
    right, wrong = stale_cache_law(target, ids, warp, 5)
    exact = exact_continuation_law(target, ids, warp, 2, min_prob=1e-12)
    assert set(right) == set(exact)
    np.testing.assert_allclose(
        [right[k] for k in exact], list(exact.values()), rtol=1e-5
    )  # batched passes round apart
    V = target.config.vocab_size
    dec = SpeculativeDecoder(
        NgramDrafter(V), target, K=1, temperature=1.0, top_k=4, seed=0, target_state=StaleCacheState
    )
    counts = Counter(tuple(dec.generate_ids(ids, 2).tokens) for _ in range(1500))
    assert chisquare_law(counts, wrong).pvalue > 1e-3
    assert chisquare_law(counts, right).pvalue < 1e-6
