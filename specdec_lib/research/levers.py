"""Speed levers measured side by side, in one process: a target pass over ``n = 1..n_max`` tokens
and a draft step, with the linear weights as loaded and prepacked for oneDNN
(:func:`~specdec_lib.lm.pack_linears`), in each dtype asked for.

``python -m specdec_lib.research.levers --dtype bfloat16 float32 --out FILE``. The two variants
are timed in alternating blocks (plain, packed, packed, plain), each block in interleaved rounds
(:func:`~specdec_lib.bench.measure_pass_costs`), and a pass's cost is the mean of its two block
medians, so that a drift of the machine during the run falls on both alike. The CPU's instruction
sets can be limited for a run (``ATEN_CPU_CAPABILITY``, ``ONEDNN_MAX_CPU_ISA``,
``MKL_ENABLE_INSTRUCTIONS``, set before Python starts): the run records them, and such a run
imitates an older CPU's kernels on this machine's memory, not that CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..bench.run import measure_pass_costs
from ..models import load_pair
from ..results import ISA_LIMITS, atomic_write_json, provenance

__all__ = ["packing_costs"]


def packing_costs(
    dtype: str, *, n_max: int = 9, context: int = 64, reps: int = 8, pair: str = "default"
) -> dict[str, Any]:
    """The pass costs of ``pair`` in ``dtype`` with plain and with prepacked linear weights
    (``t_target_s`` for n = 1..n_max, ``t_draft_s``), and their ratios packed / plain."""
    draft = "trained-int8" if dtype == "bfloat16" and pair == "default" else None
    pairs = {
        "plain": load_pair(pair, draft=draft, dtype=dtype),
        "packed": load_pair(pair, draft=draft, dtype=dtype, pack=True),
    }
    blocks: dict[str, list[dict[str, Any]]] = {"plain": [], "packed": []}
    for variant in ("plain", "packed", "packed", "plain"):
        blocks[variant].append(
            measure_pass_costs(pairs[variant], n_max, context=context, reps=reps)
        )
    out: dict[str, Any] = {
        "dtype": dtype,
        "pack_applied": pairs["packed"].notes.get("packed", False),
    }
    for variant, runs in blocks.items():
        t = [sum(r["t_target_s"][i] for r in runs) / 2 for i in range(n_max)]
        out[variant] = {
            "t_target_s": t,
            "t_draft_s": sum(r["t_draft_s"] for r in runs) / 2,
            "t_draft_next_s": sum(r["t_draft_next_s"] for r in runs) / 2,
            "t_n_over_t_1": [x / t[0] for x in t],
        }
    out["packed_over_plain"] = [
        a / b for a, b in zip(out["packed"]["t_target_s"], out["plain"]["t_target_s"], strict=True)
    ]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m specdec_lib.research.levers", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--dtype", nargs="+", default=["bfloat16", "float32"])
    p.add_argument("--n-max", type=int, default=9, help="passes over n = 1..n_max tokens")
    p.add_argument("--reps", type=int, default=8, help="rounds per block (four blocks)")
    p.add_argument("--context", type=int, default=64, help="tokens in the cache")
    p.add_argument("--out", required=True, help="the JSON file to write")
    args = p.parse_args(argv)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    result = {
        "runs": [
            packing_costs(d, n_max=args.n_max, context=args.context, reps=args.reps)
            for d in args.dtype
        ],
        "isa_limits": {k: os.environ[k] for k in ISA_LIMITS if k in os.environ},
        "provenance": provenance(seed=0, settings=settings),
    }
    atomic_write_json(args.out, result)
    for r in result["runs"]:
        print(r["dtype"], "packed / plain:", " ".join(f"{x:.2f}" for x in r["packed_over_plain"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
