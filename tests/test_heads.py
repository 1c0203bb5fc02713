"""The trained heads (``specdec_lib.drafters.heads``): only their own weights are saved, fused features are read, and the direct layer calls equal the Llama wrapper."""

from __future__ import annotations

import pytest
import torch

from specdec_lib.decoding import (
    AutoregressiveDecoder,
    SpeculativeDecoder,
)
from specdec_lib.drafters.feature import FeatureDrafter
from specdec_lib.drafters.heads import FeatureHead, load_head, save_head

PROMPT = torch.tensor([0, 5, 9, 3, 17, 4])


def test_feature_head_saves_only_its_own_weights(tmp_path, tiny_pair, random_head):

    names = set(random_head.state_dict())
    assert "subset" in names and not any("embed" in n or "lm_head" in n for n in names)
    path = tmp_path / "head.safetensors"
    save_head(random_head, path, {"note": "test"})
    loaded = load_head(path, tiny_pair.target)
    for k, v in random_head.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v)


def test_multi_layer_head_is_exact_and_reads_fused_features(tiny_pair):
    torch.manual_seed(1)
    head = FeatureHead(tiny_pair.target, torch.arange(32), feature_layers=(0, -1))
    with torch.no_grad():
        head.fuse.weight.normal_(0, 0.2)  # really mix the two layers
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    spec = SpeculativeDecoder(FeatureDrafter(head), tiny_pair.target, K=3, temperature=0)
    assert spec.generate_ids(PROMPT, 25).tokens == ar.generate_ids(PROMPT, 25).tokens
    a = SpeculativeDecoder(FeatureDrafter(head), tiny_pair.target, K=2, seed=9)
    b = SpeculativeDecoder(FeatureDrafter(head), tiny_pair.target, K=2, seed=9, use_cache=False)
    ra, rb = a.generate_ids(PROMPT, 20), b.generate_ids(PROMPT, 20)
    assert ra.tokens == rb.tokens and ra.n_accepted == rb.n_accepted


@pytest.mark.parametrize("n_layers", [1, 2])
def test_head_direct_layers_equal_llama_wrapper(tiny_pair, n_layers):
    """The head's cached path calls its layers directly; it must equal LlamaModel's forward."""
    from transformers import DynamicCache

    torch.manual_seed(1)
    head = FeatureHead(tiny_pair.target, torch.arange(2, 26), n_layers=n_layers, init_layer=None)
    H = tiny_pair.target.config.hidden_size
    feats, toks = torch.randn(1, 9, H), torch.randint(0, 32, (1, 9))
    ref = head(feats, toks)[0]  # no cache: the whole sequence through the wrapper
    cache = DynamicCache()
    parts = []
    for a, b in [(0, 4), (4, 5), (5, 8), (8, 9)]:  # prefill, one position, three, one
        h, cache = head(feats[:, a:b], toks[:, a:b], cache=cache)
        parts.append(h)
    torch.testing.assert_close(torch.cat(parts, 1), ref, rtol=1e-5, atol=1e-5)
    # The wrapper with a cache (what the head called before) agrees too.
    c2 = DynamicCache()
    g = head.fc(torch.randn(1, 3, 2 * H))
    head.body(inputs_embeds=g[:, :2], cache=c2, use_cache=True)
    via_wrapper = head.body(inputs_embeds=g[:, 2:], cache=c2, use_cache=True).last_hidden_state
    c3 = DynamicCache()
    head._layers_with_cache(g[:, :2], c3, None)
    torch.testing.assert_close(head._layers_with_cache(g[:, 2:], c3, None), via_wrapper)
