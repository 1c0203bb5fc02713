"""The roofline-plus-launch model of a GPU pass (``specdec_lib.research.gpu_model``)."""

import pytest

from specdec_lib.research.gpu_model import (
    BANDWIDTH_EFFICIENCY,
    GPUS,
    LAUNCH_OVERHEAD_S,
    OPS_FIXED,
    OPS_PER_LAYER,
    gpu_pass_time,
)


def test_a_pass_reads_the_weights_once_until_compute_catches_up():
    spec = GPUS["A100"]
    kw = dict(weight_bytes=270e6, flops_per_token=270e6, n_layers=30)
    t1 = gpu_pass_time(spec, n_tokens=1, **kw)
    assert gpu_pass_time(spec, n_tokens=8, **kw) == t1  # verifying 8 tokens costs one pass
    launch = (30 * OPS_PER_LAYER + OPS_FIXED) * LAUNCH_OVERHEAD_S
    assert t1 == pytest.approx(270e6 / (spec.bandwidth_gb_s * 1e9 * BANDWIDTH_EFFICIENCY) + launch)
    assert gpu_pass_time(spec, n_tokens=100_000, **kw) > t1  # compute-bound at last
    assert gpu_pass_time(spec, n_tokens=1, launch_overhead_s=0.0, **kw) < t1
