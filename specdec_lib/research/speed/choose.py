"""``bench``'s start-up choice of the dtype and weight layout a run decodes in on a CPU, timed on
the machine where the settings leave it open (``--dtype auto``); the run records it."""

from __future__ import annotations

import functools

import torch

from ...bench.passes import measure_pass_costs
from ...bench.settings import BenchSettings, SettingChoice, setting_layout, setting_name
from ...models import PACKINGS, load_pair

__all__ = ["STEP_TOKENS", "choose", "choose_setting"]

# The pass timed besides the one-token pass: a step's (the tree (4, 3) at K = 2 checks 1 + 7).
STEP_TOKENS = 8


def choose(settings: BenchSettings) -> SettingChoice | None:
    """:func:`choose_setting` on the pair of ``settings`` where they leave the dtype to the
    machine, else ``None`` (nothing is timed)."""
    if not settings.leaves_dtype_to_machine():
        return None
    return choose_setting(settings.pair, "cpu")


@functools.cache
def choose_setting(pair: str, device: str, reps: int = 5) -> SettingChoice:
    """The dtype and weight layout whose target passes over 1 and :data:`STEP_TOKENS` tokens take
    least time together, of float32 as loaded, float32 and bfloat16 prepacked, and bfloat16 on every
    registered packing (:data:`~specdec_lib.models.PACKINGS`; ``not_timed``: why one cannot run),
    timed by :func:`~specdec_lib.bench.measure_pass_costs` once per process; ``fastest_one_token``
    is recorded too. Bfloat16 on a CUDA device."""
    if device == "cuda":
        return SettingChoice("bfloat16", "off", "a CUDA device (tensor cores)")
    candidates = [("float32", "off"), ("float32", "on"), ("bfloat16", "on")]
    not_timed = {}
    for name, p in PACKINGS.items():  # a backend's, in the dtype it takes
        if name not in ("off", "on") and p.dtype == torch.bfloat16:
            if (why := p.unavailable()) is None:
                candidates.append(("bfloat16", name))
            else:
                not_timed[setting_name("bfloat16", name)] = why
    t = {}
    for d, pack in candidates:
        costs = measure_pass_costs(load_pair(pair, dtype=d, pack=pack), STEP_TOKENS, reps=reps)
        t_n = costs["t_target_s"]
        t[setting_name(d, pack)] = {"1": t_n[0], str(STEP_TOKENS): t_n[-1]}
    best = min(t, key=lambda v: t[v]["1"] + t[v][str(STEP_TOKENS)])
    dtype, pack = setting_layout(best)
    return SettingChoice(
        dtype=dtype,
        pack=pack,
        why=f"the fastest target passes over 1 and {STEP_TOKENS} tokens on this CPU",
        t_target_s=t,
        fastest_one_token=min(t, key=lambda v: t[v]["1"]),
        not_timed=not_timed or None,
    )
