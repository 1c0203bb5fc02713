"""The benchmark (``python -m specdec_lib bench``, notebooks 03-06), by concern.

* :mod:`~specdec_lib.bench.settings`: what defines a run, the named presets behind its defaults
  (``presets.toml``, each with why), where it runs;
* :mod:`~specdec_lib.bench.run`: running the cells (our decoders and transformers' generation);
* :mod:`~specdec_lib.bench.passes`: the pass costs of the cost model;
* :mod:`~specdec_lib.bench.analysis`: what a stored run says: the summary, acceptance by position
  and by depth, outputs against the baseline's, bootstrap intervals, frames, and the cells that
  ran while the machine ran slow.

The cost model they predict with is :mod:`specdec_lib.costs`.
"""

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
