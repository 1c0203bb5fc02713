"""The campaign (``specdec_lib.research.campaign``): its plan parses with the command line's own parser, a
campaign writes its runs and a manifest, resumes only on the same machine and commit, and refuses
to start from uncommitted code. The runs themselves are faked (or tiny): speed is not tested."""

from __future__ import annotations

import json
import subprocess

import pytest

from specdec_lib.__main__ import build_parser
from specdec_lib.research import campaign, levers
from specdec_lib.results import machine_info, machine_key, machine_slug


def test_the_committed_plan_parses_with_the_command_line():
    runs = campaign.load_plan(campaign.PLAN_FILE)
    assert all(r["why"].strip() for r in runs)
    parser = build_parser()
    parsers = {"specdec_lib": parser, "specdec_lib.research.levers": levers.build_parser()}
    for r in runs:
        argv = campaign._argv(r, campaign.REPO_ROOT / "x")
        module = r.get("module", "specdec_lib")
        parsers[module].parse_args(argv[2:] if module != "specdec_lib" else argv)  # exits if bad
    assert runs[0]["name"] == "recommended_T1"


def test_a_machine_has_one_folder_name_and_its_kernel_limits_change_it():
    amd = {"cpu": "AMD EPYC", "family_model_stepping": "26/2/1", "cores": 2, "isa_limits": {}}
    xeon = {**amd, "cpu": "Intel(R) Xeon(R) Processor", "family_model_stepping": "6/167/8"}
    assert machine_slug(amd) == "amd-epyc-26-2-1-2cores"
    assert machine_slug(xeon) == "intel-xeon-processor-6-167-8-2cores"
    limited = {**amd, "isa_limits": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}}
    assert machine_slug(limited) == "amd-epyc-26-2-1-2cores-limited-avx2"
    assert machine_slug({**amd, "family_model_stepping": "25/1/1"}) != machine_slug(amd)
    assert machine_slug({**amd, "cores": 4}) != machine_slug(amd)


def test_the_campaign_command_names_its_folder_after_the_machine(monkeypatch, tmp_path):
    from specdec_lib.research import commands

    got = {}

    def fake_run(folder, *, plan, only):
        got["folder"] = folder
        return {"runs": {}, "seconds": 0.0, "machine_key": "m", "commit": "c"}

    monkeypatch.setattr(campaign, "run_campaign", fake_run)
    args = build_parser().parse_args(["campaign", "--out", str(tmp_path / "{machine}")])
    commands._campaign(args)
    assert got["folder"] == str(tmp_path / machine_slug(machine_info()))


def _plan(tmp_path, *names):
    text = "".join(
        f'[[run]]\nname = "{n}"\ncommand = ["bench"]\nout = "{n}.json"\nwhy = "test"\n'
        for n in names
    )
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def _fake(calls):
    def execute(argv):
        calls.append(argv)
        out = argv[argv.index("--out") + 1]
        with open(out, "w") as f:
            f.write("{}")
        return 0

    return execute


def test_a_campaign_writes_its_runs_and_resumes_only_where_it_started(tmp_path, monkeypatch):
    monkeypatch.setattr(campaign, "code_changes", lambda: [])
    folder, calls = tmp_path / "c", []
    plan = _plan(tmp_path, "a", "b")
    m = campaign.run_campaign(folder, plan=plan, only=["a"], execute=_fake(calls))
    assert [c[0] for c in calls] == ["bench"] and m["runs"]["a"]["status"] == "complete"
    assert m["machine_key"] == machine_key({"machine": machine_info()}) and m["commit"]
    m = campaign.run_campaign(folder, plan=plan, execute=_fake(calls))  # resumes: b only
    assert len(calls) == 2 and calls[1][-1].endswith("b.json") and m["status"] == "complete"
    on_disk = json.loads((folder / "manifest.json").read_text())
    assert set(on_disk["runs"]) == {"a", "b"}
    # another machine, or another commit, may not go on with it
    on_disk["machine_key"] = "AMD EPYC 7B13 (AuthenticAMD 25/1/1), 2 cores, avx2"
    (folder / "manifest.json").write_text(json.dumps(on_disk))
    with pytest.raises(ValueError, match="another machine.*never mixes machines"):
        campaign.run_campaign(folder, plan=plan, execute=_fake(calls))
    on_disk["machine_key"], on_disk["commit"] = m["machine_key"], "0" * 40
    (folder / "manifest.json").write_text(json.dumps(on_disk))
    with pytest.raises(ValueError, match="a campaign of commit 0000"):
        campaign.run_campaign(folder, plan=plan, execute=_fake(calls))


def test_a_failed_run_stops_the_campaign_and_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(campaign, "code_changes", lambda: [])
    with pytest.raises(campaign.RunFailed, match="'a' failed"):
        campaign.run_campaign(tmp_path, plan=_plan(tmp_path, "a"), execute=lambda argv: 3)
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert m["runs"]["a"]["status"] == "failed (exit 3)" and m["status"] == "running"


def test_uncommitted_code_is_refused_but_results_and_prose_are_not(tmp_path, monkeypatch):
    from specdec_lib.results import code_changes, code_commit, git_commit

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    for name in ("lib.py", "data/r.json", "notebooks/n.py", "README.md", "figures/f.png"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    head = git_commit(tmp_path)
    assert code_commit(tmp_path) == head
    for name in ("data/r.json", "notebooks/n.py", "README.md", "figures/f.png"):
        (tmp_path / name).write_text("changed")
    assert code_changes(tmp_path) == [] and git_commit(tmp_path) == head  # not dirty
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "results")
    assert code_commit(tmp_path) == head != git_commit(tmp_path)  # a checkpoint: same code
    (tmp_path / "lib.py").write_text("changed")
    assert code_changes(tmp_path) == ["lib.py"] and git_commit(tmp_path).endswith("+dirty")
    monkeypatch.setattr(campaign, "code_changes", lambda: ["lib.py"])
    with pytest.raises(ValueError, match="uncommitted changes.*lib.py"):
        campaign.run_campaign(tmp_path / "c", plan=_plan(tmp_path, "a"), execute=_fake([]))


def test_code_changed_during_a_campaign_voids_the_run_and_stops_it(tmp_path, monkeypatch):
    """Each run imports the code on disk: a change while a run measures voids that run and
    stops the campaign before the next, and it is not resumed on that code."""
    changed: list[str] = []
    monkeypatch.setattr(campaign, "code_changes", lambda: list(changed))
    plan = _plan(tmp_path, "a", "b")

    def edit_during(argv):
        changed.append("lib.py")
        return _fake([])(argv)

    with pytest.raises(campaign.RunFailed, match="'a': the code changed while it ran.*lib.py"):
        campaign.run_campaign(tmp_path / "c", plan=plan, execute=edit_during)
    m = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert m["runs"]["a"]["status"].startswith("void") and "b" not in m["runs"]
    with pytest.raises(ValueError, match="uncommitted changes.*lib.py"):  # not resumed so
        campaign.run_campaign(tmp_path / "c", plan=plan, execute=_fake([]))
    changed.clear()  # the code restored: the void run runs again
    calls: list[list[str]] = []
    m = campaign.run_campaign(tmp_path / "c", plan=plan, execute=_fake(calls))
    assert len(calls) == 2 and m["status"] == "complete"
    # a commit of other code during a run (no uncommitted changes left): void as well
    commit = ["1" * 40]
    monkeypatch.setattr(campaign, "code_commit", lambda: commit[0])

    def commit_during(argv):
        commit[0] = "2" * 40
        return _fake([])(argv)

    with pytest.raises(campaign.RunFailed, match="at commit 222222222222, not 111111111111"):
        campaign.run_campaign(tmp_path / "d", plan=plan, execute=commit_during)


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "no \\[\\[run\\]\\]"),
        ('[[run]]\nname = "a"\ncommand = ["bench"]\nout = "a.json"\n', "needs why"),
        ('[[run]]\nname = "a"\ncommand = ["bench", "--out", "x"]\nout = "a"\nwhy = "w"\n', "--out"),
    ],
)
def test_bad_plans_are_refused(tmp_path, text, match):
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        campaign.load_plan(path)


def test_the_committed_campaign_reads_by_run_name_and_refuses_an_unknown_run():
    from specdec_lib.config import RESULTS_DIR

    c = campaign.Campaign.read(RESULTS_DIR / "campaign")
    assert len(c.commit) == 40 and c.machine.startswith(c.manifest["machine"]["cpu"])
    runs = c.runs({"T = 1": "recommended_T1", "greedy": "recommended_greedy"})
    assert runs["greedy"]["settings"]["temperature"] == 0
    assert c.command("exactness")[0] == "exactness"
    assert list(c.runs(["recommended_T1"])) == ["recommended_T1"]
    with pytest.raises(ValueError, match="name: no run 'nope'"):
        c.run("nope")


def test_campaign_runs_from_two_machines_are_refused(tmp_path):
    here = {"machine": machine_info()}
    there = {"machine": {**here["machine"], "cpu": "AMD EPYC 7B13", "isa": ["avx2"]}}
    for name, prov in (("a", here), ("b", there)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"provenance": prov}))
    manifest = {"commit": "0" * 40, "machine": here["machine"]}
    manifest["runs"] = {n: {"out": f"{n}.json", "command": ["bench"]} for n in "ab"}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    c = campaign.Campaign.read(tmp_path)
    assert c.runs({"x": "a"})["x"]["provenance"] == here
    with pytest.raises(ValueError, match="2 machines"):
        c.runs({"x": "a", "y": "b"})


def test_a_runs_settings_are_read_back_from_its_command_line():
    from specdec_lib.config import RESULTS_DIR
    from specdec_lib.research.exactness import ExactnessSettings

    c = campaign.Campaign.read(RESULTS_DIR / "campaign")
    s = c.settings("exactness", ExactnessSettings)
    argv = c.command("exactness")
    assert s.n == int(argv[argv.index("--n") + 1])
    assert s.n_fault == int(argv[argv.index("--n-fault") + 1])
    assert s.configs == argv[argv.index("--configs") + 1 : argv.index("--n")]


def test_measured_changes_ignore_docstrings_and_name_code(tmp_path):
    """A campaign's commit against HEAD: a docstring edited changes nothing measured; a line of
    code, a preset or a file removed does; figures are not measured."""
    repo = tmp_path
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "config", "user.email", "t@t"], check=True)
    subprocess.run([*git, "config", "user.name", "t"], check=True)
    lib = repo / "specdec_lib"
    (lib / "figures").mkdir(parents=True)
    (lib / "a.py").write_text('def f():\n    """Doc."""\n    return 1\n')
    (lib / "b.toml").write_text("x = 1\n")
    (lib / "figures" / "f.py").write_text("X = 1\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    first = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    (lib / "a.py").write_text('def f():\n    """Another doc."""\n    return 1\n')
    (lib / "figures" / "f.py").write_text("X = 2\n")
    subprocess.run([*git, "commit", "-qam", "two"], check=True)
    assert campaign.measured_changes(first.strip(), repo) == []
    (lib / "a.py").write_text("def f():\n    return 2\n")
    (lib / "b.toml").write_text("x = 2\n")
    subprocess.run([*git, "commit", "-qam", "three"], check=True)
    assert campaign.measured_changes(first.strip(), repo) == [
        "specdec_lib/a.py",
        "specdec_lib/b.toml",
    ]


def test_the_resolved_configuration_of_a_bench_run_is_read_from_its_result(tmp_path):
    out = tmp_path / "bench.json"
    settings = {"K": [1, 2], "dtype": "bfloat16", "pack": "library", "tree": None}
    settings |= {"draft": "trained-bf16", "schedule": "threshold", "threshold": 0.4}
    tuned = {"by_K": {"1": {"tree": [3]}, "2": {"tree": [3, 2]}}}
    result = {"settings": settings | {"temperature": 1.0}, "tuned_trees": tuned}
    out.write_text(json.dumps(result | {"dtype_choice": {"dtype": "bfloat16"}}))
    got = campaign.resolved(out)
    assert got["tree"] == {"1": [3], "2": [3, 2]} and got["pack"] == "library"
    assert got["choice"] == {"dtype": "bfloat16"} and got["schedule"] == "threshold"
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    assert campaign.resolved(tmp_path / "other.json") is None


def test_the_campaign_the_book_reads_measured_the_code_at_head():
    """The code a campaign's runs execute is the code at HEAD (docstrings aside): a change to what
    was measured lands with a new campaign. Manifests before the check (no ``clean`` field) are
    from an older format and are not held to it."""
    from specdec_lib.config import RESULTS_DIR

    for path in sorted(RESULTS_DIR.glob("campaign*/manifest.json")):
        manifest = json.loads(path.read_text())
        if "clean" not in manifest:
            continue
        assert manifest["clean"], f"{path}: measured uncommitted code"
        known = subprocess.run(
            ["git", "-C", str(RESULTS_DIR), "cat-file", "-e", manifest["commit"] + "^{commit}"],
            capture_output=True,
        )
        if known.returncode:
            pytest.skip(
                f"{path.parent}: its commit is not in this clone's history (a shallow clone)"
            )
        changed = campaign.measured_changes(manifest["commit"])
        assert not changed, f"{path.parent}: the measured code changed since: {changed}"
