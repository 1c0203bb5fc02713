"""research.peer: llama.cpp's kernels under the library's decoders (built by `make peers`; the
tests that need the build skip with a message where it is absent)."""

import pytest
import torch

from specdec_lib.research import peer

BUILT = (peer.BIN / "libllama.so").exists() and peer.SOURCE.is_dir()
needs_build = pytest.mark.skipif(not BUILT, reason="llama.cpp is not built here: run `make peers`")
# A prompt whose last tokens recur in it, so that prompt lookup drafts from the first step.
TEXT = "one two three four five, one two three four five, one two three"


def test_without_the_build_the_error_names_make_peers(monkeypatch, tmp_path):
    monkeypatch.setattr(peer, "BIN", tmp_path)
    with pytest.raises(peer.PeerUnavailableError, match="make peers"):
        peer.bindings()


@pytest.fixture(scope="module")
def engine():
    from specdec_lib.models import find_smollm2_gguf, tokenizer_from_gguf

    path = find_smollm2_gguf()
    ids = tokenizer_from_gguf(path)(TEXT, return_tensors="pt").input_ids[0]
    return peer.LlamaCppLM(path, threads=1, n_ctx=256), ids


@needs_build
def test_greedy_prompt_lookup_on_the_engine_is_the_engines_greedy_decoding(engine):
    from specdec_lib.decoding import AutoregressiveDecoder, SpeculativeDecoder
    from specdec_lib.drafters import NgramDrafter

    lm, ids = engine
    ar = AutoregressiveDecoder(lm, temperature=0).generate_ids(ids, 24)
    spec = SpeculativeDecoder(NgramDrafter(lm.config.vocab_size), lm, K=4, temperature=0)
    r = spec.generate_ids(ids, 24)
    assert r.tokens == ar.tokens
    assert r.n_accepted > 0  # the drafts were used, not only proposed


@needs_build
@pytest.mark.parametrize("wrong", [False, True])
def test_the_law_of_two_tokens_on_the_engine_is_its_target_law(engine, wrong):
    """Prompt lookup drafting a chain on llama.cpp's passes at T = 1, top-k 3: the first two
    tokens follow the engine's own exact law; a cache left uncropped after a rejection is
    rejected on the same N (the rule's own faults need a draft that is not one-hot: with a
    one-hot draft the prototype's correction is the residual itself)."""
    from collections import Counter

    from specdec_lib.decoding import SpeculativeDecoder, TargetState
    from specdec_lib.drafters import NgramDrafter
    from specdec_lib.research.stats import chisquare_law, exact_continuation_law
    from specdec_lib.testing import StaleCacheState

    lm, ids = engine
    dec = SpeculativeDecoder(
        NgramDrafter(lm.config.vocab_size),
        lm,
        K=2,
        temperature=1.0,
        top_k=3,
        seed=1,
        target_state=StaleCacheState if wrong else TargetState,
    )
    law = exact_continuation_law(lm, ids, dec.warp, 2, min_prob=1e-12)  # top-k: 9 at most
    counts = Counter(tuple(dec.generate_ids(ids, 3).tokens[:2]) for _ in range(300))
    res = chisquare_law(counts, law)
    assert (res.pvalue < 1e-6) if wrong else (res.pvalue > 1e-3), res


def test_weight_bytes_counts_a_tied_matrix_once():
    lin = torch.nn.Linear(4, 8, bias=False)
    model = torch.nn.Sequential(lin, torch.nn.LayerNorm(8))
    model.tied = lin.weight
    assert peer.weight_bytes(model) == 4 * 8 * 4


def test_the_examples_log_gives_the_tokens_it_emitted_in_order():
    from specdec_lib.research.peer_sampler import emitted_tokens

    log = (
        "D the sampled target token (7042, ' Paris') did not match, or we ran out\n"
        "D draft 0: [ ',':28, '\n':198 ]\n"
        "D draft token 0 of sequence 0 (28, ',') accepted\n"
        "D draft token 1 of sequence 0 (198, '\n') rejected\n"
        "D the sampled target token (30, '.') did not match, or we ran out\n"
    )
    assert emitted_tokens(log) == [7042, 28, 30]


def test_the_argmax_draft_law_is_the_target_law_only_for_a_one_hot_draft():
    """The rule with x = argmax q in place of x ~ q: exact where q is one-hot, not otherwise (the
    draft's favourite is accepted whenever p(a) >= q(a))."""
    from specdec_lib.research.peer_sampler import argmax_draft_law

    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    assert torch.allclose(argmax_draft_law(p, torch.tensor([0.0, 1.0, 0.0]).double()), p)
    q = torch.tensor([0.2, 0.6, 0.2], dtype=torch.float64)  # a = 1, accepted with 0.3/0.6
    law = argmax_draft_law(p, q)
    assert torch.allclose(law, torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64))
    q = torch.tensor([0.45, 0.35, 0.2], dtype=torch.float64)  # a = 0, p(a) > q(a): always
    assert torch.allclose(argmax_draft_law(p, q), torch.tensor([1.0, 0.0, 0.0]).double())


@needs_build
def test_llama_speculative_draws_parse_and_start_from_the_targets_support(engine):
    from specdec_lib.models import find_smollm2_gguf
    from specdec_lib.research import peer_sampler as ps

    target = find_smollm2_gguf()
    draws = ps.speculative_draws(target, ps.quantized_draft(target), range(2), progress=False)
    lm, _ = engine
    p1 = torch.softmax(lm(torch.tensor([lm.tokenize(ps.PROMPT)])).logits[0, -1], -1)
    assert len(draws) == 2 and all(p1[t1] > 0 for t1, _ in draws)
