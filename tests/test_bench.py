"""The benchmark harness and CLI on the tiny pair: structure, provenance, atomic writes, resume
after an interruption, and one-line errors. No timing is asserted (speed is a benchmark, not a test)."""

import json
import math

import numpy as np
import pytest

from specdec_lib import bench
from specdec_lib.bench import BenchSettings, run_benchmark
from specdec_lib.drafters.feature import FeatureDrafter

PROMPTS = {"prompts": [{"category": "a", "text": "hello world"}, {"category": "b", "text": "abc"}]}


@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(PROMPTS))
    return path


def _settings(prompts_file, **kw):
    base = dict(
        pair="tiny-random", K=[1, 2], max_new_tokens=6, prompts=str(prompts_file), cost_reps=2
    )
    base.update(kw)
    return BenchSettings(**base)


def test_benchmark_structure(tmp_path, prompts_file, tiny_pair):
    out = tmp_path / "b.json"
    res = run_benchmark(_settings(prompts_file), out, progress=False, pair=tiny_pair)
    on_disk = json.loads(out.read_text())
    assert on_disk["status"] == "complete"
    prov = on_disk["provenance"]
    for key in ("device", "cpu", "torch", "transformers", "git_commit", "date", "seed", "settings"):
        assert key in prov
    assert prov["allocator"] == bench.reuse_freed_memory()  # glibc here: what was set, else why not
    assert prov["allocator"].startswith(("glibc mallopt", "unchanged"))
    runs = {(r["method"], r["K"]): r for r in res["runs"]}
    assert set(runs) == {
        ("autoregressive", 0),
        ("hf_autoregressive", 0),
        ("speculative", 1),
        ("speculative", 2),
        ("hf_assisted", 1),
        ("hf_assisted", 2),
    }
    for r in res["runs"]:
        for key in ("tokens_per_s", "speedup", "latency_p50_ms", "latency_p95_ms", "per_prompt"):
            assert key in r
        assert r["tokens"] == 2 * 6  # fixed length: 2 prompts x 6 tokens
    assert runs[("autoregressive", 0)]["speedup"] == pytest.approx(1.0)
    spec = runs[("speculative", 2)]
    assert 0 <= spec["alpha"] <= 1 and spec["tau"] >= 1 and spec["predicted_speedup"] > 0
    assert len(on_disk["costs"]["t_target_s"]) == 2 + on_disk["settings"]["width"]  # K + width


def test_benchmark_with_width(tmp_path, prompts_file, tiny_pair):
    s = _settings(prompts_file, width=3, methods=["autoregressive", "speculative"])
    res = run_benchmark(s, tmp_path / "w.json", progress=False, pair=tiny_pair)
    assert res["settings"]["width"] == 3
    assert len(res["costs"]["t_target_s"]) == 2 + 3  # the pass over K + width tokens
    spec = {r["K"]: r for r in res["runs"] if r["method"] == "speculative"}
    assert set(spec) == {1, 2} and all(r["predicted_speedup"] > 0 for r in spec.values())


def test_benchmark_with_a_tree(tmp_path, prompts_file, tiny_pair):
    s = _settings(prompts_file, tree=[3, 2], methods=["autoregressive", "speculative"])
    res = run_benchmark(s, tmp_path / "t.json", progress=False, pair=tiny_pair)
    assert res["settings"]["tree"] == [3, 2] and res["settings"]["width"] == 1
    assert len(res["costs"]["t_target_s"]) == 1 + 3 + 2  # the last token and every node at K = 2
    cells = [c for k, c in res["cells"].items() if k.startswith("speculative")]
    assert all(len(c["alt_index"]) == len(c["steps"]) for c in cells)
    spec = {r["K"]: r for r in res["runs"] if r["method"] == "speculative"}
    assert all(r["predicted_speedup_from_tau"] > 0 for r in spec.values())
    assert bench.drafted_tokens(1, tree=[3, 2]) == 3 and bench.drafted_tokens(4, tree=[3, 2]) == 7
    side = bench.speculative_runs({("T = 1", "tree"): tmp_path / "t.json"})
    assert side.K.tolist() == [1, 2] and set(side.config) == {"tree"}
    assert (side.speedup_low <= side.speedup_high).all()


def test_tree_rates_and_the_shape_chosen_by_the_cost_model():
    # steps of a tree [3, 3] at K = 2: (drafted, accepted, emitted) and the alternative kept
    steps = [[2, 2, []], [2, 1, []], [2, 1, []], [2, 0, []], [2, 2, []], [1, 0, []]]
    alt_index = [0, 0, 2, 0, 1, 0]
    r = bench.tree_rates([{"steps": steps, "alt_index": alt_index}], K=2, width=3)
    # depth 1: 5 steps reach it, the chain's token is kept in 3 (steps 0, 1, 4); of the 2
    # rejections one keeps alternative 2 (step 2), none keeps alternative 1 first
    assert r["reached"] == [5, 3] and r["chain_accepted"] == [3, 1]
    assert r["chain_rejected"] == [2, 2] and r["alternative_kept"] == [[0, 1, 0], [1, 0, 0]]
    np.testing.assert_allclose(r["gamma"], [[0, 0, 0.5], [0, 0.5, 0.5]])
    costs = {"t_draft_s": 0.1, "t_target_s": [1.0, 1.0, 1.1, 1.2, 1.3, 1.5, 2.0]}
    ranked = bench.best_trees(r, costs)
    assert (
        len(ranked) == 3 + 9 and ranked[0]["predicted_speedup"] >= ranked[-1]["predicted_speedup"]
    )
    top = ranked[0]
    assert math.isclose(
        top["predicted_speedup"],
        top["tokens_per_step"] / bench.step_cost(top["K"], costs, tree=top["tree"]),
    )
    assert all(t["drafted"] <= 3 for t in bench.best_trees(r, costs, max_tokens=3))


def test_tree_ceiling_is_the_best_tree_over_its_costs():
    steps = [[2, 2, []], [2, 1, []], [2, 1, []], [2, 0, []], [2, 2, []], [2, 0, []]]
    alt_index = [0, 0, 2, 0, 1, 1]
    r = bench.tree_rates([{"steps": steps, "alt_index": alt_index}], K=2, width=3)
    m = bench.rank_rates(r)
    for d in range(2):  # the ranks add up to the depth's acceptance with every candidate
        assert m[d][0] == r["beta"][d]
        assert math.isclose(sum(m[d]), r["beta"][d] + (1 - r["beta"][d]) * r["gamma"][d][-1])
    costs = {"t_draft_s": 0.1, "t_target_s": [1.0, 1.0, 1.1, 1.2, 1.3, 1.5, 2.0]}
    ceiling = bench.tree_ceiling(r, costs)
    assert [c["nodes"] for c in ceiling] == [1, 2, 3, 4, 5, 6]
    for c in ceiling:
        assert len(c["parents"]) == c["nodes"]
        assert math.isclose(c["predicted_speedup"], c["tokens_per_step"] / c["step_cost"])
    # no chain tree of the same size yields more tokens per step
    for t in bench.best_trees(r, costs):
        assert ceiling[t["drafted"] - 1]["tokens_per_step"] >= t["tokens_per_step"] - 1e-12
    assert len(bench.tree_ceiling(r, costs, max_nodes=2)) == 2
    noisy = {"t_draft_s": 0.1, "t_target_s": [1.0, 1.2, 1.1, 1.3]}
    smooth = bench.monotone_costs(noisy)
    np.testing.assert_allclose(smooth["t_target_s"], [1.0, 1.15, 1.15, 1.3])
    assert smooth["t_draft_s"] == 0.1 and bench.monotone_costs(costs) == costs
    with pytest.raises(ValueError, match="max_nodes"):
        bench.tree_ceiling(r, costs, max_nodes=7)


def test_greedy_baselines_agree_token_for_token(tmp_path, prompts_file, tiny_pair):
    s = _settings(
        prompts_file,
        K=[1],
        temperature=0.0,
        methods=["autoregressive", "autoregressive_inverse_cdf"],
    )
    res = run_benchmark(s, tmp_path / "g.json", progress=False, pair=tiny_pair)
    runs = {r["method"]: r for r in res["runs"]}
    assert runs["autoregressive_inverse_cdf"]["identical_to_autoregressive"] == 1.0
    assert "autoregressive_inverse_cdf" not in BenchSettings().methods  # only when asked for


def test_interrupted_run_resumes(tmp_path, prompts_file, tiny_pair, monkeypatch):
    out = tmp_path / "b.json"
    real_write = bench.atomic_write_json
    calls = {"n": 0}

    def flaky_write(path, obj):
        calls["n"] += 1
        if calls["n"] == 5:  # costs + 3 cells written, then "killed"
            raise KeyboardInterrupt
        return real_write(path, obj)

    monkeypatch.setattr(bench, "atomic_write_json", flaky_write)
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(_settings(prompts_file), out, progress=False, pair=tiny_pair)
    partial = json.loads(out.read_text())  # never truncated: the last complete write
    assert partial["status"] == "partial" and len(partial["cells"]) == 3
    monkeypatch.setattr(bench, "atomic_write_json", real_write)
    final = run_benchmark(_settings(prompts_file), out, progress=False, pair=tiny_pair)
    assert final["status"] == "complete" and len(final["cells"]) == 12
    for key, cell in partial["cells"].items():  # finished cells were kept, not re-measured
        assert final["cells"][key] == cell
    assert len(final["sessions"]) == 2


def test_other_settings_refused(tmp_path, prompts_file, tiny_pair):
    out = tmp_path / "b.json"
    run_benchmark(_settings(prompts_file), out, progress=False, pair=tiny_pair)
    with pytest.raises(ValueError, match="other settings"):
        run_benchmark(
            _settings(prompts_file, max_new_tokens=7), out, progress=False, pair=tiny_pair
        )


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
        (dict(pair="tiny-random", draft="early-exit"), "draft"),  # not a draft of that pair
        (dict(draft="early-exit", head="data/drafter/feature_head.safetensors"), "head"),
        (dict(head="/nonexistent/head.safetensors"), "head"),
        (dict(methods=["autoregressive", "autoregressive_inverse_cdf"]), "temperature 0"),
    ],
)
def test_bad_settings(settings, name):
    with pytest.raises(ValueError, match=name):
        BenchSettings(**settings).validate()


def test_hf_assisted_uses_the_requested_K(prompts_file, tiny_pair):
    """transformers reads K from the assistant's generation_config: the harness must set it there
    (constant schedule, no confidence threshold) and restore it afterwards."""
    calls = {"n": 0}
    hook = tiny_pair.draft.register_forward_hook(lambda *a: calls.__setitem__("n", calls["n"] + 1))
    try:
        settings = _settings(prompts_file, K=[1, 4], max_new_tokens=40).validate()
        runner = bench._Runner(tiny_pair, settings)
        ids = tiny_pair.tokenizer("abc", return_tensors="pt").input_ids[0]
        before = dict(vars(tiny_pair.draft.generation_config))
        counts = {}
        for K in (1, 4):
            calls["n"] = 0
            runner.run("hf_assisted", K, ids, seed=0)
            counts[K] = calls["n"]
        assert dict(vars(tiny_pair.draft.generation_config)) == before
    finally:
        hook.remove()
    # 40 tokens with K drafts per step (the tiny draft is rarely right): about 40 K draft passes.
    assert counts[4] > 2.5 * counts[1], counts


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
        draft="model",
    )
    res = run_benchmark(s, tmp_path / "r.json", progress=False, pair=pair)
    spec = [r for r in res["runs"] if r["method"] == "speculative"]
    assert len(spec) == 2 and all(r["alpha"] is not None for r in spec)


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


def test_device_and_dtype_resolved_and_recorded(monkeypatch):
    import torch

    monkeypatch.setattr(bench, "native_bfloat16", lambda device: device == "cuda")
    s = BenchSettings(pair="tiny-random").validate()
    assert (s.device, s.dtype) == ("cpu", "float32")  # auto: a CPU without bf16 instructions
    monkeypatch.setattr(bench, "native_bfloat16", lambda device: True)
    assert BenchSettings(pair="tiny-random").validate().dtype == "bfloat16"  # one with them
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    s = BenchSettings(pair="tiny-random").validate()
    assert (s.device, s.dtype) == ("cuda", "bfloat16")  # auto: bf16 on a GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="device='cuda' but torch sees no CUDA device"):
        BenchSettings(pair="tiny-random", device="cuda").validate()


def test_defaults_are_the_fastest_configuration_measured(monkeypatch):
    monkeypatch.setattr(bench, "native_bfloat16", lambda device: True)
    s = BenchSettings().validate()
    assert (s.draft, s.width, s.tree, s.dtype) == (
        "trained-int8",
        1,
        list(bench.FASTEST_TREE),
        "bfloat16",
    )
    monkeypatch.setattr(bench, "native_bfloat16", lambda device: False)
    s = BenchSettings().validate()  # int8 weights run only in bfloat16 on a CPU
    assert (s.draft, s.width, s.tree, s.dtype) == (
        "trained",
        1,
        list(bench.FASTEST_TREE),
        "float32",
    )
    s = BenchSettings(pair="tiny-random").validate()
    assert (s.draft, s.width, s.tree) == ("model", 2, None)
    # a shape given is kept: a width alone is the chain, a tree alone has width 1
    assert (BenchSettings(width=3).validate().tree, BenchSettings(width=3).validate().width) == (
        None,
        3,
    )
    assert BenchSettings(tree=[2, 2]).validate().width == 1
    with pytest.raises(ValueError, match="either width"):
        BenchSettings(width=2, tree=[2, 2]).validate()


def test_identical_outputs_counts_cells_equal_to_the_baseline():
    from specdec_lib.bench import identical_outputs

    result = {
        "settings": {"temperature": 0},
        "cells": {
            "autoregressive|0|0|0": {"tokens": [1, 2, 3]},
            "autoregressive|0|1|0": {"tokens": [4, 5, 6]},
            "speculative|2|0|0": {"tokens": [1, 2, 3]},
            "speculative|2|1|0": {"tokens": [4, 7, 6]},
        },
    }
    got = identical_outputs(result)[("speculative", 2)]
    assert got == {"cells": 2, "identical": 1, "first_divergence": [1], "fraction": 0.5}
    assert identical_outputs({**result, "settings": {"temperature": 1.0}}) == {}


def test_speedup_interval_brackets_the_pooled_speedup():
    from specdec_lib.bench import speedup_interval

    rng = np.random.default_rng(0)
    cells = {}
    for p in range(12):
        base = rng.uniform(0.8, 1.2)
        cells[f"autoregressive|0|{p}|0"] = {"tokens": [0] * 20, "elapsed_s": 2.0 * base}
        cells[f"speculative|2|{p}|0"] = {"tokens": [0] * 20, "elapsed_s": 1.6 * base}
    low, high = speedup_interval({"cells": cells}, "speculative", 2, n_resamples=500)
    assert low <= 1.25 <= high and high - low < 1e-6  # the same ratio on every prompt
    cells["speculative|2|0|0"]["elapsed_s"] = 4.0  # one slow prompt widens the interval
    low, high = speedup_interval({"cells": cells}, "speculative", 2, n_resamples=500)
    assert low < high
    with pytest.raises(ValueError, match="two prompts"):
        speedup_interval({"cells": cells}, "speculative", 3)
    # against another K = 0 method: a baseline 1.25x slower than the first
    for p in range(12):
        slower = 1.25 * cells[f"autoregressive|0|{p}|0"]["elapsed_s"]
        cells[f"slow|0|{p}|0"] = {"tokens": [0] * 20, "elapsed_s": slower}
    low, high = speedup_interval({"cells": cells}, "autoregressive", 0, baseline="slow")
    assert low <= 1.25 <= high and high - low < 1e-6
    with pytest.raises(ValueError, match="'slow'"):
        speedup_interval({"cells": cells}, "slow", 0, baseline="slow")


def test_pool_repeats_merges_runs_under_distinct_repeats():
    from specdec_lib.bench import pool_repeats, runs_frame

    def run(seed, slow):
        cells = {}
        for p in range(3):
            for rep in range(2):
                cells[f"autoregressive|0|{p}|{rep}"] = {"tokens": [0] * 10, "elapsed_s": 1.0}
                cells[f"speculative|1|{p}|{rep}"] = {
                    "tokens": [0] * 10,
                    "elapsed_s": slow,
                    "n_proposed": 5,
                    "n_accepted": 3,
                    "n_steps": 6,
                    "steps": [[1, 1, 2]] * 3 + [[1, 0, 1]] * 2,
                    "draft_ms": 1.0,
                }
        settings = {"seed": seed, "repeats": 2, "width": 1, "temperature": 1.0, "K": [1]}
        prompts = [{"category": "x"}] * 3
        return {"settings": settings, "prompts": prompts, "cells": cells}

    pooled = pool_repeats([run(0, 0.5), run(1, 1.0)])
    assert len(pooled["cells"]) == 24 and pooled["settings"]["repeats"] == 4
    spec = runs_frame(pooled).set_index("method").loc["speculative"]
    assert spec.speedup == pytest.approx(60 / 4.5 / (60 / 6.0))  # pooled tokens/s over pooled
    with pytest.raises(ValueError, match="share their settings"):
        pool_repeats(
            [run(0, 0.5), {**run(1, 1.0), "settings": {**run(1, 1.0)["settings"], "width": 2}}]
        )


def test_stop_at_eos_ends_cells_at_the_end_of_sequence(tmp_path, prompts_file, tiny_pair):
    eos = tiny_pair.target.config.eos_token_id
    settings = _settings(
        prompts_file, max_new_tokens=40, stop_at_eos=True, methods=["autoregressive", "speculative"]
    )
    res = run_benchmark(settings, tmp_path / "eos.json", progress=False, pair=tiny_pair)
    cells = res["cells"].values()
    assert all(eos not in c["tokens"][:-1] for c in cells)  # nothing generated past an EOS
    assert any(len(c["tokens"]) < 40 and c["tokens"][-1] == eos for c in cells)
    assert res["settings"]["stop_at_eos"] is True
