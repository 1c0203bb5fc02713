"""The pieces of a causal LM the decoders touch (``specdec_lib.lm``), on the tiny random pair."""

import pytest
import torch

from specdec_lib.lm import (
    capture_features,
    context_length,
    final_norm,
    model_device,
    model_forward,
    synchronize,
    vocab_size,
)
from specdec_lib.research.speed.kernels import unavailable as library_unavailable


def test_model_forward_keeps_the_last_logits_and_extends_the_cache(tiny_pair):
    ids = torch.tensor([0, 5, 9, 3])
    logits, cache = model_forward(tiny_pair.target, ids[:3], None, 2)
    assert logits.shape == (2, 32) and cache.get_seq_length() == 3
    step, cache = model_forward(tiny_pair.target, ids[3:], cache, 1)
    full, _ = model_forward(tiny_pair.target, ids, None, 1)
    torch.testing.assert_close(step, full, atol=1e-5, rtol=1e-5)


def test_capture_features_concatenates_the_layers(tiny_pair):
    with capture_features(tiny_pair.target, (0, -1)) as got:
        tiny_pair.target(input_ids=torch.tensor([[0, 5, 9]]))
    assert len(got) == 1 and got[0].shape == (1, 3, 2 * 32)
    with pytest.raises(ValueError, match="feature layers"):
        capture_features(tiny_pair.target, (5,))


def test_facts_the_decoders_check(tiny_pair):
    t = tiny_pair.target
    assert vocab_size(t) == 32 and context_length(t) == 512
    assert model_device(t) == torch.device("cpu") and model_device(object()) is None
    assert isinstance(final_norm(t), torch.nn.Module)
    synchronize(torch.device("cpu"))  # a no-op on a CPU


def test_last_rows_index_the_positions_kept(tiny_pair):
    """An index tensor (a densely strided copy, the fast bfloat16 kernel on a CPU) gives the same
    logits as transformers' own slice."""
    from specdec_lib.lm import last_rows, model_forward

    assert last_rows(3, 3) == 3
    assert last_rows(2, 5).tolist() == [3, 4]
    ids = torch.tensor([0, 5, 9, 3, 17, 4])
    with torch.inference_mode():
        got, _ = model_forward(tiny_pair.target, ids, None, 2)
        ref = tiny_pair.target(input_ids=ids.view(1, -1)).logits[0, -2:]
    torch.testing.assert_close(got, ref)


def test_packed_linears_compute_what_the_plain_ones_do():
    from specdec_lib.lm import PackedLinear, pack_linears
    from specdec_lib.tiny import tiny_random_llama

    plain, packed = tiny_random_llama(0), tiny_random_llama(0)
    n = pack_linears(packed)
    assert n == sum(type(m) is torch.nn.Linear for m in plain.modules()) > 0
    assert isinstance(packed.lm_head, PackedLinear) and pack_linears(packed) == 0  # once only
    ids = torch.arange(20).view(1, -1) % 11
    with torch.inference_mode():
        # oneDNN's packed float32 product, for any row count: to float32 rounding (no product
        # in a reduced precision behind float32's name)
        for rows in (1, 2, 3, 6, 16, 20):
            torch.testing.assert_close(
                packed(ids[:, :rows]).logits, plain(ids[:, :rows]).logits, rtol=1e-5, atol=1e-5
            )
    plain, packed = plain.to(torch.bfloat16), tiny_random_llama(0).to(torch.bfloat16)
    if pack_linears(packed):  # oneDNN's packed bfloat16 product, where this CPU has it
        with torch.inference_mode():
            for rows in (1, 6):
                torch.testing.assert_close(
                    packed(ids[:, :rows]).logits.float(), plain(ids[:, :rows]).logits.float()
                )


@pytest.mark.parametrize(
    "pack, dtype",
    [
        (True, "float32"),  # oneDNN's product
        pytest.param(
            "library",
            "bfloat16",
            marks=pytest.mark.skipif(
                library_unavailable() is not None,
                reason="the library's product does not run here",
            ),
        ),
    ],
)
def test_a_packed_pair_decodes_greedily_as_its_own_autoregressive_baseline(pack, dtype):
    from specdec_lib.decoding import AutoregressiveDecoder, SpeculativeDecoder
    from specdec_lib.models import load_pair

    pair = load_pair("tiny-random", dtype=dtype, pack=pack)
    assert pair.notes["packed"] and pair.notes["pack"] == ("on" if pack is True else pack)
    ids = torch.tensor([0, 5, 9, 3])
    ar = AutoregressiveDecoder(pair.target, temperature=0).generate_ids(ids, 12)
    for tree in ((1,), (3, 2)):
        spec = SpeculativeDecoder(pair.draft, pair.target, K=3, tree=tree, temperature=0)
        assert spec.generate_ids(ids, 12).tokens == ar.tokens
    with pytest.raises(ValueError, match="pack"):
        load_pair("tiny-random", pack=True, device="meta")


def test_decode_attention_computes_what_sdpa_does(monkeypatch):
    """Few queries over a cache, each group of query heads against its key-value head: sdpa's
    result (float32, to rounding) with no mask, a tree's boolean mask and an additive mask; a
    long or unmasked causal query, or a module in training, is sdpa's own call."""
    from types import SimpleNamespace

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from specdec_lib.research.speed import attention as lm
    from specdec_lib.research.speed.attention import decode_attention

    every = dict.fromkeys((torch.float32, torch.bfloat16), range(1, 17))
    monkeypatch.setattr(lm, "DECODE_QUERIES", every)  # the products for every case below
    gen = torch.Generator().manual_seed(0)
    module = SimpleNamespace(num_key_value_groups=3, is_causal=True, training=False)

    def qkv(n, m, dtype=torch.float32):
        q = torch.randn(1, 6, n, 8, generator=gen).to(dtype)
        k, v = (torch.randn(1, 2, m, 8, generator=gen).to(dtype) for _ in range(2))
        return q, k, v

    tree = torch.rand(1, 1, 5, 12, generator=gen) < 0.7
    tree[..., -5:] = torch.eye(5, dtype=torch.bool)  # each node sees itself
    additive = torch.zeros(1, 1, 3, 9).masked_fill_(
        torch.rand(1, 1, 3, 9, generator=gen) < 0.3, float("-inf")
    )
    additive[..., -3:] = 0.0
    for n, m, mask in ((1, 7, None), (5, 12, tree), (3, 9, additive)):
        q, k, v = qkv(n, m)
        got, _ = decode_attention(module, q, k, v, mask, scaling=0.3)
        ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.3)
        assert got.shape == ref.shape == (1, n, 6, 8)
        torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-5)
    # a left-padded batch: a padding query that sees no key stays finite, the others as sdpa's
    q, k, v = (torch.cat([t, t.flip(-1)]) for t in qkv(3, 6))
    pad = torch.ones(2, 1, 3, 6, dtype=torch.bool)
    pad[0, 0, 0] = False
    got, _ = decode_attention(module, q, k, v, pad, scaling=0.3)
    ref, _ = sdpa_attention_forward(module, q, k, v, pad, scaling=0.3)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got[0, 1:], ref[0, 1:], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got[1], ref[1], atol=1e-6, rtol=1e-5)
    q, k, v = qkv(5, 12, torch.bfloat16)
    got, _ = decode_attention(module, q, k, v, tree, scaling=0.3)
    ref, _ = sdpa_attention_forward(module, q, k, v, tree, scaling=0.3)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), ref.float(), atol=2e-2, rtol=2e-2)
    monkeypatch.setattr(lm, "DECODE_QUERIES", {})  # one query in every dtype
    for n, mask, training in ((2, tree[..., :2, -2:], False), (4, None, False), (1, None, True)):
        module.training = training
        q, k, v = qkv(n, n)
        got, _ = decode_attention(module, q, k, v, mask, scaling=0.3)
        ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.3)
        assert torch.equal(got, ref)


def test_decode_attention_takes_the_passes_its_dtype_names():
    """As loaded: in float32 a tree's masked pass over several tokens is the products' (what
    sdpa gives, to rounding) and one query is sdpa's own call; in bfloat16 the reverse."""
    from types import SimpleNamespace

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from specdec_lib.research.speed.attention import decode_attention, decode_queries

    assert list(decode_queries(torch.float32)) == list(range(2, 17))
    assert list(decode_queries(torch.bfloat16)) == [1]
    gen = torch.Generator().manual_seed(1)
    module = SimpleNamespace(num_key_value_groups=3, is_causal=True, training=False)
    tree = torch.ones(1, 1, 5, 12, dtype=torch.bool).tril(7)
    for dtype in (torch.float32, torch.bfloat16):
        for n, mask in ((5, tree), (1, None)):
            q = torch.randn(1, 6, n, 8, generator=gen).to(dtype)
            k, v = (torch.randn(1, 2, 12, 8, generator=gen).to(dtype) for _ in range(2))
            got, _ = decode_attention(module, q, k, v, mask, scaling=0.3)
            ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.3)
            if (n > 1) == (dtype == torch.float32):  # the products, not sdpa's kernel
                assert not torch.equal(got, ref)
                torch.testing.assert_close(got.float(), ref.float(), atol=2e-2, rtol=2e-2)
            else:
                assert torch.equal(got, ref)


def test_pairs_on_a_cpu_decode_with_decode_attention():
    from specdec_lib.models import load_pair
    from specdec_lib.research.speed.attention import DECODE_ATTENTION

    pair = load_pair("tiny-random")
    assert pair.notes["attention"] == DECODE_ATTENTION
    assert pair.target.config._attn_implementation == DECODE_ATTENTION
    assert pair.notes["decode_queries"] == [2, 16]  # float32: the passes of a step, not one token


def test_without_a_registered_attention_pairs_run_transformers_own(monkeypatch):
    from specdec_lib import lm
    from specdec_lib.models import load_pair

    monkeypatch.setattr(lm, "_ATTENTION", None)
    pair = load_pair("tiny-random")
    assert "attention" not in pair.notes
    assert pair.target.config._attn_implementation == "sdpa"


def test_a_buffer_cache_holds_what_a_dynamic_cache_holds(tiny_pair, monkeypatch):
    """Passes, crops and growth past the buffers' capacity: the same keys, values and logits as
    transformers' concatenating cache; writes into the views land in the cache."""
    from transformers import DynamicCache

    from specdec_lib.research.speed.cache import BufferCache, BufferLayer

    monkeypatch.setattr(BufferLayer, "MIN_CAPACITY", 4)
    gen = torch.Generator().manual_seed(0)
    caches = {"buffer": BufferCache(), "dynamic": DynamicCache()}
    for n_new, n_crop in [(3, 0), (2, 1), (5, 3), (1, 0), (9, 2), (1, 0)]:
        ids = torch.randint(0, 32, (n_new,), generator=gen)
        got = {}
        for name, cache in caches.items():
            logits, out = model_forward(tiny_pair.target, ids, cache, n_new)
            assert out is cache
            got[name] = logits
            if n_crop:
                cache.crop(-n_crop)
        torch.testing.assert_close(got["buffer"], got["dynamic"], atol=0, rtol=0)
        assert caches["buffer"].get_seq_length() == caches["dynamic"].get_seq_length()
        for b, d in zip(caches["buffer"].layers, caches["dynamic"].layers, strict=True):
            torch.testing.assert_close(b.keys, d.keys, atol=0, rtol=0)
            torch.testing.assert_close(b.values, d.values, atol=0, rtol=0)
    layer = caches["buffer"].layers[0]
    assert layer._k.shape[-2] > layer.get_seq_length()  # room to spare, grown past 4
    layer.keys[..., 0:1, :] = 7.0
    assert (layer._k[..., 0, :] == 7.0).all()
    with pytest.raises(ValueError, match="tokens_to_remove"):
        layer.crop(1)
    caches["buffer"].batch_repeat_interleave(2)  # a tensor assigned becomes the buffer
    assert layer.keys.shape[0] == 2 and layer.get_seq_length() == layer.keys.shape[-2]
    caches["buffer"].reset()
    assert layer.get_seq_length() == 0 and layer.keys is None


def test_decoders_run_with_either_cache(tiny_pair, monkeypatch):
    from specdec_lib import lm
    from specdec_lib.decoding import AutoregressiveDecoder, SpeculativeDecoder
    from specdec_lib.research.speed.cache import BufferCache

    assert isinstance(lm.new_cache(), BufferCache)  # the speed wing registers it on import
    ids = torch.tensor([0, 5, 9, 3])
    got = {}
    for buffered in (True, False):
        monkeypatch.setattr(lm, "_CACHE", BufferCache if buffered else None)
        ar = AutoregressiveDecoder(tiny_pair.target, temperature=1.0).generate_ids(ids, 20, seed=1)
        spec = SpeculativeDecoder(
            tiny_pair.draft, tiny_pair.target, K=3, tree=(3, 2), temperature=1.0
        ).generate_ids(ids, 20, seed=1)
        got[buffered] = (ar.tokens, spec.tokens)
    assert got[True] == got[False]
