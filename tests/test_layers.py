"""The core never imports the wings: no module outside ``specdec_lib/research/`` and
``specdec_lib/training/`` imports either of them, wherever the import stands (functions included);
only the command line (``cli.py``, ``__main__.py``) may."""

import ast
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "specdec_lib"
WINGS = ("research", "training")
MAY_IMPORT_WINGS = ("cli.py", "__main__.py")


def imported_modules(path: Path, lib: Path = LIB) -> set[str]:
    """The absolute names of the ``specdec_lib`` modules and packages ``path`` (a file under
    ``lib``) imports: ``from specdec_lib import x`` counts ``specdec_lib.x``, relative imports are
    resolved."""
    package = ["specdec_lib", *path.relative_to(lib).parts[:-1]]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            out.add(module)
            out.update(f"{module}.{a.name}" for a in node.names)  # a submodule, or a name
    return {m for m in out if m == "specdec_lib" or m.startswith("specdec_lib.")}


def _wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in WINGS else None


def _core_files() -> list[Path]:
    """Every library file outside the wings, but the command line."""
    out = []
    for f in sorted(LIB.rglob("*.py")):
        rel = f.relative_to(LIB)
        if rel.parts[0] in WINGS or (len(rel.parts) == 1 and rel.name in MAY_IMPORT_WINGS):
            continue
        out.append(f)
    return out


def test_the_core_never_imports_the_wings():
    files = _core_files()
    assert LIB / "bench" / "run.py" in files and LIB / "cli.py" not in files
    offenders = {
        str(f.relative_to(LIB)): sorted(m for m in imported_modules(f) if _wing(m)) for f in files
    }
    assert not {f: m for f, m in offenders.items() if m}, "the core imports a wing"


def test_the_wings_do_not_import_each_other():
    for wing in WINGS:
        for f in sorted((LIB / wing).rglob("*.py")):
            others = {_wing(m) for m in imported_modules(f)} - {None, wing}
            assert not others, f"{f.relative_to(LIB)} imports {others}"


@pytest.mark.parametrize(
    "where, source, wing",
    [
        ("x.py", "from .research import trees", "research"),
        ("x.py", "from . import training", "training"),
        ("x.py", "import specdec_lib.research.trees", "research"),
        ("x.py", "from specdec_lib import research", "research"),
        ("x.py", "def f():\n    from .research.hostwork import reuse_freed_memory", "research"),
        ("bench/x.py", "from ..training.card import model_card", "training"),
        ("bench/x.py", "from ..costs import step_cost", None),
        ("bench/x.py", "from .research import x", None),  # specdec_lib.bench.research
    ],
)
def test_the_check_sees_every_spelling(tmp_path, where, source, wing):
    path = tmp_path / "specdec_lib" / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    found = {_wing(m) for m in imported_modules(path, tmp_path / "specdec_lib")} - {None}
    assert found == ({wing} if wing else set())
