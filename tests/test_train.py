"""On-policy data, the feature-level head, and its training: on the tiny random pair, offline."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from specdec_lib import train as train_mod
from specdec_lib.__main__ import main
from specdec_lib.decoding import AutoregressiveDecoder, SpeculativeDecoder
from specdec_lib.distill import DataSettings, generate_onpolicy, iter_sequences, load_manifest
from specdec_lib.heads import FeatureDrafter, FeatureHead, load_head
from specdec_lib.stats import chisquare_gof, exact_continuation_law
from specdec_lib.train import TrainSettings, train_drafter

PROMPT = torch.tensor([0, 5, 9, 3, 17, 4])


@pytest.fixture()
def prompts_file(tmp_path):
    path = tmp_path / "prompts.json"
    texts = ["hello there", "the cat sat", "one two three", "abc abc", "zebra", "quiet river"]
    path.write_text(json.dumps({"prompts": [{"category": "x", "text": t} for t in texts]}))
    return str(path)


def _settings(prompts_file, **kw):
    base = dict(
        pair="tiny-random", dtype="float32", prompts=prompts_file, batch_size=4, max_new_tokens=24
    )
    return DataSettings(**{**base, **kw})


# --------------------------------------------------------------------------------------------
# On-policy data
# --------------------------------------------------------------------------------------------


def test_generate_onpolicy_writes_shards_and_resumes(tmp_path, tiny_pair, prompts_file):
    folder = tmp_path / "data"
    s = _settings(prompts_file)
    generate_onpolicy(folder, 150, s, progress=False, pair=tiny_pair)
    m = load_manifest(folder)
    assert sum(x["generated_tokens"] for x in m["shards"]) >= 150
    first = (folder / "shard_00000.npz").read_bytes()
    seqs = list(iter_sequences(folder))
    assert len(seqs) == 4 * len(m["shards"])
    prompts = json.loads(open(prompts_file).read())["prompts"]
    for seq in seqs:
        encoded = tiny_pair.tokenizer(prompts[seq.prompt_index]["text"]).input_ids[0]
        assert seq.ids[: seq.prompt_len].tolist() == encoded
        assert seq.prompt_len < len(seq.ids) <= seq.prompt_len + 24
        assert seq.ids.max() < tiny_pair.target.config.vocab_size
    # Extending keeps the finished shards bit for bit and appends new ones.
    generate_onpolicy(folder, 400, s, progress=False, pair=tiny_pair)
    m2 = load_manifest(folder)
    assert len(m2["shards"]) > len(m["shards"])
    assert (folder / "shard_00000.npz").read_bytes() == first
    # Reproducible: the same settings elsewhere give the same tokens.
    other = tmp_path / "again"
    generate_onpolicy(other, 150, s, progress=False, pair=tiny_pair)
    a = [x.ids.tolist() for x in iter_sequences(folder, [0])]
    b = [x.ids.tolist() for x in iter_sequences(other, [0])]
    assert a == b


def test_generate_onpolicy_refuses_other_settings(tmp_path, tiny_pair, prompts_file):
    folder = tmp_path / "data"
    generate_onpolicy(folder, 20, _settings(prompts_file), progress=False, pair=tiny_pair)
    with pytest.raises(ValueError, match="other settings"):
        generate_onpolicy(
            folder, 40, _settings(prompts_file, seed=1), progress=False, pair=tiny_pair
        )


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"max_new_tokens": 2.5}, "max_new_tokens"),
        ({"temperature": 0}, "temperature"),
        ({"seed": -1}, "seed"),
    ],
)
def test_data_settings_bad_arguments(kw, name):
    with pytest.raises(ValueError, match=name):
        DataSettings(**kw)


def test_gen_data_cli(tmp_path, prompts_file, capsys):
    out = tmp_path / "cli"
    args = ["gen-data", "--pair", "tiny-random", "--dtype", "float32", "--prompts", prompts_file]
    args += ["--out", str(out), "--tokens", "30", "--batch-size", "2", "--max-new-tokens", "16"]
    assert main(args + ["--no-progress"]) == 0
    assert "generated tokens" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["gen-data", "--tokens", "0"])


# --------------------------------------------------------------------------------------------
# The head as a drafter: exact whatever its weights
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def random_head(tiny_pair):
    torch.manual_seed(0)
    subset = torch.arange(2, 26)  # the draft never proposes 0, 1 or 26..31: q = 0 there
    return FeatureHead(tiny_pair.target, subset, init_layer=-1)


def test_feature_head_saves_only_its_own_weights(tmp_path, tiny_pair, random_head):
    from specdec_lib.heads import save_head

    names = set(random_head.state_dict())
    assert "subset" in names and not any("embed" in n or "lm_head" in n for n in names)
    path = tmp_path / "head.safetensors"
    save_head(random_head, path, {"note": "test"})
    loaded = load_head(path, tiny_pair.target)
    for k, v in random_head.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v)


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


@pytest.mark.parametrize("width", [2, 3])
def test_feature_drafter_with_alternatives(tiny_pair, random_head, width):
    """An accepted alternative hands its target features to the head (promote): the cached and
    the re-encoding decoders agree step by step, and greedy output equals the target's."""
    kw = dict(K=2, width=width, temperature=1.0)
    a = SpeculativeDecoder(FeatureDrafter(random_head), tiny_pair.target, seed=6, **kw)
    b = SpeculativeDecoder(
        FeatureDrafter(random_head), tiny_pair.target, seed=6, use_cache=False, **kw
    )
    ra, rb = a.generate_ids(PROMPT, 40), b.generate_ids(PROMPT, 40)
    assert ra.tokens == rb.tokens
    assert [s.draft_tokens for s in ra.steps] == [s.draft_tokens for s in rb.steps]
    assert any(s.branch >= 1 for s in ra.steps)
    g = SpeculativeDecoder(
        FeatureDrafter(random_head), tiny_pair.target, K=2, width=width, temperature=0
    )
    ar = AutoregressiveDecoder(tiny_pair.target, temperature=0)
    assert g.generate_ids(PROMPT, 30).tokens == ar.generate_ids(PROMPT, 30).tokens


@pytest.mark.parametrize("kind", ["feature", "layers"])
def test_trained_draft_kinds_law_matches_target(tiny_pair, random_head, kind):
    """The first 2 tokens of 4 follow the target's law (for the feature head, step 1 has no drafts
    and step 2 drafts 2), with q = 0 outside the draft's token subset."""
    from specdec_lib.heads import LayerDraft

    torch.manual_seed(2)
    draft = (
        FeatureDrafter(random_head)
        if kind == "feature"
        else LayerDraft(tiny_pair.target, torch.arange(4, 30), init_layers=(0,))
    )
    dec = SpeculativeDecoder(draft, tiny_pair.target, K=2, seed=3, top_p=0.95)
    law = exact_continuation_law(tiny_pair.target, PROMPT, dec.warp, 2)
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    for _ in range(1600):
        r = dec.generate_ids(PROMPT, 4)
        counts[index[tuple(r.tokens[:2])]] += 1
    res = chisquare_gof(probs=np.array([law[k] for k in keys]), counts=counts, max_bins=60)
    assert res.pvalue > 1e-3, res


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory, tiny_pair):
    root = tmp_path_factory.mktemp("train")
    prompts = root / "prompts.json"
    texts = [f"prompt {w} number {i}" for i, w in enumerate("abcdefghij")]
    prompts.write_text(json.dumps({"prompts": [{"text": t} for t in texts]}))
    s = DataSettings(
        pair="tiny-random", dtype="float32", prompts=str(prompts), batch_size=5, max_new_tokens=40
    )
    generate_onpolicy(root / "data", 1200, s, progress=False, pair=tiny_pair)
    return root


def _train_settings(root, **kw):
    base = dict(
        data=str(root / "data"),
        out=str(root / "head.safetensors"),
        pair="tiny-random",
        teacher_dtype="float32",
        top=8,
        subset_size=24,
        epochs=3.0,
        batch_sequences=4,
        lr=3e-3,
        warmup_steps=2,
        checkpoint_every=5,
        eval_shards=1,
        cache=str(root / "cache"),
        teacher_layers=(0, -1),
        feature_layers=(0, -1),
    )
    return TrainSettings(**{**base, **kw})


def test_train_drafter_learns_and_loads(tiny_data, tiny_pair):
    s = _train_settings(tiny_data)
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
    full = _train_settings(tiny_data, out=str(tiny_data / "full.safetensors"))
    train_drafter(full, progress=False, pair=tiny_pair, log=lambda *_: None)
    killed = _train_settings(tiny_data, out=str(tiny_data / "killed.safetensors"))
    real_save = train_mod._atomic_torch_save
    calls = {"n": 0}

    def save_then_die(obj, path):
        real_save(obj, path)
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(train_mod, "_atomic_torch_save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_drafter(killed, progress=False, pair=tiny_pair, log=lambda *_: None)
    monkeypatch.setattr(train_mod, "_atomic_torch_save", real_save)
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


def test_train_drafter_cli(tiny_data, capsys):
    out = tiny_data / "cli.safetensors"
    args = ["train-drafter", "--pair", "tiny-random", "--teacher-dtype", "float32"]
    args += ["--data", str(tiny_data / "data"), "--out", str(out), "--top", "8"]
    args += ["--subset-size", "24", "--epochs", "1", "--batch-sequences", "4", "--eval-shards", "1"]
    args += ["--teacher-layers", "0", "-1", "--feature-layers", "-1"]
    assert main(args + ["--no-progress"]) == 0
    assert out.is_file() and "held-out alpha" in capsys.readouterr().out
    assert main(args + ["--no-progress", "--data", str(tiny_data / "missing")]) == 2
    assert "not an on-policy data folder" in capsys.readouterr().err


def test_bench_runs_with_a_feature_drafter(tmp_path, tiny_pair, random_head):
    import dataclasses

    from specdec_lib.bench import BenchSettings, measure_pass_costs, run_benchmark

    pair = dataclasses.replace(
        tiny_pair, draft=FeatureDrafter(random_head), assistant=tiny_pair.draft
    )
    costs = measure_pass_costs(pair, 3, context=16, reps=3)
    assert costs["t_draft_s"] > 0 and len(costs["t_target_s"]) == 3
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"prompts": [{"text": "abc abc"}, {"text": "hello"}]}))
    s = BenchSettings(
        pair="tiny-random",
        K=[1, 2],
        max_new_tokens=8,
        prompts=str(prompts),
        cost_reps=2,
        draft="early-exit",
    )
    res = run_benchmark(s, tmp_path / "r.json", progress=False, pair=pair)
    spec = [r for r in res["runs"] if r["method"] == "speculative"]
    assert len(spec) == 2 and all(r["alpha"] is not None for r in spec)


@pytest.mark.parametrize(
    "name, kw, match",
    [("tiny-random", {"draft": "trained"}, "only available"), ("default", {"draft": "x"}, "draft")],
)
def test_load_pair_draft_argument(name, kw, match):
    from specdec_lib.models import load_pair

    with pytest.raises(ValueError, match=match):
        load_pair(name, **kw)


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


def test_acceptance_counts_every_proposal_at_K1(tiny_pair, random_head):
    from specdec_lib.bench import acceptance

    prompts = [{"text": "abc abc abc"}, {"text": "hello"}]
    res = acceptance(
        tiny_pair, prompts, K=1, max_new_tokens=12, seeds=(0, 1), draft=FeatureDrafter(random_head)
    )
    # 12 tokens: the first step has no features, then one draft per step while there is room.
    assert 0 < res["proposed"] <= 4 * 10 and res["proposed"] == sum(
        c["proposed"] for c in res["per_prompt"]
    )
    assert 0 <= res["alpha"] <= 1 and res["by_position"][0] == pytest.approx(res["alpha"])
    same = acceptance(
        tiny_pair, prompts, K=1, max_new_tokens=12, seeds=(0, 1), draft=FeatureDrafter(random_head)
    )
    assert same["accepted"] == res["accepted"]  # seeded


@pytest.mark.parametrize("init_layers", [(0, -1), None])
def test_train_layers_draft(tiny_data, tiny_pair, init_layers):
    from specdec_lib.heads import LayerDraft

    name = "layers_" + ("copied" if init_layers else "random")
    s = _train_settings(
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


def test_eval_drafter_cli(tmp_path, capsys):
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"prompts": [{"text": "abc abc"}, {"text": "hello"}]}))
    out = tmp_path / "eval.json"
    args = ["eval-drafter", "--pair", "tiny-random", "--draft", "early-exit", "--prompts"]
    args += [str(prompts), "--temperatures", "1", "0", "--max-new-tokens", "10", "--dtype"]
    args += ["float32", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    res = json.loads(out.read_text())
    assert set(res["by_temperature"]) == {"1", "0"} and res["costs"]["c"] > 0
    assert "alpha" in capsys.readouterr().out
    assert main(args[:-3] + ["--out", str(out), "--draft", "trained"]) == 2  # tiny has none


def test_model_card_and_rebuild_command(tiny_data, tiny_pair):
    from specdec_lib.bench import acceptance, measure_pass_costs
    from specdec_lib.results import provenance
    from specdec_lib.train import model_card

    s = _train_settings(tiny_data, out=str(tiny_data / "card.safetensors"), epochs=1.0)
    rec = train_drafter(s, progress=False, pair=tiny_pair, log=lambda *_: None)
    draft = FeatureDrafter(load_head(s.out, tiny_pair.target))
    prompts = [{"text": "abc"}]
    ev = {
        "pair": tiny_pair.describe(),
        "by_temperature": {
            "1": acceptance(tiny_pair, prompts, max_new_tokens=8, draft=draft),
            "0": acceptance(tiny_pair, prompts, max_new_tokens=8, draft=draft, temperature=0),
        },
        "costs": measure_pass_costs(tiny_pair, 2, context=8, reps=2),
        "provenance": provenance(settings={"prompts": "p.json"}),
    }
    card = model_card(s.out, rec, ev)
    assert "| greedy |" in card and "python -m specdec_lib train-drafter" in card
    cmd = next(line for line in card.splitlines() if "train-drafter" in line)
    assert "--teacher-layers 0 -1" in cmd and "--epochs 1.0" in cmd and "--pair tiny-random" in cmd


def test_sample_batch_follows_the_target_law_with_rows_leaving(tiny_pair):
    """Rows of different lengths share the batch; rows that emit EOS leave it (their cache rows are
    dropped); the first 2 tokens after the test prompt still follow the target's exact law."""
    from specdec_lib.distill import sample_batch
    from specdec_lib.sampling import Warp

    target = tiny_pair.target
    prompt = PROMPT.tolist()
    others = [[0, 3], [0, 7, 7, 7, 7, 7, 7, 7, 9], [0, 12, 1, 5, 6]]
    law = exact_continuation_law(target, PROMPT, Warp(1.0), 2)
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    gen = torch.Generator().manual_seed(0)
    left = 0
    for _ in range(40):
        batch = [prompt if r % 2 == 0 else others[r % 3] for r in range(40)]
        out = sample_batch(target, batch, 3, eos={1}, pad_id=1, generator=gen)
        for r, seq in enumerate(out):
            cont = seq[len(batch[r]) :]
            assert 1 <= len(cont) <= 3 and (len(cont) == 3 or cont[-1] == 1)
            left += len(cont) < 3
            if r % 2 == 0 and len(cont) >= 2:
                counts[index[tuple(cont[:2])]] += 1
    # Rows whose first token is EOS have no second token: compare the law given "first != EOS".
    mask = np.array([k[0] != 1 for k in keys])
    probs = np.array([law[k] for k in keys])[mask]
    res = chisquare_gof(probs=probs / probs.sum(), counts=counts[mask], max_bins=60)
    assert left > 20  # rows did leave the batch early
    assert res.pvalue > 1e-3, res


def test_hf_sampler_shards_are_recorded(tmp_path, tiny_pair, prompts_file):
    folder = tmp_path / "hf"
    generate_onpolicy(
        folder, 20, _settings(prompts_file, sampler="hf"), progress=False, pair=tiny_pair
    )
    generate_onpolicy(folder, 400, _settings(prompts_file), progress=False, pair=tiny_pair)
    samplers = [s["sampler"] for s in load_manifest(folder)["shards"]]
    assert samplers[0] == "hf" and samplers[-1] == "own"


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
    from specdec_lib.sampling import Warp, sample

    warp = Warp(**warp_kw)
    drafter = FeatureDrafter(random_head)
    for i in range(3):
        h = torch.randn(1, random_head.fc.out_features)
        x, got = drafter._draw(h, warp, torch.Generator().manual_seed(i), first=True)
        logits = random_head.logits(h)
        full = logits.new_full((1, random_head.target.config.vocab_size), float("-inf"))
        full[:, random_head.subset] = logits
        want = warp.probs(full)[0]
        torch.testing.assert_close(got, want, atol=1e-7, rtol=1e-6)
        # Drawing within the subset is drawing from the full row: the same token, same stream.
        assert int(x) == int(sample(want, torch.Generator().manual_seed(i)))
        torch.testing.assert_close(drafter.first_scores, full[0])


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


@pytest.mark.parametrize("schedule", ["heuristic", "threshold"])
def test_bench_dynamic_schedules(tmp_path, tiny_pair, schedule):
    from specdec_lib.bench import BenchSettings, run_benchmark

    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"prompts": [{"text": "abc abc"}]}))
    s = BenchSettings(
        pair="tiny-random",
        K=[2],
        max_new_tokens=10,
        prompts=str(prompts),
        cost_reps=2,
        schedule=schedule,
        threshold=0.2,
    )
    res = run_benchmark(s, tmp_path / "r.json", progress=False, pair=tiny_pair)
    cell = res["cells"]["speculative|2|0|0"]
    drafted = [st[0] for st in cell["steps"]]
    assert max(drafted) <= (16 if schedule == "heuristic" else 2)
    hf = res["cells"]["hf_assisted|2|0|0"]
    assert len(hf["tokens"]) == 10


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


def test_auto_draft_resolves_to_the_trained_weights_when_present(tmp_path):
    from specdec_lib.bench import BenchSettings
    from specdec_lib.models import resolve_draft

    head = tmp_path / "head.safetensors"
    assert resolve_draft("default", "auto", head) == "early-exit"  # no weights yet
    head.write_bytes(b"")
    assert resolve_draft("default", "auto", head) == "trained"
    assert resolve_draft("tiny-random", "auto", head) == "early-exit"  # the pair's own draft
    assert resolve_draft("default", "ngram") == "ngram"
    # A benchmark records the draft it measured, never "auto".
    assert BenchSettings(pair="tiny-random").validate().draft == "early-exit"
    with pytest.raises(ValueError, match="draft"):
        BenchSettings(pair="tiny-random", draft="trained").validate()


def test_cli_defaults_are_the_train_settings_defaults():
    """train-drafter's flags and TrainSettings share their defaults (the committed recipe)."""
    from dataclasses import asdict

    from specdec_lib.__main__ import build_parser

    args = vars(build_parser().parse_args(["train-drafter"]))
    for k, v in asdict(TrainSettings()).items():
        if k in ("cache", "init_layers", "init_layer"):  # parsed from text by the CLI
            continue
        got = args[k]
        assert (tuple(got) if isinstance(got, list) else got) == v, k


def test_int8_head_close_to_bf16_and_exact():
    """int8 weights change q a little (measured again for the committed draft); greedy
    speculative output stays the target's, and the weights are int8."""
    from specdec_lib.heads import Int8Linear, quantize_int8
    from specdec_lib.models import load_pair

    pair = load_pair("tiny-random", dtype=torch.bfloat16)
    torch.manual_seed(0)
    head = FeatureHead(pair.target, torch.arange(2, 26), init_layer=-1).eval()
    h = torch.randn(3, head.fc.out_features, dtype=torch.bfloat16)
    feats = torch.randn(1, 3, head.fc.out_features, dtype=torch.bfloat16)
    toks = torch.tensor([[3, 4, 5]])
    with torch.inference_mode():
        ref_logits = head.logits(h).float()
        ref_hidden = head(feats, toks)[0].float()
        quantize_int8(head)
        q_logits = head.logits(h).float()
        q_hidden = head(feats, toks)[0].float()
    assert any(isinstance(m, Int8Linear) for m in head.modules())
    assert not any(isinstance(m, torch.nn.Linear) for m in head.modules())
    rel = lambda a, b: float((a - b).norm() / b.norm())  # noqa: E731
    assert rel(q_logits, ref_logits) < 0.05 and rel(q_hidden, ref_hidden) < 0.05
    ar = AutoregressiveDecoder(pair.target, temperature=0)
    for width in (1, 2):
        sd = SpeculativeDecoder(FeatureDrafter(head), pair.target, K=2, width=width, temperature=0)
        assert sd.generate_ids(PROMPT, 20).tokens == ar.generate_ids(PROMPT, 20).tokens


def test_int8_needs_bfloat16(random_head):
    import copy

    from specdec_lib.heads import quantize_int8

    with pytest.raises(ValueError, match="bfloat16"):
        quantize_int8(copy.deepcopy(random_head))  # float32
