"""The GPU run (``specdec_lib.research.gpu_run``): its rehearsal as the device would run it (the
interpreter alone, ``PYTHONPATH=.``, a fresh output folder) writes its one JSON there and nothing
under ``data/``; the capped child is stopped at its cap; a step's time is read after the first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from specdec_lib.config import REPO_ROOT
from specdec_lib.research.gpu_run import (
    DRY_RUN,
    SHAPES,
    GpuRunSettings,
    generate_in_child,
    step_times,
)


def _data_files() -> dict[str, tuple[int, int]]:
    root = REPO_ROOT / "data"
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_rehearsal_as_on_the_device_writes_only_under_out(tmp_path):
    out = tmp_path / "OUT"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=".", OUT=str(out), TQDM_DISABLE="1")
    before = _data_files()
    argv = [sys.executable, "-m", "specdec_lib.research.gpu_run", "--out", str(out)]
    argv += ["--device", "cpu", "--dry-run"]
    proc = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _data_files() == before, "the run wrote under data/"
    assert sorted(p.name for p in out.rglob("*")) == ["gpu_run_cpu.json"]  # no temporary left
    res = json.loads((out / "gpu_run_cpu.json").read_text())
    assert res["complete"] and res["dry_run"] and res["device"] == "cpu"
    assert len(res["costs"]["t_target_s"]) == DRY_RUN["n_max"] and res["costs"]["t_draft_s"] > 0
    rows = res["decoder"]["rows"]
    assert {r.get("shape") for r in rows} == {None, *SHAPES}  # None: the autoregressive row
    assert all(r["step_s"] > 0 and r["tokens_per_step"] >= 1 for r in rows)
    gen = res["generate"]
    assert gen["eager_s_per_token"] > 0
    assert gen["child_eager_rehearsal"]["status"] == "measured"
    assert gen["cuda_graphs"]["status"].startswith("not run")
    prof = res["profile"]["rows"]
    assert [r["method"] for r in prof] == ["autoregressive", "speculative"]
    for r in prof:
        assert r["aten_ops_per_step"] > 0 and r["steps"] >= 1 and r["top_host_ops"]
        assert r["kernel_launches_per_step"] == 0 and r["device_busy_ms_per_step"] == 0  # CPU
    prov = res["provenance"]
    for key in ("torch", "transformers", "python", "date", "git_commit", "source_sha256"):
        assert prov[key]
    assert prov["settings"]["dry_run"] and prov["settings"]["n_max"] == DRY_RUN["n_max"]
    assert "wrote" in proc.stdout


def test_a_run_of_some_sections_writes_those_alone(tmp_path):
    from specdec_lib.research.gpu_run import run

    s = GpuRunSettings(device="cpu", dry_run=True, sections=("profile", "costs"))
    res = json.loads(json.dumps(run(s, tmp_path)))  # as written
    assert res["complete"] and "costs" in res and "profile" in res
    assert "decoder" not in res and "generate" not in res
    assert json.loads((tmp_path / "gpu_run_cpu.json").read_text())["complete"]


def test_the_child_is_stopped_at_its_cap():
    s = GpuRunSettings(device="cpu", generate_tokens=2, generate_reps=1, threads=1)
    got = generate_in_child(s, "cpu", graphs=False, cap_s=0.5)  # far less than its start-up
    assert got["status"].startswith("stopped at the cap"), got


def _result(ms: list[tuple[float, float]], tokens: int, elapsed_s: float):
    steps = [SimpleNamespace(draft_ms=d, verify_ms=v) for d, v in ms]
    return SimpleNamespace(steps=steps, tokens=list(range(tokens)), elapsed_s=elapsed_s)


def test_a_step_is_read_after_the_first():
    # the first step (the prompt's pass) takes 100 ms; three more 10 ms each, with 2 ms between
    res = _result([(0, 100), (4, 6), (3, 7), (5, 5)], tokens=6, elapsed_s=0.136)
    t = step_times(res)
    assert t["step_s"] == pytest.approx(0.012)
    assert t["draft_s"] == pytest.approx(0.004) and t["verify_s"] == pytest.approx(0.006)
    assert t["tokens_per_step"] == 1.5
    with pytest.raises(ValueError, match="at least 2 steps"):
        step_times(_result([(0, 100)], tokens=1, elapsed_s=0.1))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(device="tpu"), "device"),
        (dict(K_max=8, new_tokens=9), "new_tokens"),
        (dict(temperatures=()), "temperatures"),
        (dict(temperatures=(-1.0,)), "temperatures"),
        (dict(n_max=0), "n_max"),
        (dict(graphs_cap_s=0.0), "graphs_cap_s"),
        (dict(threads=0), "threads"),
        (dict(sections=()), "sections"),
        (dict(sections=("costs", "timing")), "sections"),
        (dict(profile_steps=0), "profile_steps"),
        (dict(gguf="/nonexistent/model.gguf"), "gguf: no file"),
    ],
)
def test_settings_refuse_bad_values(kwargs, name):
    with pytest.raises(ValueError, match=name):
        GpuRunSettings(**kwargs)


def test_dry_run_settings_are_valid_and_tiny():
    s = GpuRunSettings(dry_run=True).effective()
    assert s.K_max == 1 and s.n_max == DRY_RUN["n_max"] and s.dry_run
