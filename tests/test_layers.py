"""The library's layers, read from the README's architecture diagram and checked against the
imports: every library module stands on exactly one floor of the diagram, and imports only from
its own floor or below; the wings (training, research, figures) import the core and are never
imported by it, wherever the import stands (functions included); only the command line
(``__main__.py``) may import them."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "specdec_lib"
WINGS = ("research", "training", "figures")
MAY_IMPORT_WINGS = ("__main__.py",)


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
    assert LIB / "bench" / "run.py" in files and LIB / "__main__.py" not in files
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
        ("x.py", "def f():\n    from .research.levers import packing_costs", "research"),
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


# --------------------------------------------------------------------------------------------
# The README's diagram
# --------------------------------------------------------------------------------------------


def readme_layers(text: str | None = None) -> tuple[dict[str, int], set[str]]:
    """``({unit: floor}, wings)`` from the README's architecture diagram: a line `` N  name  a.py
    b/ ...`` puts those units on floor N; the line starting ``wings`` names the wings. A unit is a
    module (``a.py`` -> ``a``) or a package (``b/`` -> ``b``); anything in parentheses is detail."""
    text = text if text is not None else (ROOT / "README.md").read_text()
    block = re.split(r"^#+ Architecture$", text, maxsplit=1, flags=re.M)[1].split("```", 2)[1]
    floors, wings, in_wings = {}, set(), False
    for line in block.splitlines():
        units = re.findall(r"(?<![\w(,./-])(\w+)(?:\.py\b|/)", re.sub(r"\([^)]*\)", "", line))
        m = re.match(r"\s*(\d+)\s", line)
        if m:
            for u in units:
                assert u not in floors, f"{u} stands on two floors of the diagram"
                floors[u] = int(m.group(1))
        elif line.strip().startswith("wings") or (in_wings and line.strip()):
            in_wings = True  # the wings' line and its continuations
            wings.update(units)
    return floors, wings


def _unit(path: Path) -> str:
    rel = path.relative_to(LIB)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def test_every_module_stands_on_one_floor_of_the_diagram():
    floors, wings = readme_layers()
    assert wings == set(WINGS)
    units = {_unit(f) for f in LIB.rglob("*.py")}
    assert units == set(floors) | wings, "the diagram names every library module, and no more"


def core_floors() -> dict[str, int]:
    """Each core unit's floor computed from the imports: one above the highest core unit it
    imports (a module or package importing only outside the core stands on floor 1)."""
    deps: dict[str, set[str]] = {}
    for f in _core_files() + [LIB / name for name in MAY_IMPORT_WINGS]:
        unit = deps.setdefault(_unit(f), set())
        for module in imported_modules(f):
            dep = module.split(".")[1] if "." in module else None
            if dep and dep != _unit(f) and dep not in WINGS and _is_unit(dep):
                unit.add(dep)
    floors: dict[str, int] = {}

    def floor(u: str, seen: tuple[str, ...] = ()) -> int:
        assert u not in seen, f"an import circle: {' -> '.join((*seen, u))}"
        if u not in floors:
            floors[u] = 1 + max((floor(d, (*seen, u)) for d in deps[u]), default=0)
        return floors[u]

    for u in deps:
        floor(u)
    return floors


def _is_unit(name: str) -> bool:
    return (LIB / f"{name}.py").is_file() or (LIB / name).is_dir()


def test_the_diagram_is_the_house_the_imports_build():
    drawn, _ = readme_layers()
    computed = core_floors()
    assert drawn == computed, "the diagram's floors differ from the floors the imports give"
    assert max(computed.values()) <= 6, "the core's house has more than six floors"


def test_imports_point_down_only():
    floors, wings = readme_layers()
    for f in sorted(LIB.rglob("*.py")):
        unit = _unit(f)
        if unit in wings:
            continue
        for module in imported_modules(f):
            dep = module.split(".")[1] if "." in module else None
            if dep is None or dep == unit or dep in wings or dep not in floors and dep not in wings:
                continue  # the package itself, a wing (checked above), or a name, not a module
            assert floors[dep] <= floors[unit], f"{unit} (floor {floors[unit]}) imports {dep}"


def test_the_diagram_check_can_fail():
    text = """### Architecture
```
 2  up     b.py  c/ (x, y)
 1  down   a.py
 wings:    w/
```"""
    assert readme_layers(text) == ({"b": 2, "c": 1 + 1, "a": 1}, {"w"})
    with pytest.raises(AssertionError, match="two floors"):
        readme_layers(text.replace("a.py", "a.py  b.py"))


def test_the_cores_longest_import_chain_is_at_most_seven_modules():
    """Reading the core is following at most seven modules down from any of them: every core
    module, the command line included, and the packages' ``__init__``, by their written imports."""
    files = _core_files() + [LIB / name for name in MAY_IMPORT_WINGS]

    def name(f: Path) -> str:
        parts = ["specdec_lib", *f.relative_to(LIB).with_suffix("").parts]
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {name(f): f for f in files}
    deps = {
        m: {d for d in imported_modules(f) if d in modules and d != m} for m, f in modules.items()
    }
    chains: dict[str, tuple[str, ...]] = {}

    def longest(m: str) -> tuple[str, ...]:
        if m not in chains:
            below = [longest(d) for d in sorted(deps[m])]
            chains[m] = (m, *max(below, key=len, default=()))
        return chains[m]

    worst = max((longest(m) for m in modules), key=len)
    assert len(worst) <= 7, " -> ".join(worst)
