"""Running a benchmark (``specdec_lib.bench.run``) on the tiny pair: structure, provenance, atomic
writes, resume after an interruption, every method and shape. No timing is asserted (speed is a
benchmark, not a test)."""

import dataclasses
import json
import statistics
import time

import pytest

from specdec_lib.bench import (
    BenchSettings,
    measure_pass_costs,
    run,
    run_benchmark,
    speculative_runs,
)
from specdec_lib.bench.analysis import model_costs
from specdec_lib.bench.passes import pass_costs_from
from specdec_lib.bench.settings import settings_record
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
    # where a step's time went, in every speculative cell and in the summary
    cell = next(c for k, c in on_disk["cells"].items() if "speculative" in k)
    assert all(cell[part] >= 0 for part in ("draft_ms", "target_ms", "host_ms"))
    shares = [spec[f"{part}_share"] for part in ("draft", "target", "host")]
    assert all(s > 0 for s in shares) and sum(shares) <= 1 + 1e-9
    assert spec["host_ms_per_step"] > 0
    # each part per step beside what the cost model charges for it (the chain: K + 1 tokens)
    assert spec["draft_ms_per_step"] > 0 and spec["target_ms_per_step"] > 0
    K, model = spec["K"], on_disk["costs_during"]  # the rounds spread among the cells
    assert spec["model_target_ms"] == model["t_target_s"][K] * 1e3
    assert spec["model_draft_ms"] == model["t_draft_by_k_s"][K - 1] * 1e3
    # the host's work of a step at each K of the run, and the baseline's draw, charged
    assert set(model["t_host_s"]) == {"0", "1", "2"}
    assert spec["model_host_ms"] == pytest.approx(model["t_host_s"][str(K)] * 1e3)
    assert on_disk["settings"]["tree"] == [1] and on_disk["settings"]["width"] == 1  # the chain
    assert len(on_disk["costs"]["t_target_s"]) == 2 + 1  # a pass over K + 1 tokens
    assert len(on_disk["costs"]["t_draft_by_k_s"]) == 2  # every draft length of the run
    # the prompt's pass, the cell's fixed cost, on both sides; a model draft drafts at the first
    # step already, so the prediction for the run's own cells (a feature draft's) is not made
    assert all(c["prefill_ms"] > 0 for k, c in on_disk["cells"].items() if "hf_" not in k)
    assert "predicted_speedup_cells" not in spec


def test_pass_costs_are_timed_again_among_the_cells(tmp_path, prompts_file, tiny_pair):
    """With cost_timing="spread" (the default), cost_reps rounds of pass timing run between the
    cells, and the cost model reads them; the cells' tokens are those of a run without them."""
    spread = run_benchmark(
        _settings(prompts_file, cost_reps=3), tmp_path / "s.json", progress=False, pair=tiny_pair
    )
    start = run_benchmark(
        _settings(prompts_file, cost_reps=3, cost_timing="start"),
        tmp_path / "t.json",
        progress=False,
        pair=tiny_pair,
    )
    assert len(spread["cost_rounds"]) == 3
    assert all(
        len(r["t_target_s"]) == 3 and len(r["t_draft_by_k_s"]) == 2 for r in spread["cost_rounds"]
    )
    during = spread["costs_during"]
    assert during["reps"] == 3 and during["context"] == spread["costs"]["context"]
    assert during["t_target_s"] == pass_costs_from(spread["cost_rounds"])["t_target_s"]
    assert model_costs(spread) is during and model_costs(start) is start["costs"]
    assert "cost_rounds" not in start and "costs_during" not in start
    for key, cell in start["cells"].items():  # the rounds change no cell's tokens
        assert spread["cells"][key]["tokens"] == cell["tokens"]
    spec = next(r for r in spread["runs"] if r["method"] == "speculative" and r["K"] == 2)
    assert spec["model_target_ms"] == during["t_target_s"][2] * 1e3
    with pytest.raises(ValueError, match="cost_timing"):
        _settings(prompts_file, cost_timing="never").validate()


def test_pass_costs_from_rounds_are_medians_relative_to_each_rounds_level():
    rounds = [
        {"t_target_s": [1.0, 2.0], "t_draft_by_k_s": [0.1, 0.3]},
        {"t_target_s": [3.0, 2.5], "t_draft_by_k_s": [0.2, 0.25]},
        {"t_target_s": [2.0, 9.0], "t_draft_by_k_s": [0.9, 0.2]},
    ]
    costs = pass_costs_from(rounds)
    # each pass against its median over the rounds (2, 2.5, 0.2, 0.25), the rounds' levels: round 0 median(0.5, 0.8, 0.5, 1.2) = 0.65; round 1 median(1.5, 1, 1, 1) = 1;
    # round 2 median(1, 3.6, 4.5, 0.8) = 2.3
    levels = [0.65, 1.0, 2.3]
    expect = [
        statistics.median(r["t_target_s"][i] / lv for r, lv in zip(rounds, levels, strict=True))
        for i in range(2)
    ]
    assert costs["t_target_s"] == pytest.approx(expect)
    assert costs["c"] == pytest.approx(costs["t_draft_s"] / costs["t_target_s"][0])
    assert costs["t_draft_next_s"] == max(0.0, costs["t_draft_by_k_s"][1] - costs["t_draft_s"])
    # a round the machine ran slow as a whole moves no cost
    slow = {f: [3 * t for t in v] for f, v in rounds[1].items()}
    again = pass_costs_from(rounds + [rounds[1], slow])
    assert again["t_target_s"] == pytest.approx(
        pass_costs_from(rounds + [rounds[1]] * 2)["t_target_s"]
    )
    even = [{"t_target_s": [1.0, 1.2], "t_draft_by_k_s": [0.1, 0.15]}] * 3
    assert pass_costs_from(even)["t_target_s"] == pytest.approx([1.0, 1.2])
    assert "t_host_s" not in costs and "host_timed" not in costs
    # a step's host work, where the rounds time it, relative to the passes' level alike
    hosts = [{"0": 0.02, "2": 0.05}, {"0": 0.03, "2": 0.04}, {"0": 0.05, "2": 0.2}]
    timed = pass_costs_from([r | {"t_host_s": h} for r, h in zip(rounds, hosts, strict=True)])
    assert timed["t_host_s"]["2"] == pytest.approx(
        statistics.median(h["2"] / lv for h, lv in zip(hosts, levels, strict=True))
    )
    assert timed["t_target_s"] == costs["t_target_s"]  # the passes' costs as without
    with pytest.raises(ValueError, match="rounds"):
        pass_costs_from([])


def test_benchmark_with_width(tmp_path, prompts_file, tiny_pair):
    s = _settings(prompts_file, width=3, methods=["autoregressive", "speculative"])
    res = run_benchmark(s, tmp_path / "w.json", progress=False, pair=tiny_pair)
    assert res["settings"]["tree"] == [3] and res["settings"]["width"] == 3  # a spelling of (3,)
    assert len(res["costs"]["t_target_s"]) == 2 + 3  # the pass over K + width tokens
    spec = {r["K"]: r for r in res["runs"] if r["method"] == "speculative"}
    assert set(spec) == {1, 2} and all(r["predicted_speedup"] > 0 for r in spec.values())
    assert all("tree_rates" in r for r in spec.values())  # its own model, at the rates by depth
    same = _settings(prompts_file, tree=[3], methods=["autoregressive", "speculative"]).validate()
    assert settings_record(same) == settings_record(s)  # the same run, however spelled


def test_benchmark_with_a_tree(tmp_path, prompts_file, tiny_pair):
    s = _settings(prompts_file, tree=[3, 2], methods=["autoregressive", "speculative"])
    res = run_benchmark(s, tmp_path / "t.json", progress=False, pair=tiny_pair)
    assert res["settings"]["tree"] == [3, 2] and res["settings"]["width"] == 1
    assert len(res["costs"]["t_target_s"]) == 1 + 3 + 2  # the last token and every node at K = 2
    cells = [c for k, c in res["cells"].items() if k.startswith("speculative")]
    assert all(len(c["alt_index"]) == len(c["steps"]) for c in cells)
    spec = {r["K"]: r for r in res["runs"] if r["method"] == "speculative"}
    assert all(r["predicted_speedup_from_tau"] > 0 for r in spec.values())
    side = speculative_runs({("T = 1", "tree"): tmp_path / "t.json"})
    assert side.K.tolist() == [1, 2] and set(side.config) == {"tree"}
    assert (side.speedup_low <= side.speedup_high).all()


def test_interrupted_run_resumes(tmp_path, prompts_file, tiny_pair, monkeypatch):
    out = tmp_path / "b.json"
    real_write = run.atomic_write_json
    calls = {"n": 0}

    def flaky_write(path, obj):
        calls["n"] += 1
        if calls["n"] == 5:  # costs + 3 cells written, then "killed"
            raise KeyboardInterrupt
        return real_write(path, obj)

    monkeypatch.setattr(run, "atomic_write_json", flaky_write)
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(_settings(prompts_file), out, progress=False, pair=tiny_pair)
    partial = json.loads(out.read_text())  # never truncated: the last complete write
    assert partial["status"] == "partial" and len(partial["cells"]) == 3
    monkeypatch.setattr(run, "atomic_write_json", real_write)
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


def test_hf_assisted_uses_the_requested_K(prompts_file, tiny_pair):
    """transformers reads K from the assistant's generation_config: the harness must set it there
    (constant schedule, no confidence threshold) and restore it afterwards."""
    calls = {"n": 0}
    hook = tiny_pair.draft.register_forward_hook(lambda *a: calls.__setitem__("n", calls["n"] + 1))
    try:
        settings = _settings(prompts_file, K=[1, 4], max_new_tokens=40).validate()
        runner = run.CellRunner(tiny_pair, settings)
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
    # the pass-cost rounds among the cells share the drafter's object and change no token
    assert len(res["cost_rounds"]) == 2
    s_start = dataclasses.replace(s, cost_timing="start", methods=["autoregressive", "speculative"])
    start = run_benchmark(s_start, tmp_path / "s.json", progress=False, pair=pair)
    for key, cell in start["cells"].items():
        assert res["cells"][key]["tokens"] == cell["tokens"]


def test_pass_costs_time_each_proposal_after_a_target_pass(monkeypatch, tiny_pair):
    """A draft proposal is timed as decoding runs it: right after a target pass, which has
    evicted the draft's weights from the caches (timed warm, a draft looks cheaper)."""
    from specdec_lib.bench import passes

    calls: list[str] = []
    target_pass, as_drafter = passes.PassTimer._target_pass, passes.as_drafter

    def logged_pass(timer, n, *args, **kw):
        calls.append(f"target {n}")
        return target_pass(timer, n, *args, **kw)

    def logged_drafter(draft):
        drafter = as_drafter(draft)
        propose = drafter.propose

        def logged_propose(*args, **kw):
            calls.append("draft")
            return propose(*args, **kw)

        drafter.propose = logged_propose
        return drafter

    class LoggedClock:
        @staticmethod
        def perf_counter():
            calls.append("clock")
            return time.perf_counter()

    monkeypatch.setattr(passes.PassTimer, "_target_pass", logged_pass)
    monkeypatch.setattr(passes, "as_drafter", logged_drafter)
    monkeypatch.setattr(passes, "time", LoggedClock)
    costs = measure_pass_costs(tiny_pair, 2, k_max=3, context=8, reps=3)
    drafts = [i for i, c in enumerate(calls) if c == "draft"]
    clocks = [i for i, c in enumerate(calls) if c == "clock"]  # a start and a stop, each timing
    spans = list(zip(clocks[::2], clocks[1::2], strict=True))
    timed = [i for start, stop in spans for i in drafts if start < i < stop]
    # every proposal length, every round (warm-up included), right after a target pass
    assert len(timed) == 3 * (3 + 2) and all(calls[i - 2] == "target 1" for i in timed)
    # a pass over two tokens (which checks a draft), right after a proposal
    checks = [start + 1 for start, _ in spans if calls[start + 1] == "target 2"]
    assert len(checks) == 3 + 2 and all(calls[i - 2] == "draft" for i in checks)
    # and one untimed proposal a round, which runs the draft over the context first
    assert len(drafts) - len(timed) - len(checks) == 3 + 2
    assert costs["target_timed"] == "after a draft proposal (n > 1)"
    assert costs["draft_timed"] == "after a target pass"
    by_k = costs["t_draft_by_k_s"]
    assert len(by_k) == 3 and costs["t_draft_s"] == by_k[0]
    assert costs["t_draft_next_s"] == max(0.0, by_k[1] - by_k[0])


def test_pass_costs_time_target_passes_with_the_tree_and_hooks_decoding_uses(
    monkeypatch, tiny_pair, random_head
):
    """A timed pass that checks drafts runs as decoding runs it: with the mask of the run's tree
    of that size (the chain elsewhere) and the drafter's feature hooks; the baseline's one-token
    pass, the plain model. Each leaves the timer's cache at the context."""
    from specdec_lib.bench import passes
    from specdec_lib.decoding import TargetState

    pair = dataclasses.replace(tiny_pair, draft=FeatureDrafter(random_head))
    seen: list[tuple[int, list[int], bool]] = []
    forward_tree = TargetState.forward_tree

    def logged(state, seq, tokens, parents):
        seen.append((tokens.numel() + 1, list(parents), state.feature_sink is not None))
        return forward_tree(state, seq, tokens, parents)

    monkeypatch.setattr(TargetState, "forward_tree", logged)
    tree = [-1, -1, 0]  # two candidates at depth 1, the chain's second token under the first
    timer = passes.PassTimer(pair, 4, k_max=2, context=8, shapes={4: tree})
    times = timer.round()
    assert len(times["t_target_s"]) == 4 and all(t > 0 for t in times["t_target_s"])
    timed = {n: parents for n, parents, _ in seen}
    assert timed == {2: [-1], 3: [-1, 0], 4: tree} and all(hooks for *_, hooks in seen)
    assert timer.state.length == timer.state.cache.get_seq_length() == 8
    assert timer.describe() == {
        "target_trees": {"4": tree},
        "target_features": True,
        "draft_warp": "T=1",
    }
    with pytest.raises(ValueError, match=r"shapes\[3\]"):
        passes.PassTimer(pair, 4, shapes={3: [-1]})
    with pytest.raises(ValueError, match="parent"):
        passes.PassTimer(pair, 4, shapes={3: [-1, 1]})
    # a model draft reads no features: its passes capture none
    plain = passes.PassTimer(tiny_pair, 2, context=8)
    assert plain.describe()["target_trees"] == {} and not plain.describe()["target_features"]


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_pass_costs_time_a_steps_host_work_as_decoding_does_it(
    monkeypatch, tiny_pair, random_head, temperature
):
    """With the run's trees, a round times each K's host work as a step does it: the tree around
    a proposal of K tokens, then (untimed) the target's pass over it, then its verification and
    the kept path; and the baseline's draw after its pass (K = 0). Both states end at the
    context."""
    from specdec_lib.bench import passes
    from specdec_lib.decoding import AutoregressiveDecoder, SpeculativeDecoder, TargetState
    from specdec_lib.sampling import Warp

    pair = dataclasses.replace(tiny_pair, draft=FeatureDrafter(random_head))
    calls: list[str] = []

    def logged(cls, name, label):
        original = getattr(cls, name)

        def call(self, *args, **kw):
            calls.append(label(self, *args) if callable(label) else label)
            return original(self, *args, **kw)

        monkeypatch.setattr(cls, name, call)

    logged(
        SpeculativeDecoder, "tree_around", lambda dec, d_tokens, *_: f"tree {dec.K} {len(d_tokens)}"
    )
    logged(TargetState, "forward_tree", "pass")
    logged(SpeculativeDecoder, "judge", "judge")
    logged(SpeculativeDecoder, "keep_path", "keep")
    logged(AutoregressiveDecoder, "next_token", "draw")
    trees = {1: (2,), 2: (2, 2)}
    timer = passes.PassTimer(pair, 6, k_max=2, context=8, warp=Warp(temperature), trees=trees)
    times = timer.round()
    assert set(times["t_host_s"]) == {"0", "1", "2"} and all(
        t > 0 for t in times["t_host_s"].values()
    )
    for K in (1, 2):  # each step's host work around its (untimed) target pass
        i = calls.index(f"tree {K} {K}")
        assert calls[i + 1 : i + 4] == ["pass", "judge", "keep"]
    assert calls.count("draw") == 1
    assert timer.state.length == timer.state.cache.get_seq_length() == 8
    assert timer.drafter._done <= 7  # the drafter back at the context
    assert timer.describe()["host_trees"] == {"1": [2], "2": [2, 2]}
    assert "t_host_s" not in passes.PassTimer(pair, 2, context=8).round()  # no trees, no host
    with pytest.raises(ValueError, match="trees"):
        passes.PassTimer(pair, 2, context=8, trees={0: (2,)})


def test_a_run_times_its_passes_at_its_mean_context(tmp_path, prompts_file, tiny_pair):
    from specdec_lib.bench.run import timing_context

    s = _settings(prompts_file, max_new_tokens=10)
    assert timing_context(s, [4, 8]) == 11  # the prompts' mean and half the new tokens
    assert timing_context(dataclasses.replace(s, cost_context=32), [4, 8]) == 32
    with pytest.raises(ValueError, match="prompt_lengths"):
        timing_context(s, [])
    with pytest.raises(ValueError, match="cost_context"):
        dataclasses.replace(s, cost_context=0).validate()
    res = run_benchmark(s, tmp_path / "c.json", progress=False, pair=tiny_pair)
    tok = tiny_pair.tokenizer
    lengths = [tok(p["text"], return_tensors="pt").input_ids.shape[-1] for p in res["prompts"]]
    assert res["costs"]["context"] == res["costs_during"]["context"] == timing_context(s, lengths)
    assert res["settings"]["cost_context"] is None


def test_a_run_times_each_pass_with_its_own_tree(tmp_path, prompts_file, tiny_pair):
    from specdec_lib.bench.run import pass_shapes

    assert pass_shapes({1: (4, 3), 2: (4, 3), 3: (1,)}) == {
        5: [-1, -1, -1, -1],
        8: [-1, 0, -1, -1, -1, 0, 0],
    }
    s = _settings(prompts_file, K=[1, 2], tree=(2,), methods=["autoregressive", "speculative"])
    res = run_benchmark(s, tmp_path / "t.json", progress=False, pair=tiny_pair)
    trees = {"3": [-1, -1], "4": [-1, 0, -1]}
    assert res["costs"]["target_trees"] == res["costs_during"]["target_trees"] == trees
    assert res["costs_during"]["target_features"] is False
    assert res["costs_during"]["draft_warp"] == s.warp.describe()


@pytest.mark.parametrize("schedule", ["heuristic", "threshold"])
def test_bench_dynamic_schedules(tmp_path, tiny_pair, schedule):
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


def test_a_tuned_run_runs_each_K_with_the_tree_chosen_for_it(
    tmp_path, prompts_file, tiny_pair, random_head, monkeypatch
):
    from specdec_lib.bench import settings as bench_settings
    from specdec_lib.research.speed import tuning

    monkeypatch.setattr(bench_settings, "TRAINED_DRAFTS", ("model",))  # the tiny pair's head
    pair = dataclasses.replace(
        tiny_pair, draft=FeatureDrafter(random_head), notes={"head_sha256": "abc"}
    )
    rates = {"beta": [0.5, 0.4], "gamma": [[0.0, 0.3, 0.4], [0.0, 0.2, 0.25]], "widths": [3, 3]}
    record = {"pair": {"draft": "tiny", "head_sha256": "abc"}, "by_temperature": {}}
    record["by_temperature"]["1"] = {"tree_rates": rates}
    path = tmp_path / "head.tree_rates.json"
    path.write_text(json.dumps(record))
    monkeypatch.setattr(tuning, "tree_rates_path", lambda head: path)
    s = _settings(prompts_file, draft="model", tune_tree=True)
    res = run_benchmark(s, tmp_path / "tuned.json", progress=False, pair=pair)
    tuned = res["tuned_trees"]
    assert tuned["rates"]["temperature"] == 1.0 and tuned["rates"]["head_sha256"] == "abc"
    for r in [r for r in res["runs"] if r["method"] == "speculative"]:  # a feature draft's cells
        assert r["predicted_speedup_cells"] > 0
        assert r["efficiency_cells"] == pytest.approx(r["speedup"] / r["predicted_speedup_cells"])
    assert len(res["costs"]["t_target_s"]) == tuning.pass_tokens(2)
    for r in [r for r in res["runs"] if r["method"] == "speculative"]:
        assert r["tree"] == tuned["by_K"][str(r["K"])]["tree"]
        widths = r["tree"] + [1] * r["K"]
        for key, cell in res["cells"].items():
            if key.startswith(f"speculative|{r['K']}|"):  # no step drafts more than its tree
                assert all(d <= sum(widths[: r["K"]]) for d, _, _ in cell["steps"])
    # greedy decoding needs greedy rates; other head weights are refused
    with pytest.raises(ValueError, match="no tree rates in greedy decoding"):
        run_benchmark(
            _settings(prompts_file, draft="model", tune_tree=True, temperature=0.0),
            tmp_path / "g.json",
            progress=False,
            pair=pair,
        )
    other = dataclasses.replace(pair, notes={"head_sha256": "def"})
    with pytest.raises(ValueError, match="rates of head abc"):
        run_benchmark(s, tmp_path / "o.json", progress=False, pair=other)
