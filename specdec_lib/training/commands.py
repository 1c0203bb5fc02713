"""The commands ``gen-data``, ``train-drafter`` and ``eval-drafter`` (added by :func:`register`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from ..config import REPO_ROOT
from ..results import atomic_write, atomic_write_json, read_json
from ..settings import from_arguments
from .card import model_card
from .data import DataSettings, generate_onpolicy, summary
from .distill import TrainSettings
from .distill import train_drafter as _train
from .evaluate import EvalSettings, evaluate_drafter

__all__ = ["register"]


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add the wing's commands: ``command(name, help, settings, run)`` makes one."""
    g = command(
        "gen-data", "sample on-policy training data from the target", DataSettings, _gen_data
    )
    g.add_argument("--out", default="data/drafter/onpolicy", help="data folder")
    g.add_argument("--tokens", type=int, default=1_000_000, help="generated tokens wanted")
    command(
        "train-drafter",
        "distil a draft from on-policy data (resumable)",
        TrainSettings,
        _train_drafter,
    )
    e = command(
        "eval-drafter",
        "a draft's acceptance (by decoding) and cost on held-out prompts",
        EvalSettings,
        _eval_drafter,
    )
    e.add_argument("--out", required=True, help="results JSON")
    e.add_argument("--card", default=None, help="also write a model card (markdown)")


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
