"""The committed notebooks: executed, with their figures, in sync with their jupytext twins, and
computed from the committed results (a stale output is refused)."""

import hashlib
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


def stale_reads(nb: nbformat.NotebookNode, root: Path = ROOT) -> list[str]:
    """What differs between the results files a notebook's outputs say it read (its last code
    cell prints ``results_read()``: ``sha256:<16 hex>  <path>`` per line) and those files as they
    are under ``root``: one line per file changed or gone."""
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    assert "results_read()" in last.source, "the last code cell prints results_read()"
    text = "".join(o.get("text", "") for o in last.get("outputs", []) if o.get("name") == "stdout")
    out = []
    for line in text.splitlines():
        if line.strip() in ("", "none"):
            continue
        digest, name = line.split(maxsplit=1)
        path = root / name
        if not path.is_file():
            out.append(f"{name}: read by the outputs, not in the repository")
        elif "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16] != digest:
            out.append(f"{name}: changed since the outputs were computed")
    return out


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_were_computed_from_the_committed_results(ipynb):
    stale = stale_reads(nbformat.read(ipynb, as_version=4))
    assert not stale, f"{ipynb.name}: re-execute it (make reproduce): " + "; ".join(stale)


def test_a_stale_output_is_caught(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "r.json").write_text('{"speedup": 1.4}')
    digest = hashlib.sha256(b'{"speedup": 1.4}').hexdigest()[:16]
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(results_read())")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text=f"sha256:{digest}  data/r.json\n")
    ]
    nb.cells = [cell]
    assert stale_reads(nb, tmp_path) == []
    (tmp_path / "data" / "r.json").write_text('{"speedup": 1.5}')  # re-measured, not re-executed
    assert stale_reads(nb, tmp_path) == ["data/r.json: changed since the outputs were computed"]
    (tmp_path / "data" / "r.json").unlink()
    assert "not in the repository" in stale_reads(nb, tmp_path)[0]


# What a notebook may read from outside the campaign folder: inputs that are not measurements, and
# measurements that carry their own machine and commit (the GPU runs, the drafter's training).
NOT_CAMPAIGN = (
    "data/smollm2_135m_config.json",
    "data/drafter/heldout_prompts.json",
    "data/drafter/onpolicy/manifest.json",
    "data/drafter/feature_head.train.json",
    "data/drafter/experiments/",
    "data/results/gpu_run_cuda",
)


def reads(nb: nbformat.NotebookNode) -> list[str]:
    """The results files a notebook's outputs say it read (its last cell's ``results_read()``)."""
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    text = "".join(o.get("text", "") for o in last.get("outputs", []) if o.get("name") == "stdout")
    return [
        line.split(maxsplit=1)[1] for line in text.splitlines() if line.strip() not in ("", "none")
    ]


def outside_the_campaign(names: list[str]) -> list[str]:
    return [
        n for n in names
        if not n.startswith("data/results/campaign/") and not n.startswith(NOT_CAMPAIGN)
    ]  # fmt: skip


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_reads_measurements_from_the_campaign(ipynb):
    """Every measurement a notebook cites comes from the campaign folder, or is one of the files
    that carry their own machine and commit (:data:`NOT_CAMPAIGN`)."""
    stray = outside_the_campaign(reads(nbformat.read(ipynb, as_version=4)))
    assert not stray, f"{ipynb.name} reads results outside the campaign: {stray}"


def test_a_read_outside_the_campaign_is_caught():
    names = ["data/results/campaign/bench_x.json", "data/results/machines/zen4/bench.json"]
    assert outside_the_campaign(names) == ["data/results/machines/zen4/bench.json"]
