"""The command line, ``python -m specdec_lib <command>`` (``specdec``): ``bench`` here, the wings'
commands registered by them. A bad value exits 2 with one line on stderr. It may import the wings
(:mod:`specdec_lib.research.speed`); the core never does."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from .bench.analysis import DISTURBED_PACE, disturbed_cells
from .bench.run import run_benchmark
from .bench.settings import BenchSettings, baseline_note
from .config import RESULTS_DIR
from .models import ModelUnavailableError
from .research import commands as research_commands
from .research import speed  # registers its packing, cache and tuning
from .settings import add_arguments, from_arguments
from .training import commands as training_commands

__all__ = ["build_parser", "main"]

PROG = "python -m specdec_lib"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no traceback
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="specdec: speculative decoding, measured.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(
        name: str, help_: str, settings: type | None, run: Callable[[argparse.Namespace], None]
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        if settings is not None:
            add_arguments(p, settings)
            p.add_argument("--no-progress", action="store_true", help="no progress bars")
        p.set_defaults(run=run)
        return p

    b = command(
        "bench", "speculative vs autoregressive vs HF assisted, side by side", BenchSettings, _bench
    )
    b.add_argument("--out", help="results JSON (default data/results/bench_<settings>.json)")
    b.add_argument("--restart", action="store_true", help="ignore a partial run at --out")
    training_commands.register(command)
    research_commands.register(command)
    return parser


def _bench(args: argparse.Namespace) -> None:
    settings = from_arguments(BenchSettings, args)
    choice = speed.choose(settings)  # None unless the dtype is left to the machine
    if choice is not None:
        print(f"start-up choice: {choice.describe()}")
    settings.validate(choice)
    out = Path(args.out) if args.out else default_out(settings)
    result = run_benchmark(
        settings,
        out,
        resume=not args.restart,
        progress=not args.no_progress,
    )
    _print_table(result)
    print(f"wrote {out}")


def default_out(settings: BenchSettings) -> Path:
    """The results path for validated ``settings``: ``data/results/bench_<pair>[_<draft>]
    [_<schedule>][_w<w>|_tree<w1-w2..>|_tuned-tree][_<head>]_<dtype>_<T>[...].json`` (no draft
    part for ``early-exit``, no shape part for the chain)."""
    s = settings
    t = "greedy" if s.temperature == 0 else f"T{s.temperature:g}"
    extra = (f"_topk{s.top_k}" if s.top_k else "") + (f"_topp{s.top_p:g}" if s.top_p else "")
    draft = "" if s.draft == "early-exit" else f"_{s.draft}"
    if s.schedule != "fixed":
        draft += f"_{s.schedule}"
    if s.tree is None:  # tune_tree
        draft += "_tuned-tree"
    elif max(s.tree) > 1:
        draft += f"_w{s.tree[0]}" if len(s.tree) == 1 else "_tree" + "-".join(map(str, s.tree))
    if s.head is not None:
        draft += f"_{Path(s.head).stem}"
    extra += "_eos" if s.stop_at_eos else ""
    return RESULTS_DIR / f"bench_{s.pair}{draft}_{s.dtype}_{t}{extra}.json"


def _print_table(result: dict) -> None:
    print(
        f"{'method':<18}{'K':>3}{'tok/s':>9}{'speedup':>9}{'alpha':>8}{'tau':>7}{'pred':>7}"
        f"{'p50 ms':>9}{'p95 ms':>9}{'target':>8}{'draft':>7}{'host':>6}{'host ms':>9}"
    )

    def fmt(v, f):
        return format(v, f) if v is not None else "-"

    for r in result["runs"]:
        print(
            f"{r['method']:<18}{r['K']:>3}{r['tokens_per_s']:>9.2f}{r['speedup']:>9.3f}"
            f"{fmt(r['alpha'], '.3f'):>8}{fmt(r['tau'], '.2f'):>7}"
            f"{fmt(r['predicted_speedup'], '.3f'):>7}"
            f"{r['latency_p50_ms']:>9.0f}{r['latency_p95_ms']:>9.0f}"
            f"{fmt(r.get('target_share'), '.0%'):>8}{fmt(r.get('draft_share'), '.0%'):>7}"
            f"{fmt(r.get('host_share'), '.0%'):>6}{fmt(r.get('host_ms_per_step'), '.2f'):>9}"
        )
    disturbed = disturbed_cells(result)
    if disturbed:
        cells = ", ".join(f"{key} ({pace:.1f}x)" for key, pace in sorted(disturbed.items()))
        print(
            f"warning: {len(disturbed)} cells ran at more than {DISTURBED_PACE:g}x the run's "
            f"median pace, where the machine ran slow: {cells}; rerun before citing the run"
        )
    note = baseline_note(result.get("dtype_choice"))
    if note:
        print(f"note: {note}")
    if result.get("tuned_trees"):
        shapes = ", ".join(
            f"K = {K}: ({', '.join(map(str, t['tree']))})"
            for K, t in result["tuned_trees"]["by_K"].items()
        )
        print(f"trees tuned on this machine's pass costs: {shapes}")
        if result["tuned_trees"].get("note"):
            print(f"note: {result['tuned_trees']['note']}")
        if not result["tuned_trees"].get("pays", True):
            print(
                "warning: the cost model predicts no tree at any K to beat autoregressive "
                "decoding on this machine's pass costs (see the run's costs.t_target_s)"
            )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except (ValueError, ModelUnavailableError) as err:
        print(f"{PROG} {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"{PROG} {args.command}: interrupted; rerun the same command to resume",
            file=sys.stderr,
        )
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
