"""specdec_lib.figures.style: the series' rcParams and palette; savefig writes atomically where it is told."""

import os
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

from specdec_lib.figures import style

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def figures(tmp_path, monkeypatch):
    # FIGURES_DIR is read from SPECDEC_FIGURES when the module is imported: point it here.
    monkeypatch.setattr(style, "FIGURES_DIR", tmp_path)
    return tmp_path


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _small_figure():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    return fig


def test_savefig_writes_png_and_pdf(figures):
    paths = style.savefig("00_line", _small_figure())
    assert paths == [figures / "00_line.png", figures / "00_line.pdf"]
    png, pdf = (p.read_bytes() for p in paths)
    assert png.startswith(b"\x89PNG") and pdf.startswith(b"%PDF")
    # Deterministic metadata: no software version in the PNG, no date in the PDF.
    assert b"Software" not in png and b"CreationDate" not in pdf
    assert sorted(p.name for p in figures.iterdir()) == ["00_line.pdf", "00_line.png"]
    assert all(oct(p.stat().st_mode)[-3:] == "644" for p in paths)


def test_savefig_defaults_to_the_current_figure(figures):
    _small_figure()
    assert [p.name for p in style.savefig("00_current", formats=("png",))] == ["00_current.png"]


def test_savefig_is_atomic(figures):
    """A write that fails half-way leaves the previous file whole and no temporary file behind."""
    fig = _small_figure()
    (path,) = style.savefig("00_atomic", fig, formats=("png",))
    before = path.read_bytes()

    def broken(f, **kwargs):
        f.write(b"half a PNG")
        raise RuntimeError("killed mid-write")

    fig.savefig = broken
    with pytest.raises(RuntimeError, match="killed mid-write"):
        style.savefig("00_atomic", fig, formats=("png",))
    assert path.read_bytes() == before
    assert [p.name for p in figures.iterdir()] == ["00_atomic.png"]


def test_savefig_goes_through_atomic_write(figures, monkeypatch):
    calls = []
    real = style.atomic_write

    def spy(path, write, **kwargs):
        calls.append((Path(path).name, kwargs))
        return real(path, write, **kwargs)

    monkeypatch.setattr(style, "atomic_write", spy)
    style.savefig("00_spy", _small_figure())
    assert calls == [("00_spy.png", {"binary": True}), ("00_spy.pdf", {"binary": True})]


@pytest.mark.parametrize("name", ["", "a/b", "../up", ".hidden", "x.png", "with space", None])
def test_savefig_rejects_bad_names(figures, name):
    with pytest.raises(ValueError, match="name"):
        style.savefig(name, _small_figure())
    assert not list(figures.iterdir())


def test_savefig_follows_specdec_figures(tmp_path):
    """End to end: SPECDEC_FIGURES, read at import, decides the folder."""
    code = (
        "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt\n"
        "from specdec_lib.figures.style import savefig\n"
        "plt.plot([0, 1]); savefig('00_env')\n"
    )
    env = {**os.environ, "SPECDEC_FIGURES": str(tmp_path / "out"), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tmp_path)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["00_env.pdf", "00_env.png"]


def test_style_keeps_the_series_rc():
    style.set_style()
    rc = matplotlib.rcParams
    assert rc["savefig.dpi"] == 220 and rc["pdf.fonttype"] == 42 and not rc["axes.spines.top"]
    cycle = [matplotlib.colors.to_hex(c["color"]) for c in rc["axes.prop_cycle"]]
    assert cycle[:3] == [style.COLORS[k].lower() for k in ("target", "draft", "speculative")]


def test_a_notebook_does_not_display_where_savefig_wrote(figures):
    saved = style.savefig("00_quiet", _small_figure(), formats=("png",))
    assert [p.name for p in saved] == ["00_quiet.png"]
    assert saved._ipython_display_() is None  # IPython shows nothing for the cell's last value
