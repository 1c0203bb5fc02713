"""Distillation (``specdec_lib.training.distill``): a head learns and loads, training resumes after a kill, bad settings, and layer drafts."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from conftest import train_settings

from specdec_lib.decoding import (
    AutoregressiveDecoder,
    SpeculativeDecoder,
)
from specdec_lib.drafters.feature import FeatureDrafter
from specdec_lib.drafters.heads import LayerDraft, load_head
from specdec_lib.training import distill as distill_mod
from specdec_lib.training.distill import TrainSettings, train_drafter

PROMPT = torch.tensor([0, 5, 9, 3, 17, 4])


def test_train_drafter_learns_and_loads(tiny_data, tiny_pair):
    s = train_settings(tiny_data)
    rec = train_drafter(s, progress=False, pair=tiny_pair, log=lambda *_: None)
    hist = rec["history"]
    assert hist[-1]["step"] > hist[0]["step"]
    assert hist[-1]["eval_alpha"] > hist[0]["eval_alpha"]  # it learned something held out
    head = load_head(s.out, tiny_pair.target)
    assert len(head.subset) == 24
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    spec = SpeculativeDecoder(FeatureDrafter(head), tiny_pair.target, K=2, temperature=0)
    assert spec.generate_ids(PROMPT, 20).tokens == ar.generate_ids(PROMPT, 20).tokens
    card = json.loads(open(tiny_data / "head.train.json").read())
    assert card["provenance"]["settings"]["top"] == 8
    # the shards by number, not "the last N of the folder" (which changes as data is added)
    assert card["heldout_shards"] == [card["train_shards"][-1] + 1]
    assert card["train_shards"] == list(range(len(card["train_shards"])))


def test_training_resumes_after_a_kill(tiny_data, tiny_pair, monkeypatch):
    full = train_settings(tiny_data, out=str(tiny_data / "full.safetensors"))
    train_drafter(full, progress=False, pair=tiny_pair, log=lambda *_: None)
    killed = train_settings(tiny_data, out=str(tiny_data / "killed.safetensors"))
    real_save = distill_mod._atomic_torch_save
    calls = {"n": 0}

    def save_then_die(obj, path):
        real_save(obj, path)
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(distill_mod, "_atomic_torch_save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_drafter(killed, progress=False, pair=tiny_pair, log=lambda *_: None)
    monkeypatch.setattr(distill_mod, "_atomic_torch_save", real_save)
    logs = []
    rec = train_drafter(killed, progress=False, pair=tiny_pair, log=logs.append)
    assert any("resumed at step 10" in line for line in logs)
    # the resumed run carries the seconds of training on and numbers itself
    rows = [row for row in rec["history"] if row["step"]]
    runs = [row["run"] for row in rows]
    assert runs[0] == 1 and runs[-1] == 2 and runs == sorted(runs)
    assert all(a["seconds"] <= b["seconds"] for a, b in itertools.pairwise(rows))
    a = load_head(full.out, tiny_pair.target).state_dict()
    b = load_head(killed.out, tiny_pair.target).state_dict()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"top": 0}, "top"),
        ({"epochs": 0}, "epochs"),
        ({"lr": -1.0}, "lr"),
        ({"batch_sequences": 1.5}, "batch_sequences"),
        ({"eval_shards": -1}, "eval_shards"),
        ({"teacher_layers": (2, 14)}, "teacher_layers"),
        ({"feature_layers": (5,)}, "feature_layers"),
    ],
)
def test_train_settings_bad_arguments(kw, name):
    with pytest.raises(ValueError, match=name):
        TrainSettings(**kw)


@pytest.mark.parametrize("init_layers", [(0, -1), None])
def test_train_layers_draft(tiny_data, tiny_pair, init_layers):

    name = "layers_" + ("copied" if init_layers else "random")
    s = train_settings(
        tiny_data,
        out=str(tiny_data / f"{name}.safetensors"),
        arch="layers",
        init_layers=init_layers,
        n_layers=2,
    )
    rec = train_drafter(s, progress=False, pair=tiny_pair, log=lambda *_: None)
    assert rec["history"][-1]["eval_alpha"] > rec["history"][0]["eval_alpha"] - 0.05
    draft = load_head(s.out, tiny_pair.target)
    assert isinstance(draft, LayerDraft) and len(draft.body.layers) == 2
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    spec = SpeculativeDecoder(draft, tiny_pair.target, K=3, temperature=0)
    out = spec.generate_ids(PROMPT, 20)
    assert out.tokens == ar.generate_ids(PROMPT, 20).tokens and out.n_proposed > 0


def test_unrolled_mask_is_causal_at_step_one_and_drafting_after():
    m = distill_mod.unrolled_mask(5, 1)[0, 0]
    assert torch.equal(m == 0, torch.ones(5, 5).tril().bool())
    m = distill_mod.unrolled_mask(5, 3)[0, 0] == 0  # keys: step 1 | step 2 | step 3
    # position 4 drafts its third token from known positions 0..2: it sees step-1 keys 0..2,
    # its step-2 key at 3 and itself
    assert m[4].nonzero().flatten().tolist() == [0, 1, 2, 5 + 3, 10 + 4]
    assert (m.sum(1) >= 1).all()  # no row without a key


@torch.no_grad()
def test_unrolled_steps_equal_drafting(random_head, tiny_pair):
    """What the training-time test trains is what drafting computes: step d at position r is the
    head drafting d tokens from positions up to r - d + 1 (the drafted tokens being the true
    ones), its own features fed back through its cache."""
    from transformers import DynamicCache

    head, target = random_head, tiny_pair.target
    ids = torch.tensor([[0, 5, 9, 3, 17, 4, 8, 11, 2, 6]])
    with distill_mod.capture_features(target, head.feature_layers) as captured:
        target(input_ids=ids)
    feats = captured[-1][:, :-1]  # row r: h_r, read with the token x_{r+1}
    toks = ids[:, 1:]
    n = toks.shape[1]
    pos = torch.arange(1, n + 1).unsqueeze(0)
    hs = distill_mod.unrolled_hidden(head, feats, toks, pos, 3)
    torch.testing.assert_close(hs[0], head(feats, toks, position_ids=pos)[0])
    for b in range(n - 2):  # known rows 0..b, then two drafted steps
        cache = DynamicCache()
        h = head(feats[:, : b + 1], toks[:, : b + 1], cache=cache, position_ids=pos[:, : b + 1])[0]
        for d in (2, 3):
            r = b + d - 1
            h = head(h[:, -1:], toks[:, r : r + 1], cache=cache, position_ids=pos[:, r : r + 1])[0]
            torch.testing.assert_close(h[:, 0], hs[d - 1][:, r], atol=1e-4, rtol=1e-4)


def test_training_time_test_trains_later_steps_from_a_saved_head(tiny_data, tiny_pair):
    base = train_settings(tiny_data, out=str(tiny_data / "base.safetensors"))
    train_drafter(base, progress=False, pair=tiny_pair, log=lambda *_: None)
    s = train_settings(
        tiny_data, out=str(tiny_data / "ttt.safetensors"), ttt_steps=3, init_from=base.out
    )
    rec = train_drafter(s, progress=False, pair=tiny_pair, log=lambda *_: None)
    first, last = rec["history"][0], rec["history"][-1]
    assert {"eval_alpha_2", "eval_alpha_3"} <= set(last)
    assert last["eval_alpha_3"] > first["eval_alpha_3"]
    head = load_head(s.out, tiny_pair.target)
    assert torch.equal(head.subset, load_head(base.out, tiny_pair.target).subset)
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    spec = SpeculativeDecoder(FeatureDrafter(head), tiny_pair.target, K=3, temperature=0)
    assert spec.generate_ids(PROMPT, 20).tokens == ar.generate_ids(PROMPT, 20).tokens


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"ttt_steps": 0}, "ttt_steps"),
        ({"ttt_steps": 2, "arch": "layers"}, "ttt_steps"),
        ({"init_from": "/nonexistent/head.safetensors"}, "init_from"),
    ],
)
def test_ttt_settings_bad_arguments(kw, name):
    with pytest.raises(ValueError, match=name):
        TrainSettings(**kw)
