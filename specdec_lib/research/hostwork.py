"""Host work per step: what the process around the arithmetic costs (benchmark options kept for experiments).

The benchmark's allocator experiment: :func:`reuse_freed_memory` has glibc keep freed memory for
reuse, so that vocabulary-wide buffers are not mapped and page-faulted in afresh at every step.
The command line applies it when ``bench --reuse-memory`` asks, before the run, and the run records
what was set in its provenance (``allocator``); the library never sets it on its own. And the
greedy baseline without the argmax, :class:`InverseCDFDecoder`, which the command line hands to
the benchmark as its ``autoregressive_inverse_cdf`` method.
"""

from __future__ import annotations

import torch

from ..decoding import AutoregressiveDecoder
from ..sampling import has_nan, sample

__all__ = ["BASELINES", "InverseCDFDecoder", "reuse_freed_memory"]

# glibc's mallopt parameters (malloc.h), and the largest mmap threshold it takes on 64-bit Linux
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_MAX = 32 << 20


def reuse_freed_memory() -> str:
    """Have the C allocator keep freed memory for reuse: glibc's ``mallopt`` raises the size from
    which a buffer is mapped from the system on its own to 32 MiB, and the free memory kept before
    the heap is trimmed to 128 MiB. Without it, a buffer the size of a few vocabulary-wide rows
    (a pass's logits, the warped ``p`` and ``q``) is mapped afresh and page-faulted in at every
    step, which can take longer than the arithmetic on it. The setting holds for the whole
    process, so for every method of a run alike (the allocator tuning that PyTorch's CPU
    performance guide makes with jemalloc or tcmalloc).

    Returns what was set, for the run's record, or why nothing was."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return "unchanged (the C library has no mallopt: not glibc)"
    if mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) != 1:
        return "unchanged (mallopt refused the mmap threshold)"
    if mallopt(_M_TRIM_THRESHOLD, 4 * _MMAP_THRESHOLD_MAX) != 1:
        return "unchanged (mallopt refused the trim threshold)"
    return "glibc mallopt: mmap threshold 32 MiB, trim threshold 128 MiB"


class InverseCDFDecoder(AutoregressiveDecoder):
    """The greedy baseline without the argmax: the next token drawn by inverse CDF from the warped
    row, which greedy decoding makes one-hot (the same token as the argmax, after the work of a
    draw). ``bench --methods ... autoregressive_inverse_cdf`` measures it beside the argmax
    (what taking the argmax saves)."""

    def _draw(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.warp.probs(logits)
        return sample(p, self.generator), has_nan(p)


# The benchmark's baselines of this module, by method name (run_benchmark's ``baselines``).
BASELINES = {"autoregressive_inverse_cdf": InverseCDFDecoder}
