"""Command line: ``python -m specdec_lib bench | gen-data | train-drafter | eval-drafter`` (see ``--help``)."""

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
    b.add_argument(
        "--draft",
        default="auto",
        choices=["early-exit", "trained", "trained-int8", "auto", "ngram"],
        help="the default pair's drafter: early exit, the trained draft, prompt lookup, or auto "
        "(default: the trained draft if its weights exist, else the early exit)",
    )
    b.add_argument(
        "--schedule",
        default="fixed",
        choices=["fixed", "heuristic", "threshold"],
        help="draft length per step: fixed K, HF's heuristic schedule from K, or up to K with a "
        "confidence threshold",
    )
    b.add_argument("--threshold", type=_float, default=0.4, help="for --schedule threshold")
    b.add_argument(
        "--width",
        type=_positive_int,
        default=1,
        help="candidates for the first draft position, checked in the same target pass",
    )
    b.add_argument("--restart", action="store_true", help="ignore an existing partial run at --out")
    b.add_argument("--no-progress", action="store_true")
    g = sub.add_parser(
        "gen-data", help="sample on-policy training data for a drafter from the target (resumable)"
    )
    g.add_argument("--out", default="data/drafter/onpolicy", help="data folder")
    g.add_argument(
        "--tokens", type=_positive_int, default=1_000_000, help="generated tokens wanted"
    )
    g.add_argument("--pair", default="default")
    g.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    g.add_argument("--prompts", default="data/drafter/train_prompts.json")
    g.add_argument("--batch-size", type=_positive_int, default=32)
    g.add_argument("--max-new-tokens", type=_positive_int, default=256)
    g.add_argument("--temperature", type=_float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--threads", type=_positive_int, default=None)
    g.add_argument(
        "--sampler",
        default="own",
        choices=["own", "hf"],
        help="own: rows leave the batch at EOS (faster); hf: transformers' generate",
    )
    g.add_argument("--no-progress", action="store_true")
    t = sub.add_parser("train-drafter", help="distil a feature-level draft head (resumable)")
    t.add_argument("--data", default="data/drafter/onpolicy", help="on-policy data folder")
    t.add_argument("--out", default="data/drafter/feature_head.safetensors")
    t.add_argument("--pair", default="default")
    t.add_argument("--teacher-dtype", default="bfloat16", choices=["float32", "bfloat16"])
    t.add_argument("--top", type=_positive_int, default=64, help="teacher tokens kept per position")
    t.add_argument(
        "--subset-size", type=_positive_int, default=8192, help="tokens the head proposes"
    )
    t.add_argument(
        "--arch",
        default="feature",
        choices=["feature", "layers"],
        help="feature: a head on the target's hidden states; layers: a small LM on tokens",
    )
    t.add_argument("--n-layers", type=_positive_int, default=1)
    t.add_argument(
        "--init-layers",
        default="0,-1",
        help="layers draft: target layers to copy, comma-separated, or 'none' (random: standalone)",
    )
    t.add_argument(
        "--teacher-layers",
        type=int,
        nargs="+",
        default=[2, 14, -1],
        help="target layers stored by the teacher pass (-1 required)",
    )
    t.add_argument(
        "--feature-layers",
        type=int,
        nargs="+",
        default=[2, 14, -1],
        help="target layers the head reads (a subset of --teacher-layers)",
    )
    t.add_argument("--epochs", type=_float, default=3.0)
    t.add_argument("--batch-sequences", type=_positive_int, default=8)
    t.add_argument("--lr", type=_float, default=1e-3)
    t.add_argument("--weight-decay", type=_float, default=0.0)
    t.add_argument("--warmup-steps", type=_positive_int, default=50)
    t.add_argument(
        "--init-layer", default="-1", help="feature head: target layer to start from, or 'none'"
    )
    t.add_argument("--tv-weight", type=_float, default=1.0)
    t.add_argument("--feature-weight", type=_float, default=0.1)
    t.add_argument("--max-shards", type=_positive_int, default=None, help="train on the first N")
    t.add_argument("--eval-shards", type=int, default=2, help="last shards held out")
    t.add_argument("--checkpoint-every", type=_positive_int, default=200)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--threads", type=_positive_int, default=None)
    t.add_argument("--no-progress", action="store_true")
    e = sub.add_parser(
        "eval-drafter", help="acceptance (by decoding) and cost of a draft on held-out prompts"
    )
    e.add_argument(
        "--draft",
        default="trained",
        help="early-exit | trained | trained-int8 | ngram (default pair), or a path to saved "
        "draft weights",
    )
    e.add_argument("--pair", default="default")
    e.add_argument("--prompts", default="data/drafter/heldout_prompts.json")
    e.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    e.add_argument("--temperatures", type=_float, nargs="+", default=[1.0, 0.7, 0.0])
    e.add_argument("--K", type=_positive_int, default=1)
    e.add_argument(
        "--width", type=_positive_int, default=1, help="candidates for the first draft position"
    )
    e.add_argument("--max-new-tokens", type=_positive_int, default=64)
    e.add_argument("--seeds", type=_positive_int, default=1, help="seeds per prompt")
    e.add_argument("--threads", type=_positive_int, default=None)
    e.add_argument("--out", required=True, help="results JSON")
    e.add_argument(
        "--card", default=None, help="also write a model card (markdown) for a trained draft"
    )
    e.add_argument("--no-progress", action="store_true")
    return parser


def _eval_drafter(args) -> int:
    import torch

    from .bench import acceptance, load_prompts, measure_pass_costs
    from .models import TRAINED_DRAFTS, ModelUnavailableError, load_pair
    from .results import atomic_write_json, provenance

    try:
        if args.threads:
            torch.set_num_threads(args.threads)
        prompts = load_prompts(args.prompts)
        if args.draft in ("early-exit", *TRAINED_DRAFTS):
            pair = load_pair(args.pair, dtype=args.dtype, draft=args.draft)
        elif args.draft == "ngram":
            from .drafters import NgramDrafter

            pair = load_pair(args.pair, dtype=args.dtype)
            pair.draft, pair.draft_name = NgramDrafter(pair.target.config.vocab_size), "n-gram"
        else:
            pair = load_pair(args.pair, dtype=args.dtype, draft="trained", head=args.draft)
        results = {}
        for T in args.temperatures:
            r = acceptance(
                pair,
                prompts,
                K=args.K,
                temperature=T,
                max_new_tokens=args.max_new_tokens,
                seeds=range(args.seeds),
                progress=not args.no_progress,
                width=args.width,
            )
            results[f"{T:g}"] = r
            print(f"T = {T:g}: alpha = {r['alpha']:.3f} ({r['accepted']}/{r['proposed']})")
        costs = measure_pass_costs(pair, 6)  # t_target(1..6): the cost model up to K = 5
        print(f"c = t_draft / t_target(1) = {costs['c']:.3f}")
    except (ValueError, ModelUnavailableError) as err:
        print(f"{PROG} eval-drafter: error: {err}", file=sys.stderr)
        return 2
    settings = {k: v for k, v in vars(args).items() if k not in ("no_progress",)}
    atomic_write_json(
        args.out,
        {
            "pair": pair.describe(),
            "by_temperature": results,
            "costs": costs,
            "provenance": provenance(device=pair.device, seed=0, settings=settings),
        },
    )
    print(f"wrote {args.out}")
    if args.card:
        from .results import read_json
        from .train import model_card

        weights = Path(pair.notes.get("head_path", args.draft))
        record = read_json(weights.with_suffix(".train.json"))
        Path(args.card).write_text(model_card(weights, record, read_json(args.out)))
        print(f"wrote {args.card}")
    return 0


def _layer_arg(text: str) -> int | None:
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"--init-layer must be an integer or 'none', got {text!r}") from None


def _layers_arg(text: str) -> tuple[int, ...] | None:
    if text.strip().lower() == "none":
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(
            f"--init-layers must be comma-separated integers or 'none', got {text!r}"
        ) from None


def _train_drafter(args) -> int:
    from .models import ModelUnavailableError
    from .train import TrainSettings, train_drafter

    try:
        settings = TrainSettings(
            data=args.data,
            out=args.out,
            pair=args.pair,
            teacher_dtype=args.teacher_dtype,
            top=args.top,
            subset_size=args.subset_size,
            arch=args.arch,
            n_layers=args.n_layers,
            init_layers=_layers_arg(args.init_layers),
            teacher_layers=tuple(args.teacher_layers),
            feature_layers=tuple(args.feature_layers),
            epochs=args.epochs,
            batch_sequences=args.batch_sequences,
            lr=args.lr,
            weight_decay=args.weight_decay,
            warmup_steps=args.warmup_steps,
            init_layer=_layer_arg(args.init_layer),
            tv_weight=args.tv_weight,
            feature_weight=args.feature_weight,
            max_shards=args.max_shards,
            eval_shards=args.eval_shards,
            checkpoint_every=args.checkpoint_every,
            seed=args.seed,
            threads=args.threads,
        )
        record = train_drafter(settings, progress=not args.no_progress)
    except (ValueError, ModelUnavailableError) as err:
        print(f"{PROG} train-drafter: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"{PROG} train-drafter: interrupted; rerun the same command to resume", file=sys.stderr
        )
        return 130
    last = record["history"][-1] if record["history"] else {}
    print(
        f"wrote {args.out}: {record['train_tokens']:,} training tokens, held-out alpha (top-"
        f"{args.top} bound) {last.get('eval_alpha', float('nan')):.3f}"
    )
    return 0


def _gen_data(args) -> int:
    from .distill import DataSettings, generate_onpolicy, summary
    from .models import ModelUnavailableError

    try:
        settings = DataSettings(
            pair=args.pair,
            dtype=args.dtype,
            prompts=args.prompts,
            batch_size=args.batch_size,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            seed=args.seed,
            threads=args.threads,
            sampler=args.sampler,
        )
        generate_onpolicy(args.out, args.tokens, settings, progress=not args.no_progress)
    except (ValueError, ModelUnavailableError) as err:
        print(f"{PROG} gen-data: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG} gen-data: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    s = summary(args.out)
    print(
        f"{args.out}: {s['generated_tokens']:,} generated tokens in {s['sequences']:,} sequences, "
        f"{s['shards']} shards, {s['tokens_per_s']:.0f} tokens/s"
    )
    return 0


def _default_out(args) -> Path:
    t = "greedy" if args.temperature == 0 else f"T{args.temperature:g}"
    extra = "".join(
        [f"_topk{args.top_k}" if args.top_k else "", f"_topp{args.top_p:g}" if args.top_p else ""]
    )
    from .models import resolve_draft

    kind = resolve_draft(args.pair, args.draft)
    draft = "" if kind == "early-exit" else f"_{kind}"
    if args.schedule != "fixed":
        draft += f"_{args.schedule}"
    if args.width > 1:
        draft += f"_w{args.width}"
    return RESULTS_DIR / f"bench_{args.pair}{draft}_{args.dtype}_{t}{extra}.json"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "gen-data":
        return _gen_data(args)
    if args.command == "train-drafter":
        return _train_drafter(args)
    if args.command == "eval-drafter":
        return _eval_drafter(args)
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
                draft=args.draft,
                schedule=args.schedule,
                threshold=args.threshold,
                width=args.width,
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
