"""Benchmark settings (``specdec_lib.bench.settings``): checks that name the argument, defaults
resolved from the presets (data, each with why), the step's shape, the device and dtype."""

import pytest

from specdec_lib.bench import DEFAULT_TREE, PRESETS, BenchSettings, settings
from specdec_lib.bench.settings import load_presets, settings_record
from specdec_lib.research.speed.kernels import unavailable as library_unavailable


@pytest.mark.parametrize(
    "settings, name",
    [
        (dict(K=[0]), "K"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(repeats=0), "repeats"),
        (dict(methods=["speculative"]), "autoregressive"),
        (dict(methods=["autoregressive", "magic"]), "methods"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_p=2.0), "top_p"),
        (dict(width=0), "width"),
        (dict(tree=[2, 0]), "tree"),
        (dict(width=2, tree=[2]), "width.*tree"),
        (dict(preset="fastest"), "preset"),
        (dict(pair="tiny-random", draft="early-exit"), "draft"),  # not a draft of that pair
        (dict(draft="early-exit", head="data/drafter/feature_head.safetensors"), "head"),
        (dict(head="/nonexistent/head.safetensors"), "head"),
        (dict(draft_temperature_scale=0.0), "draft_temperature_scale"),
    ],
)
def test_bad_settings(settings, name):
    with pytest.raises(ValueError, match=name):
        BenchSettings(**settings).validate()


def chose(dtype: str, pack: str | None = None) -> settings.SettingChoice:
    """A start-up choice, as research.speed.choose_setting makes one, without timing."""
    return settings.SettingChoice(dtype, pack, "tests")


def test_device_and_dtype_resolved_and_recorded(monkeypatch):
    import torch

    s = BenchSettings(pair="tiny-random")
    assert s.leaves_dtype_to_machine()  # auto on a CPU: the start-up step's to time
    s.validate()  # nothing timed while validating: float32 as loaded, saying why
    assert (s.device, s.dtype, s.pack) == ("cpu", "float32", "off")
    assert s.choice == settings.untimed_choice("cpu") and "no start-up timing" in s.choice.why
    chosen = chose("float32")
    s = BenchSettings(pair="tiny-random").validate(chosen)
    assert s.choice.record() == {"dtype": "float32", "why": "tests"}  # recorded with the run
    assert s.validate().choice is chosen  # kept when re-run
    assert BenchSettings(pair="tiny-random").validate(chose("bfloat16")).dtype == "bfloat16"
    s = BenchSettings(pair="tiny-random", dtype="float32")
    assert not s.leaves_dtype_to_machine() and s.validate(chose("bfloat16")).choice is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    s = BenchSettings(pair="tiny-random")
    assert not s.leaves_dtype_to_machine() and s.validate().dtype == "bfloat16"  # bf16 on a GPU
    assert s.device == "cuda" and s.choice.why == "a CUDA device (tensor cores)"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="device='cuda' but torch sees no CUDA device"):
        BenchSettings(pair="tiny-random", device="cuda").validate()


def test_defaults_come_from_the_default_preset(monkeypatch):
    default = PRESETS["default"]
    assert default["why"] and DEFAULT_TREE == tuple(default["tree"]) == (4, 3)
    assert default["tune_tree"] is True
    chosen = chose("bfloat16")
    s = BenchSettings().validate(
        chosen
    )  # the trained head's tree is tuned: its rates are committed
    assert (s.preset, s.draft, s.tree, s.tune_tree, s.dtype) == (
        "default",
        "trained-int8",
        None,
        True,
        "bfloat16",
    )
    # a tree or width given is the step's shape; --no-tune-tree runs the preset's fixed tree
    assert (
        BenchSettings(tree=[2]).validate(chosen).tree,
        BenchSettings(width=3).validate(chosen).tree,
    ) == (
        [2],
        [3],
    )
    s = BenchSettings(tune_tree=False).validate(chosen)
    assert (s.draft, s.tree, s.tune_tree) == ("trained-int8", [4, 3], False)
    chosen = chose("float32")
    s = BenchSettings().validate(
        chosen
    )  # int8 weights run only in bfloat16 on a CPU: the head in bf16
    assert (s.draft, s.tree, s.tune_tree, s.dtype) == ("trained-bf16", None, True, "float32")
    # the preset's tree is for its drafts, on its pair: anything else runs the chain, untuned
    s = BenchSettings(draft="ngram").validate(chosen)
    assert (s.tree, s.tune_tree) == ([1], False)
    s = BenchSettings(pair="tiny-random").validate(chosen)
    assert (s.draft, s.tree, s.tune_tree) == ("model", [1], False)
    s = BenchSettings(preset="chain").validate(chosen)
    assert (s.draft, s.tree, s.tune_tree, s.dtype) == ("trained", [1], False, "float32")
    # on the library's bfloat16 product, the head in bfloat16 (its output rows packed too)
    chosen = chose("bfloat16", "library")
    s = BenchSettings().validate(chosen)
    assert (s.draft, s.tune_tree, s.dtype, s.pack) == ("trained-bf16", True, "bfloat16", "library")
    s = BenchSettings(pack="on").validate(chosen)
    assert (s.draft, s.tune_tree, s.pack) == ("trained-int8", True, "on")
    # the draft stops by confidence; a schedule given wins; presets that name none run fixed K
    assert (
        default["schedule"] == "threshold"
        and BenchSettings().validate(chosen).schedule == "threshold"
    )
    assert BenchSettings(schedule="fixed").validate(chosen).schedule == "fixed"
    assert BenchSettings(preset="chain").validate(chosen).schedule == "fixed"
    assert BenchSettings(pair="tiny-random").validate(chosen).schedule == "fixed"
    assert (
        BenchSettings(draft="ngram").validate(chosen).schedule == "fixed"
    )  # not the preset's draft
    assert BenchSettings(draft="early-exit").validate(chosen).schedule == "fixed"


def test_a_head_without_committed_tree_rates_runs_the_presets_fixed_tree(monkeypatch, tmp_path):
    from specdec_lib.config import tree_rates_path

    chosen = chose("bfloat16")
    head = tmp_path / "head.safetensors"
    assert not tree_rates_path(head).exists()
    s = BenchSettings(head=str(head))
    monkeypatch.setattr(settings, "check_head", lambda head, draft: None)  # no weights needed
    s.validate(chosen)
    assert (s.tree, s.tune_tree) == ([4, 3], False)
    with pytest.raises(ValueError, match="tune_tree must be"):
        BenchSettings(tune_tree=1).validate(chosen)


def test_the_drafts_are_drawn_at_the_targets_temperature_unless_told(monkeypatch):
    chosen = chose("bfloat16")
    assert BenchSettings().validate(chosen).draft_temperature_scale == 1.0
    s = BenchSettings(draft_temperature_scale=0.8).validate(chosen)
    assert s.draft_temperature_scale == 0.8 and settings_record(s)["draft_temperature_scale"] == 0.8


def test_weights_are_packed_in_bfloat16_on_a_cpu_unless_told(monkeypatch):
    chosen = chose("bfloat16")
    assert BenchSettings().validate(chosen).pack == "on"
    assert BenchSettings(dtype="float32").validate(chosen).pack == "off"
    assert BenchSettings(dtype="float32", pack="on").validate(chosen).pack == "on"
    assert BenchSettings(pack="off").validate(chosen).pack == "off"
    # float32 is packed where the measurement found it faster packed
    chosen = chose("float32", "on")
    assert BenchSettings().validate(chosen).pack == "on"
    assert BenchSettings(pack="off").validate(chosen).pack == "off"
    with pytest.raises(ValueError, match="pack"):
        BenchSettings(pack="maybe").validate(chosen)


def test_width_is_a_spelling_of_a_one_depth_tree():
    s = BenchSettings(width=3).validate()
    assert (s.tree, s.width) == ([3], None) and settings_record(s)["width"] == 3
    assert BenchSettings(tree=[3]).validate() == s
    assert s.validate() == s  # validating twice changes nothing
    s = BenchSettings(tree=[2, 2]).validate()
    assert (s.tree, settings_record(s)["width"]) == ([2, 2], 1)
    with pytest.raises(ValueError, match="width=2 and tree=\\[2, 2\\]"):
        BenchSettings(width=2, tree=[2, 2]).validate()


def test_presets_say_why(tmp_path):
    path = tmp_path / "presets.toml"
    path.write_text("[fast]\ntree = [2]\n")
    with pytest.raises(ValueError, match="'fast'.*why"):
        load_presets(path)
    path.write_text('[fast]\nwhy = "measured"\ntree = [0]\n')
    with pytest.raises(ValueError, match="tree"):
        load_presets(path)
    path.write_text('[fast]\nwhy = "measured"\ndrafts = ["model"]\npair = "default"\n')
    with pytest.raises(ValueError, match="drafts"):
        load_presets(path)
    path.write_text('[fast]\nwhy = "measured"\nschedule = "sometimes"\n')
    with pytest.raises(ValueError, match="schedule is one of"):
        load_presets(path)
    path.write_text('[fast]\nwhy = "measured"\nwidth = 2\n')
    with pytest.raises(ValueError, match="unknown keys"):
        load_presets(path)


def test_the_dtype_auto_runs_in_is_timed_at_start_up_on_this_machine():
    from specdec_lib.research.speed import choose, choose_setting

    choose_setting.cache_clear()
    choice = choose_setting("tiny-random", "cpu")  # the real timing, on the tiny pair
    t = choice.t_target_s
    timed_here = {"float32", "float32 packed", "bfloat16 packed"}
    if library_unavailable() is None:  # the library's product runs here: it is timed too
        assert set(t) == timed_here | {"bfloat16 library"} and choice.not_timed is None
    else:
        why = library_unavailable()
        assert set(t) == timed_here and choice.not_timed == {"bfloat16 library": why}
    assert all(set(v) == {"1", "8"} for v in t.values())
    best = min(t, key=lambda v: t[v]["1"] + t[v]["8"])  # both passes together, as it ranks
    assert settings.setting_name(choice.dtype, choice.pack) == best
    assert choice.pack in ("off", "on", "library")
    assert choice.fastest_one_token == min(t, key=lambda v: t[v]["1"])
    assert choose_setting("tiny-random", "cuda").dtype == "bfloat16"
    s = BenchSettings(pair="tiny-random")
    assert choose(s) is choice and s.validate(choice).dtype == choice.dtype
    assert choose(BenchSettings(pair="tiny-random", dtype="float32")) is None  # nothing to time


def test_a_faster_baseline_in_another_dtype_is_named():
    t = {"float32 packed": {"1": 0.040, "8": 0.054}, "bfloat16 packed": {"1": 0.020, "8": 0.076}}
    choice = {"dtype": "float32", "pack": True, "t_target_s": t}
    assert settings.baseline_note(choice | {"fastest_one_token": "float32 packed"}) is None
    assert settings.baseline_note(choice) is None  # a record from before the field
    assert settings.baseline_note(None) is None
    note = settings.baseline_note(choice | {"fastest_one_token": "bfloat16 packed"})
    assert "faster in bfloat16 packed (one-token pass 20.0 ms)" in note
    assert "float32 packed (40.0 ms)" in note and "--dtype bfloat16 --pack on" in note
    library = {"bfloat16 library": {"1": 0.018, "8": 0.060}}
    note = settings.baseline_note(
        choice | {"fastest_one_token": "bfloat16 library", "t_target_s": t | library}
    )
    assert "faster in bfloat16 library (one-token pass 18.0 ms)" in note
    assert "--dtype bfloat16 --pack library measures" in note


def test_a_tuned_tree_replaces_the_fixed_shape():
    s = BenchSettings(tune_tree=True, dtype="float32").validate()
    assert s.tree is None and settings_record(s)["tune_tree"] is True
    assert s.validate() == s
    with pytest.raises(ValueError, match="tune_tree chooses the tree at each K"):
        BenchSettings(tune_tree=True, tree=[4, 3], dtype="float32").validate()
    with pytest.raises(ValueError, match="tune_tree chooses the tree at each K"):
        BenchSettings(tune_tree=True, width=2, dtype="float32").validate()
    with pytest.raises(ValueError, match="tune_tree: .*draft='ngram'"):
        BenchSettings(tune_tree=True, draft="ngram", dtype="float32").validate()


def test_a_tuned_tree_needs_the_tuning_the_speed_wing_registers(monkeypatch):
    monkeypatch.setattr(settings, "_TREE_TUNER", None)
    with pytest.raises(ValueError, match="specdec_lib.research.speed"):
        BenchSettings(tune_tree=True, dtype="float32").validate()
    s = BenchSettings(dtype="float32").validate()  # the preset's tuning is not here: its tree
    assert (s.tune_tree, s.tree) == (False, [4, 3])
