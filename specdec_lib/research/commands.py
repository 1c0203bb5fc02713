"""The research wing's commands of ``python -m specdec_lib`` (:func:`register`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ..bench.settings import BenchSettings
from ..config import RESULTS_DIR
from ..results import atomic_write_json, machine_info, machine_slug
from ..settings import from_arguments
from . import campaign
from .device_costs import CostSettings, measure_device_costs, write_device_costs
from .exactness import ExactnessSettings, as_frame

__all__ = ["register"]


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add the wing's commands: ``command(name, help, settings, run)`` makes one."""
    d = command(
        "device-costs",
        "pass costs on this device (the default target's architecture, random weights) and the "
        "speedup-vs-K curves they predict",
        CostSettings,
        _device_costs,
    )
    d.add_argument("--out", default=str(RESULTS_DIR), help="folder for device_costs_<device>.json")
    x = command(
        "exactness",
        "every shipped configuration against the target's exact law (chi-square)",
        ExactnessSettings,
        _exactness,
    )
    x.add_argument(
        "--out", default=str(RESULTS_DIR / "exactness_shipped.json"), help="results JSON"
    )
    pe = command(
        "peers",
        "llama.cpp on the embedded GGUF file beside the library, cell by cell (make peers)",
        BenchSettings,
        _peers,
    )
    pe.add_argument("--out", default=str(RESULTS_DIR / "peers.json"), help="results JSON")
    pe.add_argument("--K-lookup", type=int, default=4, help="prompt lookup's K on llama.cpp")
    ps = command(
        "peer-sampler",
        "llama.cpp's own speculative sampling (llama-speculative) against the exact law",
        None,
        _peer_sampler,
    )
    ps.add_argument("--out", default=str(RESULTS_DIR / "peer_sampler.json"), help="results JSON")
    ps.add_argument("--n", type=int, default=200, help="draws, one process each")
    ps.add_argument("--draft-kind", default="Q4_0", help="llama-quantize's type for the draft")
    ps.add_argument("--seed", type=int, default=0, help="the first draw's seed")
    ps.add_argument("--no-progress", action="store_true", help="no progress bars")
    c = command(
        "campaign",
        "every run the series cites, on this machine, from this commit (make campaign)",
        None,
        _campaign,
    )
    c.add_argument(
        "--out",
        default=str(RESULTS_DIR / "campaign"),
        help="the campaign's folder ({machine} in it: this machine's folder name, results.machine_slug)",
    )
    c.add_argument("--plan", default=str(campaign.PLAN_FILE), help="the plan (TOML)")
    c.add_argument("--only", nargs="+", default=None, help="run only the runs named")


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


def _peers(args: argparse.Namespace) -> None:
    from . import speed
    from .peer import side_by_side

    settings = from_arguments(BenchSettings, args)
    choice = speed.choose(settings)
    if choice is not None:
        print(f"start-up choice: {choice.describe()}")
    settings.validate(choice)
    result = side_by_side(settings, args.out, K_lookup=args.K_lookup, progress=not args.no_progress)
    for row in result["summary"]:
        lo, hi = row["tokens_per_s_ci"]
        print(
            f"{row['method']:<24} K {row['K']}: {row['tokens_per_s']:6.1f} tok/s [{lo:.1f}, {hi:.1f}]"
        )
    bench = result["llama_bench"]
    print(
        f"llama-bench: {bench['tokens_per_s']:.1f} tok/s; bandwidth {result['bandwidth_gb_s']:.1f} GB/s"
    )
    print(f"wrote {args.out}")


def _peer_sampler(args: argparse.Namespace) -> None:
    from ..results import provenance
    from .peer_sampler import sampler_test

    if args.n < 2:
        raise ValueError(f"--n must be at least 2 draws, got {args.n}")
    result = sampler_test(
        args.n, kind=args.draft_kind, seed=args.seed, progress=not args.no_progress
    )
    settings = {"n": args.n, "draft_kind": args.draft_kind, "temperature": 1.0}
    result["provenance"] = provenance(seed=args.seed, settings=settings)
    atomic_write_json(args.out, result)
    for name, test in result["tests"].items():
        print(f"{name}: chi2 {test['statistic']:.1f}, dof {test['dof']}, p = {test['pvalue']:.3g}")
    print(f"wrote {args.out}")


def _campaign(args: argparse.Namespace) -> None:
    args.out = args.out.replace("{machine}", machine_slug(machine_info()))
    try:
        manifest = campaign.run_campaign(args.out, plan=args.plan, only=args.only)
    except campaign.RunFailed as err:
        print(f"campaign: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    print(f"{args.out}: {len(manifest['runs'])} runs in {manifest['seconds'] / 60:.1f} minutes")
    print(f"on {manifest['machine_key']}, commit {manifest['commit']}")
