"""The command line: ``python -m specdec_lib bench | gen-data | train-drafter | eval-drafter |
device-costs | exactness`` (installed as ``specdec``).

Each subcommand's flags are generated from its settings dataclass (:mod:`specdec_lib.settings`):
:class:`~specdec_lib.bench.BenchSettings`, :class:`~specdec_lib.training.DataSettings`,
:class:`~specdec_lib.training.TrainSettings`, :class:`~specdec_lib.training.EvalSettings`. The few
flags that are not settings (where to write, whether to resume, progress bars) are declared here.
A bad value is one line on stderr and exit status 2; an interrupted run says how to resume.
The command line may import the research wing (:mod:`specdec_lib.research`: the exactness grid,
the allocator experiment of ``bench --reuse-memory``, the inverse-CDF baseline); the library's
core never does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from .bench import BenchSettings, run_benchmark
from .config import REPO_ROOT, RESULTS_DIR
from .models import ModelUnavailableError
from .research import campaign
from .research.device_costs import CostSettings, measure_device_costs, write_device_costs
from .research.exactness import ExactnessSettings, as_frame
from .research.hostwork import BASELINES, reuse_freed_memory
from .results import atomic_write, atomic_write_json, read_json
from .settings import add_arguments, from_arguments
from .training import (
    DataSettings,
    EvalSettings,
    TrainSettings,
    evaluate_drafter,
    generate_onpolicy,
    model_card,
    summary,
)
from .training import train_drafter as _train

__all__ = ["build_parser", "main"]

PROG = "python -m specdec_lib"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no traceback
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="specdec: speculative decoding, measured.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, help_: str, settings: type) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        add_arguments(p, settings)
        p.add_argument("--no-progress", action="store_true", help="no progress bars")
        return p

    b = command(
        "bench", "speculative vs autoregressive vs HF assisted, side by side", BenchSettings
    )
    b.add_argument("--out", help="results JSON (default data/results/bench_<settings>.json)")
    b.add_argument("--restart", action="store_true", help="ignore a partial run at --out")
    g = command("gen-data", "sample on-policy training data from the target", DataSettings)
    g.add_argument("--out", default="data/drafter/onpolicy", help="data folder")
    g.add_argument("--tokens", type=int, default=1_000_000, help="generated tokens wanted")
    command("train-drafter", "distil a draft from on-policy data (resumable)", TrainSettings)
    e = command(
        "eval-drafter",
        "a draft's acceptance (by decoding) and cost on held-out prompts",
        EvalSettings,
    )
    e.add_argument("--out", required=True, help="results JSON")
    e.add_argument("--card", default=None, help="also write a model card (markdown)")
    d = command(
        "device-costs",
        "pass costs on this device (the default target's architecture, random weights) and the "
        "speedup-vs-K curves they predict",
        CostSettings,
    )
    d.add_argument("--out", default=str(RESULTS_DIR), help="folder for device_costs_<device>.json")
    x = command(
        "exactness",
        "every shipped configuration against the target's exact law (chi-square)",
        ExactnessSettings,
    )
    x.add_argument(
        "--out", default=str(RESULTS_DIR / "exactness_shipped.json"), help="results JSON"
    )
    c = sub.add_parser(
        "campaign",
        help="every run the series cites, on this machine, from this commit (make bench)",
        description=campaign.__doc__.split("\n\n")[0],
    )
    c.add_argument("--out", default=str(RESULTS_DIR / "campaign"), help="the campaign's folder")
    c.add_argument("--plan", default=str(campaign.PLAN_FILE), help="the plan (TOML)")
    c.add_argument("--only", nargs="+", default=None, help="run only the runs named")
    return parser


def _bench(args: argparse.Namespace) -> None:
    settings = from_arguments(BenchSettings, args).validate()
    out = Path(args.out) if args.out else default_out(settings)
    result = run_benchmark(
        settings,
        out,
        resume=not args.restart,
        progress=not args.no_progress,
        tune_allocator=reuse_freed_memory,  # run only when --reuse-memory asks
        baselines=BASELINES,  # measured only when --methods names them
    )
    _print_table(result)
    print(f"wrote {out}")


def _gen_data(args: argparse.Namespace) -> None:
    settings = from_arguments(DataSettings, args)
    generate_onpolicy(args.out, args.tokens, settings, progress=not args.no_progress)
    s = summary(args.out)
    print(
        f"{args.out}: {s['generated_tokens']:,} generated tokens in {s['sequences']:,} sequences, "
        f"{s['shards']} shards, {s['tokens_per_s']:.0f} tokens/s"
    )


def _train_drafter(args: argparse.Namespace) -> None:
    settings = from_arguments(TrainSettings, args)
    record = _train(settings, progress=not args.no_progress)
    last = record["history"][-1] if record["history"] else {}
    print(
        f"wrote {settings.out}: {record['train_tokens']:,} training tokens, held-out alpha (a "
        f"lower bound: the teacher's top {settings.top} tokens only) "
        f"{last.get('eval_alpha', float('nan')):.3f}"
    )


def _eval_drafter(args: argparse.Namespace) -> None:
    settings = from_arguments(EvalSettings, args)
    record = evaluate_drafter(settings, progress=not args.no_progress)
    for T, r in record["by_temperature"].items():
        print(f"T = {T}: alpha = {r['alpha']:.3f} ({r['accepted']}/{r['proposed']})")
    print(f"c = t_draft / t_target(1) = {record['costs']['c']:.3f}")
    atomic_write_json(args.out, record)
    print(f"wrote {args.out}")
    if args.card:
        weights = Path(record["pair"].get("head_path", settings.draft))
        weights = weights if weights.is_absolute() else REPO_ROOT / weights
        train_record = read_json(weights.with_suffix(".train.json"))
        card = model_card(weights, train_record, read_json(args.out))
        atomic_write(args.card, lambda f: f.write(card))
        print(f"wrote {args.card}")


def _device_costs(args: argparse.Namespace) -> None:
    result = measure_device_costs(from_arguments(CostSettings, args))
    t = result["costs"]["t_target_s"]
    print(f"{result['label']} ({result['provenance'].get('gpu') or result['provenance']['cpu']})")
    print("t_target(n) ms: " + " ".join(f"{x * 1e3:.2f}" for x in t))
    print(f"t_draft {result['costs']['t_draft_s'] * 1e3:.2f} ms, c = {result['costs']['c']:.3f}")
    for row in result["predicted"]:
        print(f"width {row['width']} K {row['K']}: predicted {row['predicted_speedup']:.2f}x")
    print(f"wrote {write_device_costs(result, args.out)}")


def _exactness(args: argparse.Namespace) -> None:
    settings = from_arguments(ExactnessSettings, args)
    result = settings.run(progress=not args.no_progress)
    cols = ["name", "kept", "alpha", "bonus_steps", "steps", "bins", "p", "p_holm"]
    print(as_frame(result)[cols].to_string(index=False))
    atomic_write_json(args.out, result)
    print(f"wrote {args.out}")


def _campaign(args: argparse.Namespace) -> None:
    try:
        manifest = campaign.run_campaign(args.out, plan=args.plan, only=args.only)
    except campaign.RunFailed as err:
        print(f"{PROG} campaign: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    print(f"{args.out}: {len(manifest['runs'])} runs in {manifest['seconds'] / 60:.1f} minutes")
    print(f"on {manifest['machine_key']}, commit {manifest['commit']}")


def default_out(settings: BenchSettings) -> Path:
    """``data/results/bench_<pair>[_<draft>][_<schedule>][_w<w>|_tree<w1-w2..>][_<head>]_<dtype>_<T>[...].json``
    for validated ``settings`` (the early exit, the first draft measured, has no draft part; the
    chain has no shape part, a tree of one depth ``(w,)`` is ``_w<w>``)."""
    s = settings
    t = "greedy" if s.temperature == 0 else f"T{s.temperature:g}"
    extra = (f"_topk{s.top_k}" if s.top_k else "") + (f"_topp{s.top_p:g}" if s.top_p else "")
    draft = "" if s.draft == "early-exit" else f"_{s.draft}"
    if s.schedule != "fixed":
        draft += f"_{s.schedule}"
    if max(s.tree) > 1:
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


COMMANDS: dict[str, Callable[[argparse.Namespace], None]] = {
    "bench": _bench,
    "gen-data": _gen_data,
    "train-drafter": _train_drafter,
    "eval-drafter": _eval_drafter,
    "device-costs": _device_costs,
    "exactness": _exactness,
    "campaign": _campaign,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        COMMANDS[args.command](args)
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
