"""Model cards (``specdec_lib.training.card``): the greedy row and a rebuild command that names the non-default settings."""

from __future__ import annotations

from conftest import train_settings

from specdec_lib.bench import measure_pass_costs
from specdec_lib.drafters.feature import FeatureDrafter
from specdec_lib.drafters.heads import load_head
from specdec_lib.results import provenance
from specdec_lib.training.card import model_card, training_time
from specdec_lib.training.distill import train_drafter
from specdec_lib.training.evaluate import acceptance


def test_model_card_and_rebuild_command(tiny_data, tiny_pair):

    s = train_settings(tiny_data, out=str(tiny_data / "card.safetensors"), epochs=1.0)
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


def test_a_tree_evaluation_with_int8_weights_is_named_and_rebuilt():
    from specdec_lib.training.card import _eval_command, _measured_how

    e = {
        "draft": "trained-int8",
        "head": "h.safetensors",
        "temperatures": [1.0, 0.0],
        "K": 8,
        "tree": [8, 8],
        "max_new_tokens": 128,
        "seeds": 2,
        "threads": None,
    }
    assert _measured_how(e) == "K = 8, the tree (8, 8), int8 weights"
    cmd = _eval_command("h.safetensors", e)
    assert cmd.startswith("python -m specdec_lib eval-drafter --draft trained-int8 --head h.safet")
    for part in ("--temperatures 1 0", "--K 8", "--tree 8 8", "--max-new-tokens 128", "--seeds 2"):
        assert part in cmd
    # weights as stored: the path is the draft
    assert "--draft w.safetensors --temperatures 1 --K 3 " in _eval_command(
        "w.safetensors", {"draft": "w.safetensors", "temperatures": [1.0], "K": 3}
    )


def test_training_time_sums_the_runs_of_a_resumed_training():
    # a record whose resumed runs carried the seconds on and numbered themselves
    carried = [{"seconds": 0.0}, {"seconds": 10.0, "run": 1}, {"seconds": 25.0, "run": 2}]
    assert training_time(carried) == (25.0, 2)
    # one written before they did: each resume started its seconds again
    restarted = [{"seconds": 0.0}, {"seconds": 10.0}, {"seconds": 4.0}, {"seconds": 9.0}]
    assert training_time(restarted) == (19.0, 2)
    assert training_time([]) == (0.0, 1)
