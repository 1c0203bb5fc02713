"""``bench``'s start-up step on a CPU: the dtype and weight layout a run decodes in, timed on the
machine at hand where its settings leave them to the machine (``--dtype auto``, the preset naming
none). The command line runs it before validating the settings (:func:`choose`), prints it and
the run records it (``dtype_choice``); the core never times anything while validating.

Whether bfloat16 is native or emulated, and what a weight layout buys, decide it; ``/proc/cpuinfo``'s
flags do not tell the cost, so the choice is measured, and recorded with its timings.
"""

from __future__ import annotations

import functools

import torch

from ...bench.passes import measure_pass_costs
from ...bench.settings import BenchSettings, SettingChoice, setting_layout, setting_name
from ...models import PACKINGS, load_pair

__all__ = ["STEP_TOKENS", "choose", "choose_setting"]

# The pass the dtype is chosen on, besides the one-token pass (the baseline's): the last token and
# a step's drafts (the tree (4, 3) at K = 2 checks 1 + 7 tokens).
STEP_TOKENS = 8


def choose(settings: BenchSettings) -> SettingChoice | None:
    """The start-up choice for ``settings`` (:func:`choose_setting` on its pair), where they leave
    the dtype to the machine (:meth:`~specdec_lib.bench.BenchSettings.leaves_dtype_to_machine`);
    ``None`` where they do not (nothing is timed)."""
    if not settings.leaves_dtype_to_machine():
        return None
    return choose_setting(settings.pair, "cpu")


@functools.cache
def choose_setting(pair: str, device: str, reps: int = 5) -> SettingChoice:
    """The dtype and weight layout whose target passes over one token (the baseline's) and over a
    step's tokens (:data:`STEP_TOKENS`, a step's verification) take least time together, of
    float32 as loaded, float32 and bfloat16 prepacked for oneDNN, and bfloat16 on every packing a
    backend registered (:data:`~specdec_lib.models.PACKINGS`; where one cannot run, its reason is
    recorded, ``not_timed``), timed as the benchmark times its passes
    (:func:`~specdec_lib.bench.measure_pass_costs`; a few seconds each, once per process); which
    setting passes over one token fastest is recorded too (``fastest_one_token``: where it is
    another, the autoregressive baseline would be faster there). Bfloat16 on a CUDA device."""
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
