import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Teacher passes and training checkpoints of the tests go to a temporary folder, not .cache/.
os.environ.setdefault("SPECDEC_CACHE", tempfile.mkdtemp(prefix="specdec-cache-"))
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from specdec_lib.models import load_pair  # noqa: E402


@pytest.fixture(scope="session")
def tiny_pair():
    return load_pair("tiny-random")


@pytest.fixture(scope="session")
def default_pair():
    """The embedded SmolLM2 pair in float32 (the dtype for exact greedy equality)."""
    return load_pair("default", dtype=torch.float32)


def random_dist(gen: torch.Generator, V: int, scale: float = 2.0, zeros: int = 0) -> torch.Tensor:
    logits = torch.randn(V, generator=gen, dtype=torch.float64) * scale
    if zeros:
        idx = torch.randperm(V, generator=gen)[:zeros]
        logits[idx] = -float("inf")
    return torch.softmax(logits, dim=0)
