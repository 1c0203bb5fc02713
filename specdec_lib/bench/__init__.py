"""The benchmark (``python -m specdec_lib bench``): :mod:`~specdec_lib.bench.settings` (what
defines a run), :mod:`~specdec_lib.bench.run` (running the cells), :mod:`~specdec_lib.bench.passes`
(pass costs) and :mod:`~specdec_lib.bench.analysis` (what a stored run says)."""

from .analysis import (
    DISTURBED_PACE,
    HEADLINE_RUNS,
    against_baseline,
    best_K,
    cell_paces,
    depth_counts,
    disturbed_cells,
    headline,
    identical_outputs,
    runs_frame,
    speculative_runs,
    speedup_interval,
    summarize,
    tree_rates,
)
from .passes import measure_pass_costs
from .run import run_benchmark
from .settings import (
    DEFAULT_METHODS,
    DEFAULT_TREE,
    METHODS,
    PRESETS,
    SCHEDULES,
    BenchSettings,
    SettingChoice,
    resolve_device,
)

__all__ = [
    "DEFAULT_METHODS",
    "DISTURBED_PACE",
    "HEADLINE_RUNS",
    "DEFAULT_TREE",
    "METHODS",
    "PRESETS",
    "SCHEDULES",
    "BenchSettings",
    "SettingChoice",
    "against_baseline",
    "best_K",
    "cell_paces",
    "depth_counts",
    "disturbed_cells",
    "headline",
    "identical_outputs",
    "measure_pass_costs",
    "resolve_device",
    "run_benchmark",
    "runs_frame",
    "speculative_runs",
    "speedup_interval",
    "summarize",
    "tree_rates",
]
