"""The committed notebooks: executed, with their figures, and in sync with their jupytext twins."""

from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
TWINS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))


def test_notebooks_exist():
    assert NOTEBOOKS


def test_notebooks_committed_with_outputs():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code, path.name
        assert all(c.get("execution_count") for c in code), f"{path.name} is not fully executed"
        errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"{path.name} has error outputs"
        # Readers see the figures in the committed notebook (executed with the inline backend,
        # not Agg): every cell that saves a figure also shows it.
        for c in code:
            if "savefig(" in c.source and "def savefig" not in c.source:
                shown = any("image/png" in o.get("data", {}) for o in c.get("outputs", []))
                assert shown, f"{path.name}: a figure cell has no image output:\n{c.source[:200]}"


def test_every_notebook_has_a_twin_and_every_twin_a_notebook():
    assert [p.stem for p in NOTEBOOKS] == [p.stem for p in TWINS]


def _cells(path: Path) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in jupytext.read(path).cells]


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=lambda p: p.name)
def test_twin_in_sync(ipynb):
    # Contents, not modification times: a git checkout resets those.
    twin = ipynb.with_suffix(".py")
    nb, py = _cells(ipynb), _cells(twin)
    for i, (a, b) in enumerate(zip(nb, py, strict=False)):
        assert a == b, f"cell {i} differs between {ipynb.name} and {twin.name}: run `make sync`"
    assert len(nb) == len(py), f"{ipynb.name} and {twin.name} differ in length: run `make sync`"
