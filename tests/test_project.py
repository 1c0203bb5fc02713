"""The project's shape: what a fresh clone must hold, environment.yml agreeing with pyproject, and
the library's layers (imports point down only)."""

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pip_deps_from_environment_yml():
    lines = (ROOT / "environment.yml").read_text().splitlines()
    deps, in_pip = [], False
    for line in lines:
        if re.match(r"^\s*- pip:\s*$", line):
            in_pip = True
            continue
        if in_pip:
            m = re.match(r"^\s{6,}- (.+?)\s*$", line)
            if not m:
                break
            deps.append(m.group(1))
    return deps


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    norm = lambda s: s.replace(" ", "").lower()  # noqa: E731
    assert sorted(map(norm, _pip_deps_from_environment_yml())) == sorted(map(norm, wanted))
    env = (ROOT / "environment.yml").read_text()
    assert re.search(r"^\s*- python=3\.11\s*$", env, re.M)
    assert project["requires-python"].startswith(">=3.11")


# The layers of the README's "Architecture": a module imports only from its own layer or below.
LAYERS = {
    1: ["checks", "config", "settings", "lm", "results", "style", "costs"],
    2: ["sampling", "candidates", "stats"],
    3: ["decoding"],
    4: ["drafters", "models", "faults"],
    5: ["bench", "research", "training", "figures", "cli", "__main__", "__init__"],
}
LAYER_OF = {name: layer for layer, names in LAYERS.items() for name in names}


def _unit(path: Path) -> str:
    """The layer unit of a library file: its subpackage (drafters, training) or its module."""
    rel = path.relative_to(ROOT / "specdec_lib")
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported_units(path: Path) -> set[str]:
    """The library units ``path`` imports, wherever the import stands (functions included)."""
    rel = path.relative_to(ROOT / "specdec_lib")
    package = ["specdec_lib", *rel.parts[:-1]]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = [*base, *(node.module.split(".") if node.module else [])]
            else:
                target = (node.module or "").split(".")
            if target[0] != "specdec_lib":
                continue
            if len(target) == 1:  # from specdec_lib import x, y: each name is a unit
                out.update(a.name for a in node.names)
            else:
                out.add(target[1])
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "specdec_lib" and len(parts) > 1:
                    out.add(parts[1])
    return out


def test_imports_point_down_only():
    files = sorted((ROOT / "specdec_lib").rglob("*.py"))
    units = {_unit(f) for f in files}
    assert units == set(LAYER_OF), "every library file has a layer in LAYERS (and no more)"
    for f in files:
        unit = _unit(f)
        for dep in _imported_units(f) - {unit}:
            assert LAYER_OF[dep] <= LAYER_OF[unit], f"{unit} (layer {LAYER_OF[unit]}) imports {dep}"
            if dep == "training":
                assert unit in ("cli", "training"), f"{unit} imports training"
            assert dep != "figures", f"{unit} imports figures: only the notebooks do"


def test_top_level_layout():
    for name in (
        "notebooks",
        "specdec_lib",
        "data",
        "figures",
        "tests",
        "environment.yml",
        "README.md",
        "pyproject.toml",
        "Makefile",
        ".ci/run",
    ):
        assert (ROOT / name).exists(), name


def test_offline_and_two_commands():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^export HF_HUB_OFFLINE := 1$", makefile, re.M)
    assert re.search(r"^reproduce:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "torch==2.13.0" in makefile
    assert "make test" in (ROOT / ".ci/run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make reproduce" in readme and "make test" in readme and "make lab" in readme
