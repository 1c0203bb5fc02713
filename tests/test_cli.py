"""The command line (``python -m specdec_lib``): each subcommand end to end on the tiny pair, errors in one line with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specdec_lib.__main__ import main


def test_gen_data_cli(tmp_path, prompts_file, capsys):
    out = tmp_path / "cli"
    args = ["gen-data", "--pair", "tiny-random", "--dtype", "float32", "--prompts", prompts_file]
    args += ["--out", str(out), "--tokens", "30", "--batch-size", "2", "--max-new-tokens", "16"]
    assert main(args + ["--no-progress"]) == 0
    assert "generated tokens" in capsys.readouterr().out
    assert main(["gen-data", "--tokens", "0"]) == 2  # n_tokens must be a positive integer


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


def test_eval_drafter_cli(tmp_path, capsys):
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"prompts": [{"text": "abc abc"}, {"text": "hello"}]}))
    out = tmp_path / "eval.json"
    args = ["eval-drafter", "--pair", "tiny-random", "--draft", "model", "--prompts"]
    args += [str(prompts), "--temperatures", "1", "0", "--max-new-tokens", "10", "--dtype"]
    args += ["float32", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    res = json.loads(out.read_text())
    assert set(res["by_temperature"]) == {"1", "0"} and res["costs"]["c"] > 0
    assert "alpha" in capsys.readouterr().out
    assert main(args[:-3] + ["--out", str(out), "--draft", "trained"]) == 2  # tiny has none


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "specdec_lib", *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "--K", "0"],
        ["bench", "--K", "x"],
        ["bench", "--temperature", "hot"],
        ["bench", "--no-such-flag"],
        ["bench", "--prompts", "/nonexistent/prompts.json", "--pair", "tiny-random"],
        ["frobnicate"],
    ],
)
def test_cli_errors_are_one_line(args):
    r = _cli(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert len([line for line in r.stderr.splitlines() if line.strip()]) == 1, r.stderr


def test_cli_smoke(tmp_path, prompts_file):
    out = tmp_path / "cli.json"
    r = _cli(
        "bench",
        "--pair",
        "tiny-random",
        "--K",
        "1",
        "2",
        "--max-new-tokens",
        "4",
        "--prompts",
        str(prompts_file),
        "--out",
        str(out),
        "--no-progress",
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["status"] == "complete"
    assert "speculative" in r.stdout
    # --dtype auto on a CPU: timed at start-up, printed, and recorded with the run
    choice = res["dtype_choice"]
    assert f"start-up choice: {choice['dtype']}, weights {choice['pack']}: " in r.stdout
    assert res["settings"]["dtype"] == choice["dtype"] and "t_target_s" in choice


def test_bench_prints_the_tuned_trees_and_what_their_ranking_assumed(capsys):
    from specdec_lib.__main__ import _print_table

    tuned = {"by_K": {"1": {"tree": [3]}, "2": {"tree": [3, 2]}}, "pays": True}
    _print_table({"runs": [], "cells": {}, "tuned_trees": tuned})
    out = capsys.readouterr().out
    assert "trees tuned on this machine's pass costs: K = 1: (3), K = 2: (3, 2)" in out
    assert "note:" not in out
    _print_table({"runs": [], "cells": {}, "tuned_trees": tuned | {"note": "ranked as K drafts"}})
    assert "note: ranked as K drafts" in capsys.readouterr().out
