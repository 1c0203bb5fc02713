"""The pass costs of the cost model (:mod:`specdec_lib.costs`, notebook 03): ``t_target(n)``, one
target pass over ``n`` new tokens with a KV cache, and ``t_draft``, one draft step, timed as the
benchmark's runs record them. Its own module because both the benchmark's run
(:mod:`~specdec_lib.bench.run`) and its settings (``--dtype auto``,
:func:`~specdec_lib.bench.settings.fastest_dtype`) time passes.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from ..checks import positive_int
from ..decoding import TargetState
from ..drafters import as_drafter
from ..lm import model_forward, synchronize
from ..models import ModelPair
from ..sampling import Warp

__all__ = ["measure_pass_costs"]


@torch.inference_mode()
def measure_pass_costs(
    pair: ModelPair, n_max: int, *, k_max: int = 2, context: int = 64, reps: int = 15
) -> dict[str, Any]:
    """``t_target[n-1]`` for n = 1..n_max, ``t_draft_by_k[k-1]``, a proposal of ``k`` tokens for
    k = 1..k_max, ``t_draft`` (a proposal of one token) and ``t_draft_next`` (a proposal of two,
    less one of one), in seconds, with KV cache at a context of ``context`` tokens;
    ``c = t_draft / t_target(1)``.

    The passes are measured in rounds, every pass size once per round in a rotated order, and the
    median over rounds is kept: a transient load on the machine then hits every size alike
    instead of one size's whole sample (two warm-up rounds are dropped).

    Each draft proposal is timed right after an (untimed) target pass, as it runs in decoding:
    the target's pass streams its weights through the CPU's caches and evicts the draft's, which
    the draft then reads from memory again. (Measured on a 2-core AMD EPYC: the default head's
    proposal of three tokens took 1.6 ms warm, 2.7 ms after a target pass.) Each proposal length
    is timed on its own: a proposal's first depths pay for the weights' return to the caches and
    its later ones less, so the cost of ``k`` tokens is not linear in ``k``
    (:func:`~specdec_lib.costs.draft_cost` reads ``t_draft_by_k_s`` where a run has it).
    """
    device = pair.device
    g = torch.Generator().manual_seed(0)
    vocab = pair.target.config.vocab_size
    ctx = torch.randint(min(100, vocab // 2), vocab, (context,), generator=g).to(device)
    _, t_cache = model_forward(pair.target, ctx, None, 1)
    # The draft is timed through the Drafter interface: one proposal of one token after the
    # context (for a model draft: one cached pass, the warp and the sample).
    drafter = as_drafter(pair.draft)
    drafter.reset()
    TargetState.for_drafter(pair.target, drafter).forward(ctx, 1)
    warp, d_gen = Warp(1.0), torch.Generator(device=device).manual_seed(0)
    k_max = max(2, positive_int(k_max, "k_max", "draft tokens of the longest proposal timed"))
    jobs = [("target", n) for n in range(1, n_max + 1)]
    jobs += [("draft", k) for k in range(1, k_max + 1)]
    samples: dict[tuple[str, int], list[float]] = {job: [] for job in jobs}
    for r in range(reps + 2):
        shift = r % len(jobs)
        for which, n in jobs[shift:] + jobs[:shift]:
            if which == "draft":  # as in decoding: the target's pass comes first
                model_forward(pair.target, ctx[-1:], t_cache, 1)
                t_cache.crop(-1)
            synchronize(device)
            t0 = time.perf_counter()
            if which == "target":
                model_forward(pair.target, ctx[-n:], t_cache, n)
            else:
                drafter.propose(ctx, n, warp, d_gen)
            synchronize(device)
            dt = time.perf_counter() - t0
            if which == "target":
                t_cache.crop(-n)
            else:
                drafter.rollback(context - 1)
            if r >= 2:
                samples[(which, n)].append(dt)
    t_target = [statistics.median(samples[("target", n)]) for n in range(1, n_max + 1)]
    by_k = [statistics.median(samples[("draft", k)]) for k in range(1, k_max + 1)]
    return {
        "t_target_s": t_target,
        "t_draft_s": by_k[0],
        "t_draft_next_s": max(0.0, by_k[1] - by_k[0]),
        "t_draft_by_k_s": by_k,
        "c": by_k[0] / t_target[0],
        "context": context,
        "reps": reps,
        "statistic": "median over interleaved rounds",
        "draft_timed": "after a target pass",
    }
