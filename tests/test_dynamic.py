"""DynamicK (``specdec_lib.drafters.dynamic``): the draft-length schedule on a fake drafter, greedy equality and the law at T = 1 on the tiny models, and a wrong stopping rule that the chi-square test must catch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import N_LAW, first_two_law_test

from specdec_lib.decoding import AutoregressiveDecoder, SpeculativeDecoder
from specdec_lib.drafters import BaseDrafter, DynamicK, ModelDrafter
from specdec_lib.drafters.feature import FeatureDrafter
from specdec_lib.research.stats import chisquare_gof, exact_continuation_law
from specdec_lib.sampling import Warp

V = 32
PROMPT = torch.tensor([[0, 5, 9, 3]])


@pytest.mark.parametrize(
    "kw", [{"schedule": "heuristic"}, {"schedule": "constant", "threshold": 0.2}]
)
def test_dynamic_k_around_a_feature_drafter(tiny_pair, random_head, kw):
    from specdec_lib.drafters import DynamicK

    dk = DynamicK(FeatureDrafter(random_head), initial=2, **kw)
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    spec = SpeculativeDecoder(dk, tiny_pair.target, K=6, temperature=0)
    out = spec.generate_ids(PROMPT, 25)
    assert out.tokens == ar.generate_ids(PROMPT, 25).tokens and out.n_proposed > 0
    # The law at T = 1 (first 2 of 4 tokens), with the schedule or the threshold active.
    dec = SpeculativeDecoder(
        DynamicK(FeatureDrafter(random_head), initial=2, **kw), tiny_pair.target, K=3, seed=4
    )
    law = exact_continuation_law(tiny_pair.target, PROMPT, dec.warp, 2)
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    lengths = set()
    for _ in range(1200):
        r = dec.generate_ids(PROMPT, 4)
        counts[index[tuple(r.tokens[:2])]] += 1
        lengths.add(len(r.steps[1].draft_tokens))
    res = chisquare_gof(probs=np.array([law[k] for k in keys]), counts=counts, max_bins=60)
    assert res.pvalue > 1e-3, res
    if "threshold" in kw:
        assert len(lengths) > 1  # the threshold did cut some drafts short


class FakeDrafter(BaseDrafter):
    """Proposes ``k`` tokens (at most ``limit``) whose draft probabilities are read from ``conf``;
    with a threshold, stops after the first draft ``x`` with ``q(x) < threshold``."""

    stops_by_confidence = True

    def __init__(self, conf=(0.9,), limit=None):
        self.conf, self.limit = list(conf), limit
        self.calls, self.updates = [], []

    def propose(self, ids, k, warp, generator, threshold=None):
        self.calls.append((ids.tolist(), k, threshold))
        n = k if self.limit is None else min(k, self.limit)
        tokens = torch.arange(n) % V
        q = torch.zeros(n, V)
        for i in range(n):
            c = self.conf[(len(ids) + i) % len(self.conf)]
            q[i, tokens[i]] = c
            q[i, (tokens[i] + 1) % V] = 1 - c
            if threshold is not None and c < threshold:
                return tokens[: i + 1], q[: i + 1]
        return tokens, q

    def update(self, n_valid):
        self.updates.append(n_valid)


def _step(dk, length, n_accepted, k=16):
    """One decoder step on a sequence of ``length`` tokens; returns the number proposed."""
    tokens, _ = dk.propose(torch.zeros(length, dtype=torch.long), k, Warp(), None)
    dk.update(length + n_accepted)
    return tokens.numel()


def test_heuristic_schedule():
    dk = DynamicK(FakeDrafter(), initial=5)
    assert _step(dk, 10, 5) == 5 and dk.current == 7  # all accepted: +2
    assert _step(dk, 16, 3) == 7 and dk.current == 6  # a rejection: -1
    assert _step(dk, 20, 6) == 6 and dk.current == 8
    assert _step(dk, 27, 0, k=3) == 3 and dk.current == 7  # the decoder's k caps the draft
    assert dk.history == [5, 7, 6, 3] and dk.accepted_history == [5, 3, 6, 0]
    for _ in range(10):
        _step(dk, 30, 0)
    assert dk.current == 1  # floor
    assert _step(dk, 30, 0) == 1 and dk.current == 1
    assert dk.drafter.updates[-1] == 30


def test_heuristic_never_grows_past_k():
    dk = DynamicK(FakeDrafter(), initial=5)
    assert _step(dk, 10, 5, k=6) == 5 and dk.current == 6
    assert _step(dk, 16, 6, k=6) == 6 and dk.current == 6
    assert _step(dk, 23, 2, k=2) == 2 and dk.current == 6  # a small k never lowers it


def test_reset_restarts_schedule_and_inner():
    inner = FakeDrafter()
    dk = DynamicK(inner, initial=3)
    _step(dk, 10, 3)
    _step(dk, 14, 5)
    assert dk.current == 7
    dk.update(0)
    assert dk.current == 3 and dk.history == [] and dk.accepted_history == []
    assert inner.updates[-1] == 0


def test_nothing_proposed_or_asked_leaves_schedule():
    dk = DynamicK(FakeDrafter(limit=0), initial=5)
    assert _step(dk, 10, 0) == 0 and dk.current == 5  # the inner drafter declined: nothing learnt
    dk.update(11)  # a step the decoder ran without asking (k = 0 at the end of the output)
    assert dk.current == 5 and dk.history == [0, 0]


def test_short_proposal_fully_accepted_grows():
    dk = DynamicK(FakeDrafter(limit=2), initial=5)
    assert _step(dk, 10, 2) == 2 and dk.current == 7  # every proposed draft accepted


def test_constant_schedule():
    dk = DynamicK(FakeDrafter(), schedule="constant", initial=4)
    assert [_step(dk, 10, a, k=k) for a, k in [(4, 16), (0, 16), (1, 2), (4, 16)]] == [4, 4, 2, 4]
    assert dk.current == 4


def test_threshold_stops_after_first_unsure_draft():
    # Draft probabilities by position: 0.9 at 10, 0.8 at 11, 0.3 at 12, 0.9 at 13.
    inner = FakeDrafter(conf=[0.9, 0.8, 0.3, 0.9] + [0.9] * 6)
    dk = DynamicK(inner, initial=6, threshold=0.5)
    tokens, q = dk.propose(torch.arange(10), 16, Warp(), None)
    assert tokens.numel() == 3  # the unsure third draft is kept, then drafting stops
    assert q.shape == (3, V)
    # The inner drafter is asked once, for the schedule's length, with the threshold.
    assert [(k, t) for _, k, t in inner.calls] == [(6, 0.5)]
    confident = DynamicK(FakeDrafter(conf=[0.9]), initial=6, threshold=0.5)
    assert confident.propose(torch.arange(10), 4, Warp(), None)[0].numel() == 4


class OwnTemperature(BaseDrafter):
    """Samples drafts at its own temperature whatever the decoder's warp: q is never one-hot, so
    the confidence threshold fires even under greedy decoding. Any q is exact."""

    stops_by_confidence = True

    def __init__(self, model, temperature=1.0):
        self.inner, self.warp = ModelDrafter(model), Warp(temperature)

    def propose(self, ids, k, warp, generator, threshold=None):
        return self.inner.propose(ids, k, self.warp, generator, threshold)

    def update(self, n_valid):
        self.inner.update(n_valid)


@pytest.mark.parametrize(
    "make, schedule, threshold",
    [
        (lambda pair: ModelDrafter(pair.draft), "heuristic", None),
        (lambda pair: pair.draft, "heuristic", 0.5),
        (lambda pair: pair.draft, "constant", 0.5),  # reads the draft's softmax, not one-hot q
        (lambda pair: OwnTemperature(pair.draft), "constant", 0.1),
        (lambda pair: OwnTemperature(pair.draft), "heuristic", 0.1),
    ],
    ids=[
        "model-heuristic",
        "model-heuristic-0.5",
        "model-constant-0.5",
        "soft-constant-0.1",
        "soft-heuristic-0.1",
    ],
)
def test_dynamic_k_greedy_equals_autoregressive(tiny_pair, make, schedule, threshold):
    K, n = 8, 60
    initial = 2 if schedule == "heuristic" else K
    dk = DynamicK(make(tiny_pair), schedule=schedule, initial=initial, threshold=threshold)
    sd = SpeculativeDecoder(dk, tiny_pair.target, K=K, temperature=0, seed=0)
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    stopped_early = accepted = 0
    for prompt in ([0, 5, 9, 3], [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]):
        r = sd.generate_ids(torch.tensor([prompt]), n)
        assert r.tokens == ar.generate_ids(torch.tensor([prompt]), n).tokens
        accepted += r.n_accepted
        # The wrapper's records line up with the decoder's steps.
        assert dk.history == [len(s.draft_tokens) for s in r.steps]
        assert dk.accepted_history == [s.n_accepted for s in r.steps]
        asked = _asked(r, K, n)
        assert all(h <= a for h, a in zip(dk.history, asked, strict=True))
        if threshold is None:
            assert max(dk.history) > initial  # the schedule grew after full acceptances
        elif (
            schedule == "constant"
        ):  # the cap is the decoder's k, so a shorter draft is a confidence stop
            stopped_early += sum(0 < h < a for h, a in zip(dk.history, asked, strict=True))
    assert accepted > 0
    if schedule == "constant":  # the stop fires in greedy decoding too
        assert stopped_early > 0


@pytest.mark.parametrize("threshold", [None, 1e-6])
def test_transparent_wrapper_reproduces_plain_decoder(tiny_pair, threshold):
    """Constant K and a threshold that never fires: the same tokens as the plain decoder at the
    same seed, at T = 1. Drafting one token at a time consumes the same random numbers and
    leaves the draft's cache as drafting k at once does."""
    K = 4
    dk = DynamicK(tiny_pair.draft, schedule="constant", initial=K, threshold=threshold)
    a = SpeculativeDecoder(dk, tiny_pair.target, K=K, seed=7)
    b = SpeculativeDecoder(tiny_pair.draft, tiny_pair.target, K=K, seed=7)
    for _ in range(3):
        ra, rb = a.generate_ids(PROMPT, 40), b.generate_ids(PROMPT, 40)
        assert ra.tokens == rb.tokens
        assert [s.draft_tokens for s in ra.steps] == [s.draft_tokens for s in rb.steps]


class StopBefore(BaseDrafter):
    """WRONG, to show the test can fail: draws a draft, and if ``q(x) < threshold`` drops it and
    stops. Whether ``x`` is kept depends on ``x`` itself, so a kept draft is not distributed as
    the ``q`` handed to the verifier (not a stopping time)."""

    def __init__(self, model, threshold):
        self.inner, self.threshold = ModelDrafter(model), threshold

    def propose(self, ids, k, warp, generator, threshold=None):
        tokens, rows, seq = [], [], ids
        for _ in range(k):
            x, q = self.inner.propose(seq, 1, warp, generator)
            if q[0, x[0]].item() < self.threshold:
                break
            tokens.append(x)
            rows.append(q)
            seq = torch.cat([seq, x])
        if not tokens:
            return torch.empty(0, dtype=torch.long), torch.zeros(0, V)
        return torch.cat(tokens), torch.cat(rows)

    def update(self, n_valid):
        self.inner.update(n_valid)


def test_threshold_law_matches_target(tiny_pair):
    res, drafted = first_two_law_test(
        tiny_pair, DynamicK(tiny_pair.draft, threshold=0.1), PROMPT, N_LAW, seed=1
    )
    first = [d[0] for d in drafted]
    assert first.count(1) > 100 and first.count(2) > 100  # stopped early, and drafted on
    assert res.pvalue > 1e-3, res


def test_stopping_before_unsure_draft_fails(tiny_pair):
    res, _ = first_two_law_test(tiny_pair, StopBefore(tiny_pair.draft, 0.1), PROMPT, N_LAW, 1)
    assert res.pvalue < 1e-6, res


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"schedule": "linear"}, "schedule"),
        ({"schedule": None}, "schedule"),
        ({"initial": 0}, "initial"),
        ({"initial": 1.5}, "initial"),
        ({"initial": True}, "initial"),
        ({"threshold": 0}, "threshold"),
        ({"threshold": 1}, "threshold"),
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": -0.2}, "threshold"),
        ({"threshold": float("nan")}, "threshold"),
        ({"threshold": True}, "threshold"),
        ({"threshold": "0.5"}, "threshold"),
    ],
)
def test_dynamic_k_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DynamicK(FakeDrafter(), **kwargs)


def test_dynamic_k_bad_drafter_and_k(tiny_pair):
    with pytest.raises(ValueError, match="Drafter"):
        DynamicK("not a drafter")
    with pytest.raises(ValueError, match="k must be"):
        DynamicK(FakeDrafter()).propose(torch.arange(3), 0, Warp(), None)
    # The wrapper shows the decoder the inner draft's vocabulary, so a mismatch is caught.
    from specdec_lib.tiny import tiny_random_llama

    with pytest.raises(ValueError, match="vocab"):
        SpeculativeDecoder(DynamicK(tiny_random_llama(0, vocab_size=40)), tiny_pair.target)


def _asked(result, K, max_new_tokens):
    """The ``k`` the decoder asked the drafter for at each step: ``min(K, still wanted - 1)``."""
    asked, done = [], 0
    for s in result.steps:
        asked.append(min(K, max_new_tokens - done - 1))
        done += len(s.emitted)
    return asked
