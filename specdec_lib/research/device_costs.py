"""Pass costs on any device with the default target's architecture and random weights, and the
speedup-vs-K curves they predict with the CPU runs' acceptance
(``python -m specdec_lib device-costs``). At batch size 1 a pass's time depends on shapes, dtype and
device, not on the weights' values."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..bench import measure_pass_costs, resolve_device
from ..checks import non_negative_int, positive_int
from ..config import DATA_DIR, DEFAULT_HEAD, RESULTS_DIR
from ..costs import chain_tokens_per_step, step_cost
from ..drafters import drafter_for, load_head, quantize_int8
from ..lm import synchronize
from ..models import ModelPair
from ..results import atomic_write_json, provenance, read_json
from ..settings import setting

__all__ = ["CostSettings", "acceptance_by_position", "measure_device_costs", "predicted_curves"]

CONFIG = DATA_DIR / "smollm2_135m_config.json"
# By width, the run whose per-position acceptance feeds the predictions (trained chain, T = 1).
ACCEPTANCE_RUNS = {1: RESULTS_DIR / "campaign" / "bench_chain_T1.json"}


@dataclass
class CostSettings:
    """What defines a device-cost run (the flags of ``python -m specdec_lib device-costs``)."""

    device: str = setting("auto", "where to measure (auto: cuda when present)")
    dtype: str = setting(
        "bfloat16", "dtype of the target and the head", choices=("bfloat16", "float32")
    )
    n_max: int = setting(16, "target passes over n = 1..n_max new tokens")
    K_max: int = setting(8, "predicted curves for K = 1..K_max")
    context: int = setting(64, "tokens in the cache when a pass is timed")
    reps: int = setting(15, "timed rounds per pass size (medians)")
    generate_tokens: int = setting(64, "tokens per timed transformers generate call")
    graphs: bool = setting(True, "also time generate with CUDA graphs (CUDA only)")
    seed: int = setting(0, "seed of the random target weights")

    def __post_init__(self) -> None:
        positive_int(self.n_max, "n_max")
        positive_int(self.K_max, "K_max", "draft lengths predicted")
        positive_int(self.context, "context")
        positive_int(self.reps, "reps")
        positive_int(self.generate_tokens, "generate_tokens")
        non_negative_int(self.seed, "seed")
        if self.n_max < self.K_max + 2:
            raise ValueError(
                f"n_max must be at least K_max + 2 = {self.K_max + 2} (width 2 verifies K + 2 "
                f"tokens), got {self.n_max}"
            )


def random_target(config: str | Path, dtype: torch.dtype, device: str, seed: int) -> Any:
    """The architecture of ``config`` (a transformers config as JSON) with seeded random weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = {k: v for k, v in json.loads(Path(config).read_text()).items() if not k.startswith("_")}
    cfg.pop("model_type", None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(LlamaConfig(**cfg))
    model.to(device=device, dtype=dtype).eval()
    model.requires_grad_(False)
    return model


@torch.inference_mode()
def random_weights_pair(
    target: Any, head: str | Path = DEFAULT_HEAD, *, int8: bool = False
) -> ModelPair:
    """A random-weights target (:func:`random_target`) with the committed head read onto it, int8
    when asked: what a device's pass costs are measured on."""
    draft = load_head(head, target)
    return ModelPair(
        draft=drafter_for(quantize_int8(draft) if int8 else draft),
        target=target,
        tokenizer=None,
        name="default-architecture",
        draft_name=f"trained draft ({Path(head).name}) on random target weights"
        + (", int8 weights" if int8 else ""),
        target_name="SmolLM2-135M architecture, random weights",
        dtype=next(target.parameters()).dtype,
    )


def generate_per_token(model: Any, n: int, *, graphs: bool = False, reps: int = 3) -> float:
    """Median seconds per token of transformers' greedy ``generate`` over ``n`` tokens (EOS
    ignored), after two uncounted warm-ups; ``graphs``: a static cache compiled into CUDA graphs."""
    device = next(model.parameters()).device
    ids = torch.arange(10, 26, device=device).view(1, -1)
    kw: dict[str, Any] = dict(
        max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    if graphs:
        from transformers import CompileConfig

        kw.update(
            cache_implementation="static",
            compile_config=CompileConfig(mode="reduce-overhead", fullgraph=False),
        )
    times = []
    for r in range(reps + 2):
        synchronize(device)
        t0 = time.perf_counter()
        model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
        synchronize(device)
        if r >= 2:
            times.append((time.perf_counter() - t0) / n)
    return float(np.median(times))


def acceptance_by_position(path: str | Path) -> dict[str, Any]:
    """The conditional acceptance rate at each draft position (``alpha_i``: given ``0..i-1``
    accepted), from the largest-``K`` speculative run of a committed benchmark file."""
    result = read_json(path)
    spec = [r for r in result["runs"] if r["method"] == "speculative"]
    run = max(spec, key=lambda r: r["K"])
    return {
        "file": Path(path).name,
        "K": run["K"],
        "alpha_by_position": [float(a) for a in run["alpha_by_position"]],
        "efficiency": [r.get("efficiency") for r in spec],
        "head_sha256": result["pair"].get("head_sha256"),
    }


def predicted_curves(
    costs: dict[str, Any], acceptance: dict[int, dict[str, Any]], K_max: int
) -> list[dict[str, Any]]:
    """Predicted speedup at each ``K`` and width from measured ``costs`` (``t_target_s``,
    ``t_draft_s``) and per-position acceptance by width."""
    rows = []
    for width, acc in acceptance.items():
        for K in range(1, K_max + 1):
            tau = chain_tokens_per_step(acc["alpha_by_position"], K)
            cost = step_cost(K, costs, width)
            rows.append(
                {
                    "width": width,
                    "K": K,
                    "tokens_per_step": tau,
                    "step_cost": cost,
                    "predicted_speedup": tau / cost,
                    "extrapolated": K > len(acc["alpha_by_position"]),
                }
            )
    return rows


def measure_device_costs(settings: CostSettings, *, head: str | Path = DEFAULT_HEAD) -> dict:
    """The whole run (not written): pass, draft, ``generate`` costs, predictions, provenance."""
    device = resolve_device(settings.device)
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[settings.dtype]
    target = random_target(CONFIG, dtype, device, settings.seed)
    pair = random_weights_pair(target, head)
    costs = measure_pass_costs(pair, settings.n_max, context=settings.context, reps=settings.reps)
    drafts: dict[str, Any] = {"bfloat16" if dtype == torch.bfloat16 else "float32": costs}
    try:
        int8_pair = random_weights_pair(target, head, int8=True)
        int8 = measure_pass_costs(int8_pair, 1, context=settings.context, reps=settings.reps)
        drafts["int8"] = {
            "t_draft_s": int8["t_draft_s"],
            "c": int8["t_draft_s"] / costs["t_target_s"][0],
        }
    except ValueError as err:  # the int8 kernel needs bfloat16 on a CPU
        drafts["int8"] = {"unavailable": str(err)}
    generate = {"eager_s_per_token": generate_per_token(target, settings.generate_tokens)}
    if settings.graphs and device == "cuda":
        try:
            generate["cuda_graphs_s_per_token"] = generate_per_token(
                target, settings.generate_tokens, graphs=True
            )
        except Exception as err:  # noqa: BLE001 - recorded, not fatal: the eager numbers stand
            generate["cuda_graphs_error"] = f"{type(err).__name__}: {err}"[:500]
    acceptance = {w: acceptance_by_position(p) for w, p in ACCEPTANCE_RUNS.items()}
    return {
        "label": "GPU costs measured; acceptance from the CPU run"
        if device == "cuda"
        else "costs measured on this CPU with random weights; acceptance from the CPU run",
        "device": device,
        "costs": costs,
        "draft_costs": drafts,
        "generate": generate,
        "acceptance": {str(w): a for w, a in acceptance.items()},
        "predicted": predicted_curves(costs, acceptance, settings.K_max),
        "execution": "eager (the costs and both decoders); CUDA graphs only where stated",
        "provenance": provenance(device=device, seed=settings.seed, settings=asdict(settings)),
    }


def write_device_costs(result: dict[str, Any], out: str | Path) -> Path:
    """``<out>/device_costs_<device>.json``, atomically."""
    path = Path(out) / f"device_costs_{result['device']}.json"
    return atomic_write_json(path, result)
