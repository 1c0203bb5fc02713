"""Levers measured side by side (``specdec_lib.research.levers``), on the tiny pair: the record's
shape only (speed is a benchmark, not a test)."""

import pytest

from specdec_lib.research.levers import library_costs, packing_costs
from specdec_lib.research.speed.kernels import unavailable


def test_packing_costs_time_both_variants_at_every_pass_size():
    r = packing_costs("float32", pair="tiny-random", n_max=3, reps=1)
    assert r["pack_applied"] is True and r["dtype"] == "float32"
    for variant in ("plain", "packed"):
        assert len(r[variant]["t_target_s"]) == 3 and r[variant]["t_draft_s"] > 0
        assert r[variant]["t_n_over_t_1"][0] == 1.0
    assert len(r["packed_over_plain"]) == 3 and all(x > 0 for x in r["packed_over_plain"])


@pytest.mark.skipif(unavailable() is not None, reason="no library product here")
def test_library_lever_times_both_products_at_every_pass_size():
    r = library_costs(pair="tiny-random", n_max=3, reps=1)
    assert r["dtype"] == "bfloat16" and isinstance(r["library_pairs"], bool)
    for variant in ("onednn", "library"):
        assert len(r[variant]["t_target_s"]) == 3 and r[variant]["t_draft_s"] > 0
    assert len(r["library_over_onednn"]) == 3


def test_attention_lever_times_both_attentions_at_each_context(tiny_pair):
    from specdec_lib.lm import DECODE_ATTENTION
    from specdec_lib.research.levers import attention_costs

    runs = attention_costs(tiny_pair, [8, 20], K_max=2, reps=1)
    assert [r["context"] for r in runs] == [8, 20]
    for r in runs:
        n = len(r["decode_over_sdpa"])
        assert n == len(r["sdpa"]["t_target_s"]) == len(r["decode"]["t_target_s"]) > 1
        assert all(x > 0 for x in r["decode_over_sdpa"]) and r["decode"]["t_draft_s"] > 0
    assert tiny_pair.target.config._attn_implementation == DECODE_ATTENTION  # as loaded


def test_cache_lever_times_both_caches_at_each_context(tiny_pair):
    from specdec_lib import lm
    from specdec_lib.research.levers import cache_costs

    runs = cache_costs(tiny_pair, [8, 20], K_max=2, reps=1)
    assert [r["context"] for r in runs] == [8, 20]
    for r in runs:
        n = len(r["buffer_over_dynamic"])
        assert n == len(r["dynamic"]["t_target_s"]) == len(r["buffer"]["t_target_s"]) > 1
        assert all(x > 0 for x in r["buffer_over_dynamic"])
        for variant in ("dynamic", "buffer"):
            assert set(r[variant]["t_host_s"]) == {"0", "1", "2"}
    assert lm.BUFFERED_CACHE  # as set


def test_cache_lever_in_decoding_gives_each_cache_its_own_baseline(tiny_pair, monkeypatch):
    from specdec_lib import lm
    from specdec_lib.bench import BenchSettings
    from specdec_lib.research import levers

    seen = []  # the cache each decoder's state starts with
    new_cache = lm.new_cache
    monkeypatch.setattr(lm, "new_cache", lambda: seen.append(lm.BUFFERED_CACHE) or new_cache())
    s = BenchSettings(
        pair="tiny-random", draft="model", K=[1, 2], max_new_tokens=6, cost_reps=2
    ).validate()
    prompts = [{"category": "a", "text": "hello world"}, {"category": "b", "text": "abc"}]
    r = levers.cache_decoding_costs(tiny_pair, s, prompts)
    dynamic, buffer = r["results"]["dynamic"], r["results"]["buffer"]
    base = [k for k in dynamic["cells"] if k.startswith("autoregressive")]
    assert len(base) == 2 and all(dynamic["cells"][k] is not buffer["cells"][k] for k in base)
    assert set(r["baselines"]) == {"dynamic", "buffer"} and [x["K"] for x in r["by_K"]] == [1, 2]
    assert True in seen and False in seen and lm.BUFFERED_CACHE  # as set


def test_support_lever_decodes_with_the_subset_named_and_hidden(tiny_pair, random_head):
    from types import SimpleNamespace

    import torch

    from specdec_lib.drafters import FeatureDrafter
    from specdec_lib.research.levers import support_costs, without_support

    draft = FeatureDrafter(random_head)
    assert without_support(draft).support is None and draft.support is not None
    pair = SimpleNamespace(target=tiny_pair.target, draft=draft)
    r = support_costs(pair, [torch.tensor([0, 5, 9, 3]), torch.tensor([1, 2])], max_new_tokens=8)
    for name in ("support", "whole vocabulary"):
        assert r[name]["host_ms_per_step"] > 0 and r[name]["tokens_per_s"] > 0


def _tuned_tiny_pair(tmp_path, tiny_pair, random_head, monkeypatch):
    """The tiny pair with the random feature head, whose tree tunes from rates in ``tmp_path``."""
    import dataclasses
    import json

    from specdec_lib.bench import settings as bench_settings
    from specdec_lib.bench import tuning
    from specdec_lib.drafters import FeatureDrafter

    monkeypatch.setattr(bench_settings, "TRAINED_DRAFTS", ("model",))  # the tiny pair's head
    pair = dataclasses.replace(
        tiny_pair, draft=FeatureDrafter(random_head), notes={"head_sha256": "abc"}
    )
    rates = {"beta": [0.5, 0.4], "gamma": [[0.0, 0.3, 0.4], [0.0, 0.2, 0.25]], "widths": [3, 3]}
    path = tmp_path / "rates.json"
    path.write_text(
        json.dumps(
            {
                "pair": {"draft": "tiny", "head_sha256": "abc"},
                "by_temperature": {"1": {"tree_rates": rates}},
            }
        )
    )
    monkeypatch.setattr(tuning, "tree_rates_path", lambda head: path)
    return pair


def _tuned_tiny_run(tmp_path, tiny_pair, random_head, monkeypatch, max_new_tokens):
    """A lever's inputs on the tiny pair (:func:`_tuned_tiny_pair`): the pair, bench's settings
    at K = 1 and 2 with the tree (2), and two prompts."""
    from specdec_lib.bench import BenchSettings

    pair = _tuned_tiny_pair(tmp_path, tiny_pair, random_head, monkeypatch)
    s = BenchSettings(
        pair="tiny-random",
        draft="model",
        K=[1, 2],
        tree=[2],
        max_new_tokens=max_new_tokens,
        cost_reps=2,
    ).validate()
    prompts = [{"category": "a", "text": "hello world"}, {"category": "b", "text": "abc"}]
    return pair, s, prompts


def test_tree_lever_runs_both_shapes_beside_one_baseline(
    tmp_path, tiny_pair, random_head, monkeypatch
):
    from specdec_lib.research import levers

    pair, s, prompts = _tuned_tiny_run(tmp_path, tiny_pair, random_head, monkeypatch, 6)
    r = levers.tree_costs(pair, s, prompts)
    assert r["fixed_tree"] == [2] and [x["K"] for x in r["by_K"]] == [1, 2]
    fixed, tuned = r["results"]["fixed"], r["results"]["tuned"]
    # one baseline for both: the same cells
    base = {k: c for k, c in fixed["cells"].items() if k.startswith("autoregressive")}
    assert len(base) == 2 and all(tuned["cells"][k] is c for k, c in base.items())
    for x in r["by_K"]:
        assert x["fixed"]["tree"] == [2]
        assert x["tuned"]["tree"] == tuned["tuned_trees"]["by_K"][str(x["K"])]["tree"]
        for v in ("fixed", "tuned"):  # each shape summarised as a bench run, with its interval
            assert {"speedup", "low", "high", "predicted_speedup", "host_share"} <= set(x[v])


def test_schedule_lever_runs_fixed_and_stopped_drafts_beside_one_baseline(
    tmp_path, tiny_pair, random_head, monkeypatch
):
    from specdec_lib.research import levers

    pair, s, prompts = _tuned_tiny_run(tmp_path, tiny_pair, random_head, monkeypatch, 12)
    r = levers.schedule_costs(pair, s, prompts)
    assert r["threshold"] == s.threshold and [x["K"] for x in r["by_K"]] == [1, 2]
    fixed, stopped = r["results"]["fixed"], r["results"]["threshold"]
    assert (fixed["settings"]["schedule"], stopped["settings"]["schedule"]) == (
        "fixed",
        "threshold",
    )
    base = {k: c for k, c in fixed["cells"].items() if k.startswith("autoregressive")}
    assert len(base) == 2 and all(stopped["cells"][k] is c for k, c in base.items())
    short = 0
    for x in r["by_K"]:
        assert x["fixed"]["tree"] == x["threshold"]["tree"]  # both tuned, the same shape
        for v in ("fixed", "threshold"):  # each summarised as a bench run, with its prediction
            assert {"speedup", "low", "high", "predicted_speedup", "host_share"} <= set(x[v])
            assert x[v]["predicted_speedup"] > 0
        cells = [c for k, c in stopped["cells"].items() if k.startswith(f"speculative|{x['K']}|")]
        short += sum(0 < st[0] < x["K"] for c in cells for st in c["steps"][: -x["K"]])
    assert short > 0  # the draft did stop by confidence


def test_head_lever_runs_every_head_beside_one_baseline(tiny_pair, random_head):
    import copy
    import dataclasses

    from specdec_lib.bench import BenchSettings
    from specdec_lib.drafters import FeatureDrafter
    from specdec_lib.research import levers

    other = copy.deepcopy(random_head)
    pairs = {
        name: dataclasses.replace(
            tiny_pair,
            draft=FeatureDrafter(h),
            notes={"head_path": f"{name}.safetensors", "head_sha256": name},
        )
        for name, h in (("a", random_head), ("b", other))
    }
    s = BenchSettings(
        pair="tiny-random", draft="model", K=[1, 2], tree=[2], max_new_tokens=6, cost_reps=2
    ).validate()
    prompts = [{"category": "a", "text": "hello world"}, {"category": "b", "text": "abc"}]
    r = levers.head_costs(pairs, s, prompts)
    assert r["heads"]["b"] == {"head": "b.safetensors", "head_sha256": "b"}
    a, b = r["results"]["a"], r["results"]["b"]
    assert a["settings"]["head"] == "a.safetensors" and b["head_sha256"] == "b"
    base = {k: c for k, c in a["cells"].items() if k.startswith("autoregressive")}
    assert len(base) == 2 and all(b["cells"][k] is c for k, c in base.items())
    for x in r["by_K"]:
        for v in ("a", "b"):
            assert x[v]["tree"] == [2] and {"speedup", "low", "high", "tau"} <= set(x[v])


def test_draft_lever_runs_each_draft_with_its_own_costs_beside_one_baseline(tiny_pair, random_head):
    import dataclasses

    from specdec_lib.bench import BenchSettings
    from specdec_lib.drafters import FeatureDrafter
    from specdec_lib.research import levers

    pairs = {"trained": dataclasses.replace(tiny_pair, draft=FeatureDrafter(random_head))}
    pairs["model"] = tiny_pair
    s = BenchSettings(
        pair="tiny-random", draft="model", K=[1, 2], tree=[2], max_new_tokens=6, cost_reps=2
    ).validate()
    prompts = [{"category": "a", "text": "hello world"}, {"category": "b", "text": "abc"}]
    r = levers.draft_costs(pairs, s, prompts)
    assert r["drafts"] == ["trained", "model"] and r["tree"] == [2]
    head, model = r["results"]["trained"], r["results"]["model"]
    assert head["settings"]["draft"] == "trained" and model["settings"]["draft"] == "model"
    assert head["costs"] is not model["costs"]  # each draft's step timed on its own pair
    base = {k: c for k, c in head["cells"].items() if k.startswith("autoregressive")}
    assert len(base) == 2 and all(model["cells"][k] is c for k, c in base.items())
    for x in r["by_K"]:
        assert {"speedup", "low", "high", "tau"} <= set(x["trained"]) & set(x["model"])


def test_draft_temperature_lever_runs_each_scale_beside_one_baseline(tiny_pair, random_head):
    import dataclasses

    from specdec_lib.bench import BenchSettings
    from specdec_lib.drafters import FeatureDrafter
    from specdec_lib.research import levers

    pair = dataclasses.replace(tiny_pair, draft=FeatureDrafter(random_head))
    s = BenchSettings(
        pair="tiny-random", K=[1, 2], tree=[2], max_new_tokens=6, cost_reps=2,
        draft_temperature_scale=0.5,
    ).validate()  # fmt: skip
    prompts = [{"category": "a", "text": "hello world"}, {"category": "b", "text": "abc"}]
    r = levers.draft_temperature_costs(pair, s, prompts, scales=[1.0])
    assert r["scales"] == ["scale 0.5", "scale 1"] and [x["K"] for x in r["by_K"]] == [1, 2]
    half, one = (r["results"][v] for v in r["scales"])
    assert half["settings"]["draft_temperature_scale"] == 0.5
    assert one["settings"]["draft_temperature_scale"] == 1.0
    base = {k: c for k, c in half["cells"].items() if k.startswith("autoregressive")}
    assert len(base) == 2 and all(one["cells"][k] is c for k, c in base.items())
    for x in r["by_K"]:
        assert {"speedup", "low", "high", "tau"} <= set(x["scale 0.5"]) & set(x["scale 1"])


def test_compiled_linears_take_passes_over_several_rows_only_while_on():
    import pytest
    import torch

    from specdec_lib.research.levers import compile_linears

    torch.manual_seed(0)
    # two layers of one shape: each must run its own weights, frozen into its own code
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 16))
    m = model[0]
    whole = torch.randn(1, 3, 16)
    with torch.inference_mode():
        expected = model(whole)
    x1, x3 = torch.randn(1, 1, 16), torch.randn(1, 3, 16)
    with pytest.raises(ValueError, match="units"):
        compile_linears(model, units="layers")
    with torch.inference_mode():
        before1, before3 = m(x1), m(x3)
        installed = compile_linears(model)
        try:
            assert len(installed.routes) == 2 and installed.compile_s > 0
            torch.testing.assert_close(model(whole), expected)
            assert torch.equal(m(x1), before1)  # one row: the layer's own kernel
            torch.testing.assert_close(m(x3), before3)  # several: compiled, another rounding
            installed.switch(False)
            assert torch.equal(m(x3), before3)
        finally:
            installed.remove()
    assert all("forward" not in vars(layer) for layer in model)  # the layers as they were


def test_compile_lever_times_both_variants_at_every_pass_size(tiny_pair, monkeypatch):
    import torch

    from specdec_lib.research.levers import compile_costs

    monkeypatch.setattr(torch, "compile", lambda f, **_: f)  # the record's shape, not inductor
    layers = [m for m in tiny_pair.target.modules() if isinstance(m, torch.nn.Linear)]
    n_layers = len(tiny_pair.target.get_decoder().layers)
    runs = compile_costs(tiny_pair, n_max=3, reps=1)
    assert [r["units"] for r in runs] == ["linears", "mlp+head"]
    assert [r["compiled_units"] for r in runs] == [len(layers), n_layers + 1]
    for r in runs:
        assert r["options"]["freezing"] is True and len(r["compiled_over_eager"]) == 3
        assert r["max_tv_compiled_vs_loaded"] == 0.0
        for variant in ("eager", "compiled"):
            assert len(r[variant]["t_target_s"]) == 3 and r[variant]["t_n_over_t_1"][0] == 1.0
    assert all("forward" not in vars(m) for m in tiny_pair.target.modules())  # as loaded


def test_compile_decoding_lever_switches_the_compiled_units_per_variant(
    tiny_pair, random_head, monkeypatch
):
    import dataclasses

    import torch

    from specdec_lib.bench import BenchSettings
    from specdec_lib.drafters import FeatureDrafter
    from specdec_lib.research import levers

    seen = []
    real_switch = levers.CompiledLinears.switch

    def switch(self, on):  # records which layers each cell ran with
        seen.append(on)
        real_switch(self, on)

    monkeypatch.setattr(torch, "compile", lambda f, **_: f)  # the plumbing, not inductor
    monkeypatch.setattr(levers.CompiledLinears, "switch", switch)
    pair = dataclasses.replace(tiny_pair, draft=FeatureDrafter(random_head))
    s = BenchSettings(
        pair="tiny-random", K=[1, 2], tree=[2], max_new_tokens=6, cost_reps=2
    ).validate()
    prompts = [{"category": "a", "text": "hello world"}, {"category": "b", "text": "abc"}]
    r = levers.compile_decoding_costs(pair, s, prompts)
    assert r["units"] == "mlp+head" and [x["K"] for x in r["by_K"]] == [1, 2]
    assert r["max_tv_compiled_vs_loaded"] == 0.0  # torch.compile stubbed: the same model
    loaded, compiled = r["results"]["as loaded"], r["results"]["compiled"]
    assert compiled["compiled"] == {"units": "mlp+head", "on": True}
    assert loaded["costs"] is not compiled["costs"]  # each variant's own pass costs
    base = {k: c for k, c in loaded["cells"].items() if k.startswith("autoregressive")}
    assert len(base) == 2 and all(compiled["cells"][k] is c for k, c in base.items())
    # the agreement check and the costs (each off, on), then before every cell: the warm-ups
    # (5 configs) and 2 prompts x 5 configs
    assert seen[:4] == [False, True, False, True] and len(seen) == 4 + 5 + 2 * 5
    assert seen.count(True) == 2 + 2 + 2 * 2
    assert all("forward" not in vars(m) for m in tiny_pair.target.modules())  # as loaded
