"""The trained heads (``specdec_lib.drafters.heads``): only their own weights are saved, fused
features are read, the direct layer calls equal the Llama wrapper, and every decoder layer runs
with its KV cache (a layer handed its cache under a name it does not know runs without one,
silently, unless something checks)."""

from __future__ import annotations

import pytest
import torch

from specdec_lib import lm
from specdec_lib.decoding import (
    AutoregressiveDecoder,
    SpeculativeDecoder,
)
from specdec_lib.drafters.feature import FeatureDrafter
from specdec_lib.drafters.heads import FeatureHead, LayerDraft, load_head, save_head
from specdec_lib.lm import cache_kwargs, model_forward

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
        assert cache.get_seq_length() == b  # every layer's keys and values kept
        parts.append(h)
    torch.testing.assert_close(torch.cat(parts, 1), ref, rtol=1e-5, atol=1e-5)
    # The wrapper with a cache (what the head called before) agrees too.
    c2 = DynamicCache()
    g = head.fc(torch.randn(1, 3, 2 * H))
    head.body(inputs_embeds=g[:, :2], use_cache=True, **cache_kwargs(c2))
    via_wrapper = head.body(inputs_embeds=g[:, 2:], use_cache=True, **cache_kwargs(c2))
    assert c2.get_seq_length() == 3  # the wrapper, too, was handed its cache
    via_wrapper = via_wrapper.last_hidden_state
    c3 = DynamicCache()
    head._layers_with_cache(g[:, :2], c3, None)
    torch.testing.assert_close(head._layers_with_cache(g[:, 2:], c3, None), via_wrapper)


# Names under which no transformers release takes a decoder layer's cache: a layer absorbs them
# into **kwargs and runs without a cache. On a release that calls the cache ``past_key_values``,
# ``cache`` is absorbed the same way (the bug these tests guard against).
WRONG_KW = ["kv_cache"] + (["cache"] if lm.CACHE_KW == "past_key_values" else [])


def _incremental(head, feats, toks):
    from transformers import DynamicCache

    cache, parts = DynamicCache(), []
    for i in range(feats.shape[1]):  # one position at a time, as drafting runs the head
        h, cache = head(feats[:, i : i + 1], toks[:, i : i + 1], cache=cache)
        assert cache.get_seq_length() == i + 1
        parts.append(h)
    return torch.cat(parts, 1)


def test_head_one_position_at_a_time_equals_the_full_pass(tiny_pair):
    torch.manual_seed(2)
    head = FeatureHead(tiny_pair.target, torch.arange(2, 26), n_layers=2, init_layer=None)
    H = tiny_pair.target.config.hidden_size
    feats, toks = torch.randn(1, 7, H), torch.randint(0, 32, (1, 7))
    torch.testing.assert_close(_incremental(head, feats, toks), head(feats, toks)[0])


def test_head_layers_whose_cache_is_not_written_are_caught(tiny_pair):
    """The must-fail arm: a cache that hands back the new keys and values without keeping them
    (a cache API that moved). Without the head's own check the next position would attend to
    nothing before it, with no error."""
    from transformers import DynamicCache

    class Forgetful(DynamicCache):
        def update(self, key, value, layer_idx, *args, **kwargs):
            return key, value

    torch.manual_seed(2)
    head = FeatureHead(tiny_pair.target, torch.arange(2, 26), init_layer=None)
    H = tiny_pair.target.config.hidden_size
    feats, toks = torch.randn(1, 3, H), torch.randint(0, 32, (1, 3))
    with pytest.raises(RuntimeError, match="did not write their KV cache"):
        head(feats[:, :1], toks[:, :1], cache=Forgetful())


def test_head_layers_equal_transformers_layers_bit_for_bit(tiny_pair):
    """The head's layers as it computes them over the cache equal transformers' decoder layers
    called with the same cache, mask and positions, bit for bit, over several positions and then
    one."""
    from transformers import DynamicCache

    torch.manual_seed(4)
    head = FeatureHead(tiny_pair.target, torch.arange(2, 26), n_layers=2, init_layer=None)
    H = tiny_pair.target.config.hidden_size

    def by_transformers(g, cache, position_ids, mask):
        n, past = g.shape[1], cache.get_seq_length()
        if mask is None and n > 1:
            keys = torch.arange(past + n)
            allowed = keys.view(1, -1) <= keys[past:].view(-1, 1)
            mask = torch.zeros(allowed.shape).masked_fill_(~allowed, float("-inf"))
            mask = mask.view(1, 1, n, past + n)
        pe = head.body.rotary_emb(g, position_ids=position_ids)
        for layer in head.body.layers:
            g = layer(
                g,
                attention_mask=mask,
                position_ids=position_ids,
                use_cache=True,
                position_embeddings=pe,
                **lm.cache_kwargs(cache),
            )
        return g

    ours, theirs = DynamicCache(), DynamicCache()
    for start, n in ((0, 4), (4, 1), (5, 1), (6, 3)):
        g = torch.randn(1, n, H)
        pos = torch.arange(start, start + n).unsqueeze(0)
        with torch.no_grad():
            a = head._layers_with_cache(g, ours, pos)
            b = by_transformers(g, theirs, pos, None)
        assert torch.equal(a, b), (start, n)
    assert ours.get_seq_length() == theirs.get_seq_length() == 9


def test_layer_draft_one_token_at_a_time_equals_the_full_pass(tiny_pair):
    """LayerDraft driven as ModelDrafter drives it (lm.model_forward: the cache under the installed
    release's name), one token at a time, equals one pass over the sequence."""
    torch.manual_seed(3)
    draft = LayerDraft(tiny_pair.target, torch.arange(4, 30), init_layers=None, n_layers=2)
    ids = torch.tensor([0, 5, 9, 3, 17, 4])
    full, _ = model_forward(draft, ids, None, ids.numel())
    cache, rows = None, []
    for i in range(ids.numel()):
        row, cache = model_forward(draft, ids[i : i + 1], cache, 1)
        assert cache.get_seq_length() == i + 1
        rows.append(row)
    torch.testing.assert_close(torch.cat(rows), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("wrong", WRONG_KW)
def test_layer_draft_body_without_its_cache_differs(tiny_pair, wrong):
    """Why the draft's Llama body must get its cache under the right name: under any other it
    keeps nothing, raises nothing, and the next token's features part from the full pass's."""
    from transformers import DynamicCache

    torch.manual_seed(3)
    draft = LayerDraft(tiny_pair.target, torch.arange(4, 30), init_layers=None, n_layers=2)
    x = draft._embed(torch.tensor([[0, 5, 9, 3]]))
    full = draft.body(inputs_embeds=x).last_hidden_state[0, -1]
    right, lost = DynamicCache(), DynamicCache()
    draft.body(inputs_embeds=x[:, :3], use_cache=True, **cache_kwargs(right))
    draft.body(inputs_embeds=x[:, :3], use_cache=True, **{wrong: lost})
    assert right.get_seq_length() == 3 and lost.get_seq_length() == 0
    with_cache = draft.body(inputs_embeds=x[:, 3:], use_cache=True, **cache_kwargs(right))
    without = draft.body(inputs_embeds=x[:, 3:], use_cache=True, **{wrong: lost})
    torch.testing.assert_close(with_cache.last_hidden_state[0, -1], full, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(without.last_hidden_state[0, -1], full, atol=1e-3)


@pytest.mark.parametrize("wrong", WRONG_KW)
def test_layer_draft_with_the_wrong_cache_name_is_caught(tiny_pair, monkeypatch, wrong):
    """LayerDraft's cache under a name the installed release does not use fails loudly: a name
    LayerDraft does not know is refused (TypeError), and a name its Llama body does not know
    leaves an output without a cache under that name (AttributeError)."""
    draft = LayerDraft(tiny_pair.target, torch.arange(4, 30), init_layers=(0,))
    monkeypatch.setattr(lm, "CACHE_KW", wrong)
    with pytest.raises((TypeError, AttributeError), match=wrong):
        model_forward(draft, torch.tensor([0, 5, 9]), None, 1)


def test_layer_draft_takes_the_cache_under_either_name_not_both(tiny_pair):
    from transformers import DynamicCache

    draft = LayerDraft(tiny_pair.target, torch.arange(4, 30), init_layers=(0,))
    ids = torch.tensor([[0, 5, 9]])
    for name in ("cache", "past_key_values"):
        c = DynamicCache()
        out = draft(input_ids=ids, use_cache=True, **{name: c})
        assert c.get_seq_length() == 3 and lm.output_cache(out) is c and out.cache is c
    with pytest.raises(ValueError, match="not both"):
        draft(input_ids=ids, cache=DynamicCache(), past_key_values=DynamicCache())
    with pytest.raises(TypeError):
        draft(input_ids=ids, kv_cache=DynamicCache())  # an unknown name is an error, not dropped


def test_a_head_in_bfloat16_drafts_over_a_float32_target(tiny_pair, random_head, tmp_path):
    """The trained head loaded in bfloat16 over a float32 target: its frozen pieces in its own
    dtype, its q close to the float32 head's, and greedy speculative decoding still the
    target's."""
    from specdec_lib.decoding import AutoregressiveDecoder, SpeculativeDecoder

    path = tmp_path / "head.safetensors"
    save_head(random_head, path, {})
    f32 = load_head(path, tiny_pair.target)
    bf16 = load_head(path, tiny_pair.target, torch.bfloat16)
    assert next(f32.parameters()).dtype == torch.float32
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    assert bf16._w_subset.dtype == bf16._norm.weight.dtype == torch.bfloat16
    assert tiny_pair.target.model.norm.weight.dtype == torch.float32  # the target's own untouched
    prompt = torch.tensor([0, 5, 9, 3, 17, 4])
    with torch.inference_mode():
        H = random_head.fc.out_features
        feats = torch.randn(1, 3, len(random_head.feature_layers) * H)
        toks = torch.tensor([[3, 4, 5]])
        h32, h16 = f32(feats, toks)[0], bf16(feats, toks)[0]
        assert h16.dtype == torch.bfloat16
        q32 = torch.softmax(f32.logits(h32).float(), -1)
        q16 = torch.softmax(bf16.logits(h16).float(), -1)
        assert float(0.5 * (q32 - q16).abs().sum(-1).max()) < 0.05
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0).generate_ids(prompt, 16)
    for tree in ((1,), (3, 2)):
        sd = SpeculativeDecoder(
            FeatureDrafter(bf16), tiny_pair.target, K=2, tree=tree, temperature=0
        )
        assert sd.generate_ids(prompt, 16).tokens == ar.tokens
