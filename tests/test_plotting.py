"""specdec_lib.plotting: savefig writes atomically where it is told; every figure function draws."""

import os
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from specdec_lib import plotting

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def figures(tmp_path, monkeypatch):
    # FIGURES_DIR is read from SPECDEC_FIGURES when the module is imported: point it here.
    monkeypatch.setattr(plotting, "FIGURES_DIR", tmp_path)
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
    paths = plotting.savefig("00_line", _small_figure())
    assert paths == [figures / "00_line.png", figures / "00_line.pdf"]
    png, pdf = (p.read_bytes() for p in paths)
    assert png.startswith(b"\x89PNG") and pdf.startswith(b"%PDF")
    # Deterministic metadata: no software version in the PNG, no date in the PDF.
    assert b"Software" not in png and b"CreationDate" not in pdf
    assert sorted(p.name for p in figures.iterdir()) == ["00_line.pdf", "00_line.png"]
    assert all(oct(p.stat().st_mode)[-3:] == "644" for p in paths)


def test_savefig_defaults_to_the_current_figure(figures):
    _small_figure()
    assert [p.name for p in plotting.savefig("00_current", formats=("png",))] == ["00_current.png"]


def test_savefig_is_atomic(figures):
    """A write that fails half-way leaves the previous file whole and no temporary file behind."""
    fig = _small_figure()
    (path,) = plotting.savefig("00_atomic", fig, formats=("png",))
    before = path.read_bytes()

    def broken(f, **kwargs):
        f.write(b"half a PNG")
        raise RuntimeError("killed mid-write")

    fig.savefig = broken
    with pytest.raises(RuntimeError, match="killed mid-write"):
        plotting.savefig("00_atomic", fig, formats=("png",))
    assert path.read_bytes() == before
    assert [p.name for p in figures.iterdir()] == ["00_atomic.png"]


def test_savefig_goes_through_atomic_write(figures, monkeypatch):
    calls = []
    real = plotting.atomic_write

    def spy(path, write, **kwargs):
        calls.append((Path(path).name, kwargs))
        return real(path, write, **kwargs)

    monkeypatch.setattr(plotting, "atomic_write", spy)
    plotting.savefig("00_spy", _small_figure())
    assert calls == [("00_spy.png", {"binary": True}), ("00_spy.pdf", {"binary": True})]


@pytest.mark.parametrize("name", ["", "a/b", "../up", ".hidden", "x.png", "with space", None])
def test_savefig_rejects_bad_names(figures, name):
    with pytest.raises(ValueError, match="name"):
        plotting.savefig(name, _small_figure())
    assert not list(figures.iterdir())


def test_savefig_follows_specdec_figures(tmp_path):
    """End to end: SPECDEC_FIGURES, read at import, decides the folder."""
    code = (
        "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt\n"
        "from specdec_lib.plotting import savefig\n"
        "plt.plot([0, 1]); savefig('00_env')\n"
    )
    env = {**os.environ, "SPECDEC_FIGURES": str(tmp_path / "out"), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tmp_path)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["00_env.pdf", "00_env.png"]


def test_style_keeps_the_series_rc():
    plotting.set_style()
    rc = matplotlib.rcParams
    assert rc["savefig.dpi"] == 220 and rc["pdf.fonttype"] == 42 and not rc["axes.spines.top"]
    cycle = [matplotlib.colors.to_hex(c["color"]) for c in rc["axes.prop_cycle"]]
    assert cycle[:3] == [plotting.COLORS[k].lower() for k in ("target", "draft", "speculative")]


# ------------------------------------------------------------------------------------------------
# Every figure function, on small synthetic inputs: (function, arguments, number of axes).

P = np.array([0.4, 0.3, 0.2, 0.1])
Q = np.array([0.1, 0.2, 0.3, 0.4])
MIN_PQ = np.minimum(P, Q)
K_GRID = np.arange(1, 5)


def _notebook_01():
    bias = pd.DataFrame({"V": [10, 10, 100, 100], "tv_prototype": [0.1, 0.15, 0.16, 0.17]})
    summary = pd.DataFrame({"pairs": [2, 2], "proto_tv_mean": [0.125, 0.165]}, index=[10, 100])
    mc = pd.DataFrame({"alpha": [0.5, 0.5], "K": [1, 2], "mean": [1.5, 1.7], "se": [0.02, 0.03]})
    curves = pd.DataFrame(
        [
            {"alpha": a, "c": c, "K": K, "speedup": (1 - a ** (K + 1)) / ((1 - a) * (c * K + 1))}
            for a, c in [(0.6, 0.05), (0.6, 0.25), (0.71, 0.0), (0.71, 0.1)]
            for K in K_GRID
        ]
    )
    optima = curves[curves.c > 0].loc[lambda d: d.groupby(["alpha", "c"]).speedup.idxmax()]
    T = np.logspace(-2, 0, 5)
    return [
        (plotting.acceptance_split, (P, Q, MIN_PQ, P - MIN_PQ), {"alpha": 0.6}, 2),
        (
            plotting.prototype_bias,
            (P, MIN_PQ, P - MIN_PQ),
            {
                "tv_example": 0.1,
                "bias": bias,
                "summary": summary,
                "tv_correct_max": 1e-16,
                "Vs": (10, 100),
            },
            2,
        ),
        (plotting.mismatched_q, (P, Q, P, 0), {}, 1),
        (plotting.tokens_per_step, (K_GRID, {0.5: 2 - 0.5**K_GRID}, mc), {"n_steps": 10}, 1),
        (plotting.speedup_theory, (curves, optima), {"claimed_alpha": 0.71}, 2),
        (
            plotting.greedy_limit,
            ({1.0: P, 0.1: np.eye(4)[0]}, T, T**2),
            {"bound": 3 * T, "alpha_agree": 1 - T / 2, "alpha_differ": T / 2},
            3,
        ),
    ]


CASES = _notebook_01()


@pytest.mark.parametrize(
    ("function", "args", "kwargs", "n_axes"), CASES, ids=[c[0].__name__ for c in CASES]
)
def test_figure_function_draws(function, args, kwargs, n_axes):
    fig = function(*args, **kwargs)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == n_axes
    fig.canvas.draw()  # lay out every text, legend and tick for real


def test_every_figure_function_is_tested_and_documented():
    public = {n for n in plotting.__all__ if n not in {"COLORS", "savefig", "set_style"}}
    assert public == {c[0].__name__ for c in CASES}
    for name in public:
        doc = getattr(plotting, name).__doc__ or ""
        assert "Notebook 0" in doc, f"{name}: the docstring names the notebook that uses it"
