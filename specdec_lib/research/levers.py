"""Two speed levers measured side by side in one process (notebook 06): ``packing`` (linear weights
prepacked for oneDNN, :func:`~specdec_lib.lm.pack_linears`) and ``support`` (the host's work with
the draft's token subset named and hidden)."""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..bench.passes import measure_pass_costs
from ..bench.settings import PRESETS, preset_draft
from ..config import DEFAULT_PROMPTS
from ..decoding import SpeculativeDecoder
from ..models import load_pair
from ..results import atomic_write_json, isa_limits, load_prompts, provenance

__all__ = ["bench_draft", "build_parser", "packing_costs", "support_costs", "without_support"]


def bench_draft(dtype: str, pack: str = "off") -> str:
    """The draft ``bench``'s defaults run with the default pair on a CPU in ``dtype``, with the
    weights packed as ``pack`` says."""
    return preset_draft("default", PRESETS["default"], "cpu", dtype, pack)


def packing_costs(
    dtype: str, *, n_max: int = 9, context: int = 64, reps: int = 8, pair: str = "default"
) -> dict[str, Any]:
    """The pass costs of ``pair`` in ``dtype`` with plain and with prepacked linear weights
    (``t_target_s`` for n = 1..n_max, ``t_draft_s``), and their ratios packed / plain."""
    draft = bench_draft(dtype) if pair == "default" else None
    pairs = {
        "plain": load_pair(pair, draft=draft, dtype=dtype),
        "packed": load_pair(pair, draft=draft, dtype=dtype, pack=True),
    }
    out: dict[str, Any] = {
        "dtype": dtype,
        "pack_applied": pairs["packed"].notes.get("packed", False),
        "packer": "oneDNN",  # lm.PackedLinear's library, in both dtypes
        "draft": draft or "the pair's first",
    }
    return out | _alternating_blocks(
        "plain",
        "packed",
        lambda v: measure_pass_costs(pairs[v], n_max, context=context, reps=reps),
    )


def _alternating_blocks(
    first: str, second: str, measure: Callable[[str], dict[str, Any]]
) -> dict[str, Any]:
    """``measure(variant)`` in alternating blocks (first, second, second, first): each variant's
    :func:`_block_means` with ``t_n_over_t_1``, and the ratios ``<second>_over_<first>``."""
    blocks: dict[str, list[dict[str, Any]]] = {first: [], second: []}
    for variant in (first, second, second, first):
        blocks[variant].append(measure(variant))
    out: dict[str, Any] = {}
    for variant, runs in blocks.items():
        out[variant] = _block_means(runs)
        out[variant]["t_n_over_t_1"] = [
            x / out[variant]["t_target_s"][0] for x in out[variant]["t_target_s"]
        ]
    out[f"{second}_over_{first}"] = [
        a / b for a, b in zip(out[second]["t_target_s"], out[first]["t_target_s"], strict=True)
    ]
    return out


def _block_means(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A variant's pass costs: the mean of its blocks' medians (a drift falls on both variants)."""
    n = len(runs[0]["t_target_s"])
    out = {
        "t_target_s": [sum(r["t_target_s"][i] for r in runs) / len(runs) for i in range(n)],
        "t_draft_s": sum(r["t_draft_s"] for r in runs) / len(runs),
        "t_draft_next_s": sum(r["t_draft_next_s"] for r in runs) / len(runs),
    }
    if "t_host_s" in runs[0]:  # each K's host work, where the blocks timed it
        out["t_host_s"] = {
            K: sum(r["t_host_s"][K] for r in runs) / len(runs) for K in runs[0]["t_host_s"]
        }
    return out


def without_support(drafter: Any) -> Any:
    """A reset copy of ``drafter`` with its token subset hidden (``support`` ``None``): ``q`` and
    the alternatives are then over the whole vocabulary."""
    hidden = type(f"{type(drafter).__name__}WithoutSupport", (type(drafter),), {"support": None})
    out = copy.copy(drafter)
    out.__class__ = hidden
    out.update(0)
    return out


def support_costs(
    pair: Any,
    prompts: Sequence[torch.Tensor],
    *,
    K: int = 2,
    tree: Sequence[int] = (4, 3),
    temperature: float = 1.0,
    max_new_tokens: int = 50,
) -> dict[str, Any]:
    """Each prompt (token ids) decoded with ``pair``'s draft's token subset named and hidden
    (:func:`without_support`), alternating the order per prompt after one warm-up each; per variant,
    medians over prompts of host, draft and target ms per step, and overall tokens per second."""
    drafters = {"support": pair.draft, "whole vocabulary": without_support(pair.draft)}
    decoders = {
        name: SpeculativeDecoder(d, pair.target, K=K, tree=tree, temperature=temperature)
        for name, d in drafters.items()
    }
    for dec in decoders.values():
        dec.generate_ids(prompts[0], 4, seed=0)
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in decoders}
    for i, ids in enumerate(prompts):
        for name in list(decoders) if i % 2 == 0 else list(decoders)[::-1]:
            r = decoders[name].generate_ids(ids, max_new_tokens, seed=i)
            per_step = {
                f"{part}_ms": sum(getattr(st, f"{part}_ms") for st in r.steps) / r.n_steps
                for part in ("host", "draft", "target")
            }
            rows[name].append(per_step | {"tokens": len(r.tokens), "elapsed_s": r.elapsed_s})
    out: dict[str, Any] = {"K": K, "tree": list(tree), "temperature": temperature}
    for name, rs in rows.items():
        out[name] = {
            f"{part}_ms_per_step": statistics.median(r[f"{part}_ms"] for r in rs)
            for part in ("host", "draft", "target")
        } | {"tokens_per_s": sum(r["tokens"] for r in rs) / sum(r["elapsed_s"] for r in rs)}
    return out


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m specdec_lib.research.levers`` (the campaign runs it)."""
    p = argparse.ArgumentParser(
        prog="python -m specdec_lib.research.levers", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--lever", choices=["packing", "support"], default="packing")
    p.add_argument("--dtype", nargs="+", default=["bfloat16", "float32"])
    p.add_argument("--n-max", type=int, default=9, help="passes over n = 1..n_max tokens")
    p.add_argument("--reps", type=int, default=8, help="rounds per block (four blocks)")
    p.add_argument("--context", type=int, default=64, help="tokens in the cache")
    p.add_argument(
        "--temperature",
        type=float,
        nargs="+",
        default=[1.0, 0.0],
        help="support: temperatures (0 = greedy)",
    )
    p.add_argument(
        "--prompts",
        type=int,
        default=10,
        help="support: benchmark prompts decoded (the first N of data/prompts.json)",
    )
    p.add_argument("--out", required=True, help="the JSON file to write")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    if args.lever == "support":
        return _support_main(args, settings)
    runs = [
        packing_costs(d, n_max=args.n_max, context=args.context, reps=args.reps) for d in args.dtype
    ]
    result = {
        "runs": runs,
        "isa_limits": isa_limits(),
        "provenance": provenance(seed=0, settings=settings),
    }
    atomic_write_json(args.out, result)
    for r in result["runs"]:
        print(r["dtype"], "packed / plain:", " ".join(f"{x:.2f}" for x in r["packed_over_plain"]))
    return 0


def _support_main(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """The host-work lever on the default pair, its int8 head in bfloat16, packed."""
    pair = load_pair("default", draft="trained-int8", dtype="bfloat16", pack=True)
    texts = [p["text"] for p in load_prompts(DEFAULT_PROMPTS)][: args.prompts]
    prompts = [pair.tokenizer(t, return_tensors="pt").input_ids[0] for t in texts]
    result = {
        "runs": [support_costs(pair, prompts, temperature=t) for t in args.temperature],
        "provenance": provenance(seed=0, settings=settings),
    }
    atomic_write_json(args.out, result)
    for r in result["runs"]:
        host = {k: round(v["host_ms_per_step"], 2) for k, v in r.items() if isinstance(v, dict)}
        print(f"T = {r['temperature']:g}: host ms per step", host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
