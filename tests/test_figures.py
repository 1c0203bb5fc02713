"""specdec_lib.figures: every figure function draws, each module serves one notebook and says so."""

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from specdec_lib.figures import (
    acceptance_by_prompt_type,
    acceptance_rule,
    distribution_check,
    drafting_appendix,
    drafting_strategies,
    speedup_vs_k,
)
from specdec_lib.figures.style import COLORS

ROOT = Path(__file__).resolve().parents[1]
MODULES = (
    acceptance_rule,
    distribution_check,
    speedup_vs_k,
    acceptance_by_prompt_type,
    drafting_strategies,
    drafting_appendix,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


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
        (acceptance_rule.acceptance_split, (P, Q, MIN_PQ, P - MIN_PQ), {"alpha": 0.6}, 2),
        (
            acceptance_rule.prototype_bias,
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
        (acceptance_rule.mismatched_q, (P, Q, P, 0), {}, 1),
        (acceptance_rule.tokens_per_step, (K_GRID, {0.5: 2 - 0.5**K_GRID}, mc), {"n_steps": 10}, 1),
        (acceptance_rule.speedup_theory, (curves, optima), {"claimed_alpha": 0.71}, 2),
        (
            acceptance_rule.greedy_limit,
            ({1.0: P, 0.1: np.eye(4)[0]}, T, T**2),
            {"bound": 3 * T, "alpha_agree": 1 - T / 2, "alpha_differ": T / 2},
            3,
        ),
    ]


def _notebook_02():
    table = pd.DataFrame(
        {
            "label": ["a", "b", "(rest)"],
            "reference": [0.5, 0.3, 0.2],
            "observed": [0.48, 0.33, 0.19],
            "se": [0.01, 0.01, 0.01],
        }
    )
    pvals = np.linspace(0.05, 0.95, 10)
    band = (np.clip(pvals - 0.1, 0, 1), np.clip(pvals + 0.1, 0, 1))
    n_grid = np.array([100, 1000, 10_000])
    power = {
        "curves": {"bias a": [0.1, 0.5, 1.0], "bias b": [0.0, 0.2, 0.9]},
        "tv": {"bias a": 0.1, "bias b": 0.02},
        "dashed": {"bias b, fine bins": ("bias b", [0.0, 0.3, 0.95])},
        "dotted": {"least favourable": [0.0, 0.1, 0.5]},
        "simulated": {"bias a": [(1000, 0.52, 0.5)], "least favourable": [(1000, 0.1, 0.1)]},
        "n_modes": {"quick": 100, "full": 10_000},
        "n_used": 100,
        "n_sim": 10,
        "title": "power",
    }
    labels = {"title": "t", "reference_label": "p", "observed_label": "observed"}
    return [
        (distribution_check.frequency_fit, (table,), labels, 1),
        (
            distribution_check.frequency_fit,
            (table.assign(law=[0.4, 0.4, 0.2]),),
            {**labels, "color": "wrong", "law_label": "law"},
            1,
        ),
        (distribution_check.pvalue_uniformity, (pvals, band), {"n_samples": 100}, 2),
        (distribution_check.power_vs_n, (n_grid,), power, 1),
        (
            distribution_check.exactness_grid,
            (
                pd.DataFrame(
                    {
                        "name": ["a", "b", "wrong"],
                        "p": [0.5, 0.03, 1e-12],
                        "p_holm": [0.5, 0.06, float("nan")],
                        "must_fail": [False, False, True],
                        "alpha": [0.4, 0.5, 0.4],
                        "bonus_steps": [10, 20, 10],
                        "steps": [100, 100, 100],
                    }
                ),
            ),
            {"level": 0.002},
            1,
        ),
    ]


def _runs():
    # A runs table of notebook 03's shape: one autoregressive row, speculative and HF rows per K.
    rows = [{"method": "autoregressive", "K": 0, "speedup": 1.0}]
    rows += [
        {"method": m, "K": K, "speedup": s / K}
        for m, s in (("speculative", 0.9), ("hf_assisted", 0.8))
        for K in K_GRID
    ]
    runs = pd.DataFrame(rows)
    return runs.assign(
        tokens_per_s=10 * runs.speedup,
        latency_p50_ms=5000 / runs.speedup,
        latency_p95_ms=6000 / runs.speedup,
        alpha_iid=0.1,
        alpha=0.08,
        tau=1.1,
        tau_iid=1.11,
    )


def _notebook_03():
    panel = pd.DataFrame(
        {
            "speedup": [0.6, 0.5, 0.4, 0.3],
            "q25": [0.5, 0.4, 0.3, 0.2],
            "q75": [0.7, 0.6, 0.5, 0.4],
            "predicted_speedup": [0.62, 0.5, 0.41, 0.33],
            "ideal": [1.05, 1.04, 1.03, 1.02],
            "hf_speedup": [0.5, 0.4, np.nan, np.nan],
        },
        index=pd.Index(K_GRID, name="K"),
    )
    claim = {"K": [1, 2, 3], "speedup": [1.0, 1.28, 1.51]}
    runs = _runs()
    peers = pd.DataFrame(
        {
            "label": ["llama.cpp", "library", "library, speculative", "transformers"],
            "engine": ["llama.cpp", "this library", "this library", "transformers"],
            "tokens_per_s": [100.0, 50.0, 60.0, 40.0],
            "low": [95.0, 48.0, 55.0, 38.0],
            "high": [104.0, 52.0, 66.0, 43.0],
            "decode_tokens_per_s": [110.0, 52.0, 63.0, np.nan],
        }
    )
    return [
        (speedup_vs_k.speedup_vs_K, ({"T = 1": panel, "greedy": panel},), {"claim": claim}, 2),
        (
            speedup_vs_k.speedup_vs_K,
            ({"trained": panel.drop(columns=["ideal", "hf_speedup"])},),
            {"target": 1.3, "ylim": (0, None), "suptitle": "bf16"},
            1,
        ),
        (speedup_vs_k.latency_throughput, (runs,), {"setting": "T = 1", "n_tokens": 50}, 2),
        (
            speedup_vs_k.absolute_speed,
            ({"T = 1": peers, "greedy": peers},),
            {
                "lines": {"llama-bench": 140.0, "roofline a": 340.0, "roofline b": 120.0},
                "machine": "a CPU",
            },
            2,
        ),
    ]


def _notebook_04():
    categories = ["code", "prose"]
    table = pd.DataFrame(
        {"alpha": [0.4, 0.3], "lo": [0.35, 0.2], "hi": [0.45, 0.38]}, index=categories
    )
    per_prompt = pd.DataFrame(
        {
            "run": ["a", "a", "b", "b"],
            "category": ["code", "prose", "code", "prose"],
            "alpha": [0.41, 0.29, 0.42, 0.31],
        }
    )
    views = {
        "early exit": [("code", ["accepted", "corrected", "no draft"]), ("prose", ["bonus"])],
        "trained": [("code", ["corrected"]), ("prose", ["accepted", "bonus"])],
    }
    claim = {"code": 0.79, "prose": 0.68}
    return [
        (
            acceptance_by_prompt_type.alpha_by_category,
            ({"a": table, "b": table},),
            {"categories": categories, "claim": claim, "per_prompt": per_prompt},
            1,
        ),
        (
            acceptance_by_prompt_type.alpha_by_category,
            ({"a": table},),
            {"categories": categories, "claim": claim},
            1,
        ),
        (acceptance_by_prompt_type.token_view, (views,), {"n_tokens": 4}, 2),
    ]


def _history():
    # A training history of the shape the drafter's training writes.
    return pd.DataFrame(
        {
            "step": [1, 2, 3],
            "seconds": [60.0, 120.0, 180.0],
            "eval_alpha": [0.2, 0.3, 0.35],
            "train_alpha": [0.21, 0.31, 0.36],
            "tokens seen": [1e5, 2e5, 3e5],
        }
    )


def _notebook_05():
    curve = pd.DataFrame({"train tokens": [1e5, 1e6], "alpha": [0.33, 0.49]}, index=["a", "b"])
    predicted = pd.DataFrame(
        {"drafter": ["x", "x", "y", "y"], "K": [1, 2, 1, 2], "speedup": [1.2, 1.3, 0.9, 0.8]}
    )
    runs = pd.DataFrame(
        [
            {"panel": panel, "config": config, "K": K, "speedup": 1.2 + 0.05 * K}
            for panel, configs in (("T = 1", ("a", "b")), ("greedy", ("b",)))
            for config in configs
            for K in (1, 2, 3)
        ]
    ).assign(speedup_low=lambda d: d.speedup - 0.04, speedup_high=lambda d: d.speedup + 0.05)
    return [
        (drafting_strategies.learning_curves, (curve, {"a": _history()}), {}, 2),
        (drafting_strategies.predicted_by_drafter, (predicted,), {}, 1),
        (drafting_strategies.speedup_intervals, (runs,), {"title": "t"}, 2),
        (
            drafting_strategies.speedup_intervals,
            (runs.assign(predicted_speedup=runs.speedup + 0.02).query("panel == 'greedy'"),),
            {"title": "t"},
            1,
        ),
    ]


def _notebook_06():
    history = _history()
    return [
        (drafting_appendix.pilot_curves, ({"a": history, "b": history},), {"title": "pilot"}, 1),
        (drafting_appendix.full_training, (history,), {"alpha_decoding": 0.34}, 1),
        (
            drafting_appendix.tree_acceptance,
            (
                pd.DataFrame(
                    {
                        "panel": ["T = 1"] * 4 + ["greedy"] * 4,
                        "depth": [1, 1, 2, 2] * 2,
                        "candidates": [1, 2, 1, 2] * 2,
                        "rate": [0.4, 0.5, 0.3, 0.4, 0.45, 0.6, 0.3, 0.45],
                    }
                ).assign(lo=lambda d: d.rate - 0.05, hi=lambda d: d.rate + 0.05),
            ),
            {"title": "t"},
            2,
        ),
        (
            drafting_appendix.tree_ceiling,
            (
                pd.DataFrame(
                    {
                        "panel": ["T = 1"] * 6 + ["greedy"] * 6,
                        "curve": (["ceiling"] * 3 + ["chain trees"] * 3) * 2,
                        "nodes": [1, 2, 4] * 4,
                        "predicted_speedup": [1.2, 1.4, 1.3, 1.2, 1.3, 1.25] * 2,
                    }
                ),
                pd.DataFrame(
                    {
                        "panel": ["T = 1", "greedy"],
                        "nodes": [2, 2],
                        "speedup": [1.25, 1.3],
                        "speedup_low": [1.2, 1.25],
                        "speedup_high": [1.3, 1.35],
                        "label": ["measured"] * 2,
                    }
                ),
            ),
            {"title": "t"},
            2,
        ),
    ]


CASES = (
    _notebook_01()
    + _notebook_02()
    + _notebook_03()
    + _notebook_04()
    + _notebook_05()
    + _notebook_06()
)


@pytest.mark.parametrize(
    ("function", "args", "kwargs", "n_axes"),
    CASES,
    ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)],
)
def test_figure_function_draws(function, args, kwargs, n_axes):
    fig = function(*args, **kwargs)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == n_axes
    fig.canvas.draw()  # lay out every text, legend and tick for real


def _draws(obj) -> bool:
    import inspect

    return callable(obj) and inspect.signature(obj).return_annotation in (Figure, "Figure")


def test_every_figure_function_is_tested_and_documented():
    public = {(m, n) for m in MODULES for n in m.__all__ if _draws(getattr(m, n))}
    assert {(m.__name__, n) for m, n in public} == {(c[0].__module__, c[0].__name__) for c in CASES}
    for module, name in public:
        doc = getattr(module, name).__doc__ or ""
        assert "Notebook" in doc, f"{name}: the docstring names the notebook that uses it"
        number = _notebook_of(module)[:2]
        assert number in doc.split(":")[0], f"{name}: drawn by its module's notebook, {number}"
    # the rest of each module: the page's findings and the words and data they are made of
    for module in MODULES:
        for name in module.__all__:
            obj = getattr(module, name)
            assert not callable(obj) or _draws(obj) or obj.__doc__, f"{name}: no docstring"


def _notebook_of(module) -> str:
    (path,) = (ROOT / "notebooks").glob(f"[0-9][0-9]_{module.__name__.rsplit('.', 1)[-1]}.ipynb")
    return path.stem


def test_one_module_per_notebook_named_after_it():
    files = {p.stem for p in (ROOT / "specdec_lib" / "figures").glob("*.py")} - {
        "__init__",
        "style",  # shared by every notebook: the figures' look
        "provenance",  # and what each page read
        "words",  # and how numbers read in prose
    }
    assert files == {m.__name__.rsplit(".", 1)[-1] for m in MODULES}
    notebooks = {re.sub(r"^\d\d_", "", p.stem) for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert files == notebooks
    for module in MODULES:
        assert f"notebooks/{_notebook_of(module)}.ipynb" in module.__doc__


def test_token_kinds_have_colours():
    assert all(kind in COLORS for kind in acceptance_by_prompt_type.TOKEN_KINDS)


def test_numbers_in_words():
    from specdec_lib.figures.words import interval, span

    assert interval(1.16, 1.081, 1.234) == "1.16× [1.08, 1.23]"
    assert span([0.6, 0.5, 0.55]) == "0.50–0.60"
    assert span([0.501, 0.499]) == "0.50"
    assert span([3, 12], "d") == "3–12"


@pytest.mark.parametrize(
    "name", ["speedup_vs_k", "acceptance_by_prompt_type", "drafting_strategies"]
)
def test_each_pages_findings_render_from_the_campaign(name):
    import importlib

    from specdec_lib.config import RESULTS_DIR
    from specdec_lib.research.campaign import Campaign

    module = importlib.import_module(f"specdec_lib.figures.{name}")
    text = module.findings(Campaign.read(RESULTS_DIR / "campaign"))
    assert text.startswith("**Findings.**") and "accept" in text
    assert "nan" not in text.lower().replace("nanos", "")
