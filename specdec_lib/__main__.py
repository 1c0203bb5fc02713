"""Command line: ``python -m specdec_lib bench ...`` (see ``--help``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .config import RESULTS_DIR

PROG = "python -m specdec_lib"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no traceback
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="specdec: speculative decoding, measured.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    b = sub.add_parser("bench", help="speculative vs autoregressive vs HF assisted, side by side")
    b.add_argument("--pair", default="default", help="model pair: default | gpt2 | tiny-random")
    b.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    b.add_argument(
        "--K", type=_positive_int, nargs="+", default=list(range(1, 9)), help="draft lengths"
    )
    b.add_argument("--max-new-tokens", type=_positive_int, default=50)
    b.add_argument("--temperature", type=_float, default=1.0, help="0 = greedy")
    b.add_argument("--top-k", type=_positive_int, default=None)
    b.add_argument("--top-p", type=_float, default=None)
    b.add_argument(
        "--prompts",
        default=None,
        help='JSON {"prompts": [{"category", "text"}]}; default data/prompts.json',
    )
    b.add_argument("--repeats", type=_positive_int, default=1)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument(
        "--threads", type=_positive_int, default=None, help="torch threads (default: torch's)"
    )
    b.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="subset of autoregressive speculative hf_assisted hf_autoregressive (default: all)",
    )
    b.add_argument(
        "--out",
        default=None,
        help="results JSON (default data/results/bench_<pair>_<settings>.json)",
    )
    b.add_argument("--restart", action="store_true", help="ignore an existing partial run at --out")
    b.add_argument("--no-progress", action="store_true")
    return parser


def _default_out(args) -> Path:
    t = "greedy" if args.temperature == 0 else f"T{args.temperature:g}"
    extra = "".join(
        [f"_topk{args.top_k}" if args.top_k else "", f"_topp{args.top_p:g}" if args.top_p else ""]
    )
    return RESULTS_DIR / f"bench_{args.pair}_{args.dtype}_{t}{extra}.json"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "bench":
        from .bench import METHODS, BenchSettings, run_benchmark
        from .models import ModelUnavailableError

        try:
            settings = BenchSettings(
                pair=args.pair,
                dtype=args.dtype,
                K=args.K,
                max_new_tokens=args.max_new_tokens,
                temperature=args.temperature,
                top_k=args.top_k,
                top_p=args.top_p,
                repeats=args.repeats,
                seed=args.seed,
                prompts=str(args.prompts) if args.prompts else BenchSettings().prompts,
                methods=args.methods or list(METHODS),
                threads=args.threads,
            )
            out = Path(args.out) if args.out else _default_out(args)
            result = run_benchmark(
                settings, out, resume=not args.restart, progress=not args.no_progress
            )
        except (ValueError, ModelUnavailableError) as err:
            print(f"{PROG} bench: error: {err}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"{PROG} bench: interrupted; rerun the same command to resume", file=sys.stderr)
            return 130
        _print_table(result)
        print(f"wrote {out}")
    return 0


def _print_table(result) -> None:
    print(
        f"{'method':<18}{'K':>3}{'tok/s':>9}{'speedup':>9}{'alpha':>8}{'tau':>7}{'pred':>7}{'p50 ms':>9}{'p95 ms':>9}"
    )
    for r in result["runs"]:
        fmt = lambda v, f: format(v, f) if v is not None else "-"  # noqa: E731
        print(
            f"{r['method']:<18}{r['K']:>3}{r['tokens_per_s']:>9.2f}{r['speedup']:>9.3f}"
            f"{fmt(r['alpha'], '.3f'):>8}{fmt(r['tau'], '.2f'):>7}{fmt(r['predicted_speedup'], '.3f'):>7}"
            f"{r['latency_p50_ms']:>9.0f}{r['latency_p95_ms']:>9.0f}"
        )


if __name__ == "__main__":
    sys.exit(main())
