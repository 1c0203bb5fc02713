"""One campaign: every number the series cites, measured in one invocation, on one machine, from one
committed tree (``python -m specdec_lib campaign``, ``make bench``). The plan is ``campaign.toml``
beside this module; each run is a fresh ``python -m specdec_lib`` process."""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bench.analysis import run_tree
from ..config import REPO_ROOT
from ..results import (
    atomic_write_json,
    check_same_machine,
    code_changes,
    code_commit,
    describe_machine,
    git_commit,
    machine_info,
    machine_key,
    read_json,
)
from ..settings import from_command_line

__all__ = ["PLAN_FILE", "Campaign", "RunFailed", "load_plan", "measured_changes", "run_campaign"]

PLAN_FILE = Path(__file__).with_name("campaign.toml")
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Campaign:
    """A campaign's folder: its manifest, and each run's stored result by its name in the plan
    (``Campaign.read(folder).runs({"label": "recommended_T1"})``)."""

    folder: Path
    manifest: dict[str, Any]

    @classmethod
    def read(cls, folder: str | Path) -> Campaign:
        folder = Path(folder)
        return cls(folder, read_json(folder / MANIFEST))

    @property
    def commit(self) -> str:
        """The commit the campaign measured, in full."""
        return self.manifest["commit"]

    @property
    def machine(self) -> str:
        """The machine in words (:func:`~specdec_lib.results.describe_machine`)."""
        return describe_machine(self.manifest["machine"])

    @property
    def machine_short(self) -> str:
        """The machine in a figure's title: CPU and cores (:attr:`machine` says which CPU)."""
        m = self.manifest["machine"]
        return f"{m['cpu']}, {m['cores']} cores"

    def headline(self) -> dict[str, Any]:
        """The series' headline (:func:`~specdec_lib.bench.headline`) from this campaign's runs."""
        from ..bench.analysis import HEADLINE_RUNS, headline

        return headline(self.runs(HEADLINE_RUNS))

    def command(self, name: str) -> list[str]:
        """The command line of the plan's run ``name``, as it ran."""
        return self._entry(name)["command"]

    def run(self, name: str) -> dict[str, Any]:
        """The stored result of the plan's run ``name``."""
        return read_json(self.folder / self._entry(name)["out"])

    def settings(self, name: str, cls: type) -> Any:
        """The settings dataclass ``cls`` of run ``name``, read from its command line as it ran."""
        return from_command_line(cls, self.command(name))

    def runs(self, names: Mapping[str, str] | Iterable[str]) -> dict[str, dict[str, Any]]:
        """``{label: result}`` for ``{label: run name}`` (or ``{name: result}`` for run names),
        refused if they come from two machines."""
        if not isinstance(names, Mapping):
            names = {name: name for name in names}
        out = {label: self.run(name) for label, name in names.items()}
        check_same_machine(out.values(), f"the campaign's runs {', '.join(names.values())}")
        return out

    def _entry(self, name: str) -> dict[str, Any]:
        runs = self.manifest["runs"]
        if name not in runs:
            raise ValueError(f"name: no run {name!r} in {self.folder} (it has {', '.join(runs)})")
        return runs[name]


class RunFailed(RuntimeError):
    """A run of the campaign exited with an error; the runs before it are kept."""


def load_plan(path: str | Path = PLAN_FILE) -> list[dict[str, Any]]:
    """The checked runs of a plan file: a unique ``name``, the ``command`` (a
    ``python -m specdec_lib`` subcommand and flags without ``--out``, or the flags of ``module``),
    the ``out`` file and ``why``."""
    runs = tomllib.loads(Path(path).read_text()).get("run", [])
    if not runs:
        raise ValueError(f"plan {path}: no [[run]] entries")
    seen = set()
    for r in runs:
        where = f"plan {Path(path).name}, run {r.get('name')!r}"
        for key, kind in (("name", str), ("command", list), ("out", str), ("why", str)):
            if not isinstance(r.get(key), kind) or not r[key]:
                raise ValueError(f"{where}: needs {key} ({kind.__name__})")
        if r["name"] in seen:
            raise ValueError(f"{where}: two runs share the name")
        if "--out" in r["command"]:
            raise ValueError(f"{where}: the campaign gives --out itself; name the file in out")
        seen.add(r["name"])
    return runs


def _argv(run: dict[str, Any], folder: Path) -> list[str]:
    """The run's command line, ``--out`` included (device-costs takes a folder)."""
    out = folder if run["command"][0] == "device-costs" else folder / run["out"]
    module = [] if run.get("module", "specdec_lib") == "specdec_lib" else ["-m", run["module"]]
    return [*module, *run["command"], "--out", str(out)]


def run_campaign(
    folder: str | Path,
    *,
    plan: str | Path = PLAN_FILE,
    only: Sequence[str] | None = None,
    execute: Callable[[list[str]], int] | None = None,
) -> dict[str, Any]:
    """Run the plan's runs (or those in ``only``) into ``folder``; returns the manifest, rewritten
    atomically after every run. Refuses uncommitted code, records a run during which the code
    changed as void and stops, and resumes a campaign in ``folder`` only on this machine and code.
    ``execute(argv)`` runs one command line, returning its exit status (default: a subprocess)."""
    runs = load_plan(plan)
    if only:
        unknown = sorted(set(only) - {r["name"] for r in runs})
        if unknown:
            raise ValueError(f"only: no runs named {unknown} in {Path(plan).name}")
        runs = [r for r in runs if r["name"] in only]
    _check_code("the campaign could not be reproduced from a commit; commit them first")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    manifest = _resume(folder / MANIFEST, machine, code_commit())
    manifest["plan"] = os.path.relpath(Path(plan).resolve(), REPO_ROOT)
    execute = execute or _subprocess
    for run in runs:
        done = manifest["runs"].get(run["name"], {})
        if done.get("status") == "complete" and (folder / run["out"]).exists():
            continue
        argv = _argv(run, folder)
        print(f"== {run['name']}: python -m specdec_lib {' '.join(argv)}", flush=True)
        t0 = time.perf_counter()
        status = execute(argv)
        # Each run imports the code on disk as it starts: the check after it is the next's check.
        changed = _code_moved(manifest["commit"])
        if status:
            outcome = f"failed (exit {status})"
        else:
            outcome = "void (the code changed during the run)" if changed else "complete"
        manifest["runs"][run["name"]] = {
            "command": argv,
            "out": run["out"],
            "why": run["why"],
            "status": outcome,
            "seconds": round(time.perf_counter() - t0, 1),
            "resolved": resolved(folder / run["out"]),
        }
        _write(folder, manifest)
        if status != 0:
            raise RunFailed(f"run {run['name']!r} failed (exit {status}); rerun to resume")
        if changed:
            raise RunFailed(
                f"run {run['name']!r}: the code changed while it ran ({', '.join(changed[:8])}), "
                "so its result is not the commit's; restore the code and rerun to resume"
            )
    manifest["status"] = "complete"
    manifest["seconds"] = round(sum(r["seconds"] for r in manifest["runs"].values()), 1)
    manifest["finished"] = _now()
    _write(folder, manifest)
    return manifest


def _code_moved(commit: str | None = None) -> list[str]:
    """What differs from the code of ``commit`` (or from the last commit): files with
    uncommitted changes to code, or the last commit that changed code when it is another."""
    changed = code_changes()
    if changed or commit is None:
        return changed
    now = code_commit()
    return [] if now == commit else [f"the code is at commit {now[:12]}, not {commit[:12]}"]


def _check_code(why: str, commit: str | None = None) -> None:
    """Refuse to measure code other than ``commit``'s (or uncommitted code), saying ``why``."""
    changed = _code_moved(commit)
    if changed:
        raise ValueError(
            f"the code has uncommitted changes or another commit: {why}: {', '.join(changed[:8])}"
            + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        )


def _resume(path: Path, machine: dict[str, Any], commit: str) -> dict[str, Any]:
    """The manifest to go on with: a new one, or the one at ``path`` if started on this machine from
    this ``commit`` (the last that changed code, so committing results does not stop a resume)."""
    here = machine_key({"machine": machine})
    if not path.exists():
        return {"machine": machine, "machine_key": here, "commit": commit, "head": git_commit(),
                "clean": not code_changes(), "bandwidth_gb_s": machine.get("memory_bandwidth_gbs"),
                "started": _now(), "status": "running", "runs": {}}  # fmt: skip
    old = read_json(path)
    if old["machine_key"] != here:
        raise ValueError(
            f"{path.parent} holds a campaign measured on another machine ({old['machine_key']}); "
            f"this is {here}: a campaign never mixes machines. Start a new one in another folder."
        )
    if old["commit"] != commit:
        raise ValueError(
            f"{path.parent} holds a campaign of commit {old['commit']}; this tree is {commit}: "
            "start a new one in another folder."
        )
    old["status"] = "running"
    return old


def _write(folder: Path, manifest: dict[str, Any]) -> None:
    atomic_write_json(folder / MANIFEST, manifest)


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _subprocess(argv: list[str]) -> int:
    """``python -m specdec_lib ARGV``, or ``python -m MODULE ...`` for an argv led by ``-m``."""
    cmd = argv if argv[:1] == ["-m"] else ["-m", "specdec_lib", *argv]
    return subprocess.run([sys.executable, *cmd], cwd=REPO_ROOT).returncode


def resolved(path: Path) -> dict[str, Any] | None:
    """What a bench-like run decoded with, as its start-up resolved it: dtype, weight layout,
    draft schedule and the tree at each ``K`` (``None`` for other runs)."""
    if not path.is_file() or path.suffix != ".json":
        return None
    result = read_json(path)
    s = result.get("settings")
    if not isinstance(s, dict) or "K" not in s or "dtype" not in s:
        return None
    trees = {str(K): run_tree(s, result.get("tuned_trees"), K) for K in s["K"]}
    keys = ("dtype", "pack", "draft", "schedule", "threshold", "temperature")
    return {k: s.get(k) for k in keys} | {"tree": trees, "choice": result.get("dtype_choice")}


# What a campaign's runs do not execute: the figures, this module, which runs the commands and
# writes the manifest, and the Markdown beside the code.
NOT_MEASURED = (
    ":(exclude)specdec_lib/figures",
    ":(exclude)specdec_lib/research/campaign.py",
    ":(exclude,glob)**/*.md",
)


def measured_changes(commit: str, repo: Path = REPO_ROOT) -> list[str]:
    """The files the campaign's runs execute (``specdec_lib`` but :data:`NOT_MEASURED`, the
    presets and the plan included) whose code differs between ``commit`` and HEAD: Python
    compared without its docstrings, other files byte for byte."""
    git = ["git", "-C", str(repo)]
    names = subprocess.run(
        [*git, "diff", "--name-only", commit, "HEAD", "--", "specdec_lib", *NOT_MEASURED],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip

    def code(rev: str, name: str) -> str | None:
        run = subprocess.run([*git, "show", f"{rev}:{name}"], capture_output=True, text=True)
        if run.returncode or not name.endswith(".py"):
            return None if run.returncode else run.stdout
        return _without_docstrings(run.stdout)

    changed = []
    for name in names:
        before = code(commit, name)
        if before is None or before != code("HEAD", name):
            changed.append(name)
    return changed


def _without_docstrings(source: str) -> str:
    import ast

    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)
