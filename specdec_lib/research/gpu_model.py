"""A roofline-plus-launch model of a forward pass: what a GPU would show (notebook 03). A model, not
a measurement: every constant is an assumption with its source."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BANDWIDTH_EFFICIENCY",
    "COMPUTE_EFFICIENCY",
    "GPUS",
    "LAUNCH_OVERHEAD_S",
    "DeviceSpec",
    "gpu_pass_time",
]


@dataclass(frozen=True)
class DeviceSpec:
    """Peak numbers of an accelerator, from its vendor's datasheet."""

    name: str
    bandwidth_gb_s: float  # HBM/GDDR bandwidth, GB/s
    peak_tflops: float  # dense fp16/bf16 tensor-core peak, TFLOP/s
    source: str


GPUS: dict[str, DeviceSpec] = {
    "T4": DeviceSpec(
        "NVIDIA T4", 320.0, 65.0, "NVIDIA T4 datasheet: 320 GB/s GDDR6, 65 TFLOPS FP16 (mixed)"
    ),
    "A100": DeviceSpec(
        "NVIDIA A100 SXM 80GB",
        2039.0,
        312.0,
        "NVIDIA A100 datasheet: 2,039 GB/s HBM2e, 312 TFLOPS BF16 dense",
    ),
    "H200": DeviceSpec(
        "NVIDIA H200 SXM",
        4800.0,
        989.0,
        "NVIDIA H200 datasheet: 4.8 TB/s HBM3e, 989 TFLOPS BF16 dense (1,979 sparse)",
    ),
}

# Host cost of one eager op: 5-20 us per CUDA launch (HolisticTraceAnalysis docs); we take 10 us.
LAUNCH_OVERHEAD_S = 10e-6
# Assumed fractions of peak at decode time (GEMVs rarely pass 70-80% of bandwidth).
BANDWIDTH_EFFICIENCY = 0.7
COMPUTE_EFFICIENCY = 0.5
# Ops per decoder layer in an eager Llama forward (norms, projections, rotary, attention, adds).
OPS_PER_LAYER = 15
OPS_FIXED = 6  # embedding, final norm, head, logits slice, ...


def gpu_pass_time(
    spec: DeviceSpec,
    *,
    weight_bytes: float,
    n_tokens: int,
    flops_per_token: float,
    n_layers: int,
    launch_overhead_s: float = LAUNCH_OVERHEAD_S,
    bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY,
    compute_efficiency: float = COMPUTE_EFFICIENCY,
) -> float:
    """Modelled seconds for one forward pass over ``n_tokens`` new tokens at batch size 1:
    ``max(weights / bandwidth, n_tokens * flops / peak) + ops * launch overhead``. Weights are read
    once whatever ``n_tokens``; KV-cache traffic and attention FLOPs are ignored (short contexts).
    """
    t_mem = weight_bytes / (spec.bandwidth_gb_s * 1e9 * bandwidth_efficiency)
    t_compute = n_tokens * flops_per_token / (spec.peak_tflops * 1e12 * compute_efficiency)
    ops = n_layers * OPS_PER_LAYER + OPS_FIXED
    return max(t_mem, t_compute) + ops * launch_overhead_s
