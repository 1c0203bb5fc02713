"""Distillation (``specdec_lib.training.distill``): a head learns and loads, training resumes after a kill, bad settings, and layer drafts."""

from __future__ import annotations

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
    train_drafter(killed, progress=False, pair=tiny_pair, log=logs.append)
    assert any("resumed at step 10" in line for line in logs)
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
