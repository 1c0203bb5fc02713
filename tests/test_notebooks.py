"""The committed notebooks: executed, with their figures, in sync with their jupytext twins, and
computed from the committed results (a stale output is refused)."""

import hashlib
import re
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


def read_lines(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """``(sha256:<16 hex>, path)`` of every results file a notebook's outputs say it read: its
    last code cell shows ``data_read()``, whose text form lists them."""
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    assert "data_read()" in last.source, "the last code cell shows data_read()"
    text = "".join(
        o.get("text", "")
        if o.get("output_type") == "stream"
        else o.get("data", {}).get("text/plain", "")
        for o in last.get("outputs", [])
    )
    return [
        tuple(line.split(maxsplit=1)) for line in text.splitlines() if line.startswith("sha256:")
    ]


def stale_reads(nb: nbformat.NotebookNode, root: Path = ROOT) -> list[str]:
    """What differs between the results files a notebook's outputs say it read
    (:func:`read_lines`) and those files as they are under ``root``: one line per file changed
    or gone."""
    out = []
    for digest, name in read_lines(nb):
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
    cell = nbformat.v4.new_code_cell("data_read()")
    text = (
        f"Read: a run, on a CPU, commit 0123456, 2026-12-07 (1 file)\nsha256:{digest}  data/r.json"
    )
    cell.outputs = [
        nbformat.v4.new_output("execute_result", data={"text/plain": text}, execution_count=1)
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
    """The results files a notebook's outputs say it read (:func:`read_lines`)."""
    return [name for _, name in read_lines(nb)]


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


# The sentence of a notebook's opening that says what it needs from earlier notebooks.
NEEDS = re.compile(r"[^.]*(?:this page (?:needs|uses)|assumes nothing)[^.]*\.", re.IGNORECASE)


@pytest.mark.parametrize(
    "twin", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")), ids=lambda p: p.name
)
def test_each_notebook_says_what_it_needs_and_needs_only_earlier_ones(twin):
    """A teaching order: each page names what it takes from earlier pages, and only from them."""
    n = int(twin.name[:2])
    text = " ".join(line.lstrip("#").strip() for line in twin.read_text().splitlines())
    m = NEEDS.search(text)
    assert m, f"{twin.name}: no sentence says what the page needs from earlier notebooks"
    named = {int(k) for k in re.findall(r"notebooks? 0(\d)", m.group())}
    assert all(k < n for k in named), f"{twin.name} needs a later notebook: {m.group()!r}"
    assert named or n == 1, f"{twin.name} names no earlier notebook: {m.group()!r}"


FINDINGS = re.compile(r"\*\*Findings\.\*\*|\*\*What this notebook finds\.\*\*|\bfindings\(")


def _shown_before_the_findings(cells) -> list[str]:
    """The code a reader sees before a notebook's findings: every unfolded code cell of more than
    twelve lines before the first cell that states or renders them."""
    seen = []
    for cell in cells:
        if FINDINGS.search(cell.source):
            return seen
        folded = cell.metadata.get("jupyter", {}).get("source_hidden", False)
        if cell.cell_type == "code" and not folded and len(cell.source.splitlines()) > 12:
            seen.append(cell.source.splitlines()[0])
    raise AssertionError("no cell states or renders the findings")


@pytest.mark.parametrize("twin", TWINS, ids=lambda p: p.name)
def test_findings_come_before_any_setup(twin):
    """A reader meets each page's findings before its setup: in the title, or rendered by a short
    cell right after it, or with the code that computes them folded."""
    shown = _shown_before_the_findings(jupytext.read(twin).cells)
    assert not shown, f"{twin.name}: setup shown before the findings: {shown}"


def test_setup_before_the_findings_is_caught():
    cells = [
        nbformat.v4.new_markdown_cell("# Title"),
        nbformat.v4.new_code_cell("\n".join(f"x{i} = {i}" for i in range(20))),
        nbformat.v4.new_markdown_cell("**Findings.** x"),
    ]
    assert _shown_before_the_findings(cells) == ["x0 = 0"]
    cells[1].metadata["jupyter"] = {"source_hidden": True}
    assert _shown_before_the_findings(cells) == []
