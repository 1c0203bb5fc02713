"""The feature head as a drafter (``specdec_lib.drafters.feature``): greedy equality, cache against no cache, alternatives, the law of trained draft kinds, and the subset warp equal to the full warp."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec_lib.decoding import (
    AutoregressiveDecoder,
    SpeculativeDecoder,
)
from specdec_lib.drafters.dynamic import DynamicK
from specdec_lib.drafters.feature import FeatureDrafter
from specdec_lib.drafters.heads import LayerDraft
from specdec_lib.research.stats import chisquare_gof, exact_continuation_law
from specdec_lib.sampling import Warp

PROMPT = torch.tensor([0, 5, 9, 3, 17, 4])


@pytest.mark.parametrize("K", [1, 3])
def test_feature_drafter_greedy_equals_autoregressive(tiny_pair, random_head, K):
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    spec = SpeculativeDecoder(FeatureDrafter(random_head), tiny_pair.target, K=K, temperature=0)
    for prompt in (PROMPT, torch.tensor([0, 2, 2, 2]), torch.tensor([0])):
        ref = ar.generate_ids(prompt, 30).tokens
        out = spec.generate_ids(prompt, 30)
        assert out.tokens == ref
        assert out.steps[0].draft_tokens == []  # no target features before the first pass
        assert all(len(s.draft_tokens) >= 1 for s in out.steps[1:-1])


def test_feature_drafter_cache_matches_no_cache(tiny_pair, random_head):
    a = SpeculativeDecoder(FeatureDrafter(random_head), tiny_pair.target, K=3, seed=5)
    b = SpeculativeDecoder(
        FeatureDrafter(random_head), tiny_pair.target, K=3, seed=5, use_cache=False
    )
    ra, rb = a.generate_ids(PROMPT, 25), b.generate_ids(PROMPT, 25)
    assert ra.tokens == rb.tokens
    assert [s.draft_tokens for s in ra.steps] == [s.draft_tokens for s in rb.steps]


@pytest.mark.parametrize(
    "shape",
    [dict(width=2), dict(width=3), dict(tree=(2, 2)), dict(tree=(1, 3))],
    ids=["w2", "w3", "tree2-2", "tree1-3"],
)
def test_feature_drafter_with_alternatives(tiny_pair, random_head, shape):
    """An accepted alternative, at the first position or at any depth of a tree (keep moves it
    into place), hands the kept positions' target features to the head: the cached and the re-encoding
    decoders agree step by step, and greedy output (ranked by the draft's scores) equals the
    target's."""
    kw = dict(K=2, temperature=1.0, **shape)
    a = SpeculativeDecoder(FeatureDrafter(random_head), tiny_pair.target, **kw)
    b = SpeculativeDecoder(FeatureDrafter(random_head), tiny_pair.target, use_cache=False, **kw)
    branches = []
    for seed in (6, 7, 8):
        ra, rb = a.generate_ids(PROMPT, 40, seed=seed), b.generate_ids(PROMPT, 40, seed=seed)
        assert ra.tokens == rb.tokens
        assert [s.draft_tokens for s in ra.steps] == [s.draft_tokens for s in rb.steps]
        assert [s.branch for s in ra.steps] == [s.branch for s in rb.steps]
        branches += [s.branch for s in ra.steps]
    assert any(b >= 1 for b in branches)
    g = SpeculativeDecoder(
        FeatureDrafter(random_head), tiny_pair.target, K=2, temperature=0, **shape
    )
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    for prompt in (PROMPT, torch.tensor([0, 2, 2, 2])):
        assert g.generate_ids(prompt, 30).tokens == ar.generate_ids(prompt, 30).tokens


@pytest.mark.parametrize("shape", [dict(), dict(tree=(2, 2))], ids=["chain", "tree2-2"])
def test_feature_drafter_confidence_stop_in_greedy_decoding(tiny_pair, random_head, shape):
    """In greedy decoding the head's confidence stop reads its softmax on the subset (its warped
    law is one-hot): it cuts drafts short, and the output is still the target's."""
    K = 4
    dk = DynamicK(FeatureDrafter(random_head), schedule="constant", initial=K, threshold=0.5)
    spec = SpeculativeDecoder(dk, tiny_pair.target, K=K, temperature=0, **shape)
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    short = 0
    for prompt in (PROMPT, torch.tensor([0, 2, 2, 2])):
        out = spec.generate_ids(prompt, 30)
        assert out.tokens == ar.generate_ids(prompt, 30).tokens
        short += sum(0 < len(s.draft_tokens) < K for s in out.steps[:-K])
    assert short > 0


@pytest.mark.parametrize("kind", ["feature", "feature-tree", "feature-tree-sharp", "layers"])
def test_trained_draft_kinds_law_matches_target(tiny_pair, random_head, kind):
    """The first 2 tokens of 4 follow the target's law (for the feature head, step 1 has no drafts
    and step 2 drafts 2), with q = 0 outside the draft's token subset; also with a tree, whose
    alternatives are drawn from that q without replacement, and with the drafts drawn at half the
    target's temperature (sharp)."""

    torch.manual_seed(2)
    draft = (
        FeatureDrafter(random_head)
        if kind.startswith("feature")
        else LayerDraft(tiny_pair.target, torch.arange(4, 30), init_layers=(0,))
    )
    tree = (3, 2) if kind.startswith("feature-tree") else None
    scale = 0.5 if kind.endswith("sharp") else 1.0
    dec = SpeculativeDecoder(
        draft, tiny_pair.target, K=2, seed=3, top_p=0.95, tree=tree, draft_temperature_scale=scale
    )
    law = exact_continuation_law(tiny_pair.target, PROMPT, dec.warp, 2)
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    for _ in range(1600):
        r = dec.generate_ids(PROMPT, 4)
        counts[index[tuple(r.tokens[:2])]] += 1
    res = chisquare_gof(probs=np.array([law[k] for k in keys]), counts=counts, max_bins=60)
    assert res.pvalue > 1e-3, res


@pytest.mark.parametrize(
    "warp_kw",
    [
        {"temperature": 1.0},
        {"temperature": 0.7, "top_p": 0.8},
        {"temperature": 1.3, "top_k": 5},
        {"temperature": 0},
    ],
)
def test_feature_drafter_subset_warp_equals_full_warp(random_head, warp_kw):
    from specdec_lib.sampling import sample

    warp = Warp(**warp_kw)
    S = random_head.subset
    # q on the subset (the drafter names it as its support), and with the subset hidden, q over
    # the whole vocabulary
    hidden = type("Hidden", (FeatureDrafter,), {"support": None})(random_head)
    for drafter in (FeatureDrafter(random_head), hidden):
        for i in range(3):
            h = torch.randn(1, random_head.fc.out_features)
            x, got, sub, at = drafter._draw(h, warp, torch.Generator().manual_seed(i), first=True)
            logits = random_head.logits(h)
            full = logits.new_full((1, random_head.target.config.vocab_size), float("-inf"))
            full[:, S] = logits
            want = warp.probs(full)[0]
            assert want.index_fill(0, S, 0).sum() == 0  # q is 0 off the subset
            on = drafter.support is not None
            torch.testing.assert_close(got, want[S] if on else want, atol=1e-7, rtol=1e-6)
            torch.testing.assert_close(sub, want[S], atol=1e-7, rtol=1e-6)
            assert int(x) == int(S[at]) and float(sub[at]) > 0
            # Drawing within the subset is drawing from the full row: the same token, same stream.
            assert int(x) == int(sample(want, torch.Generator().manual_seed(i)))
            torch.testing.assert_close(drafter.draft_scores[0], full[0, S] if on else full[0])
