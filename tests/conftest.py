"""Shared fixtures: the tiny random pair and the default pair, random distributions, a tiny
on-policy data folder and a random feature head, and the two-token law test of the drafters."""

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Teacher passes and training checkpoints of the tests go to a temporary folder, not .cache/.
os.environ.setdefault("SPECDEC_CACHE", tempfile.mkdtemp(prefix="specdec-cache-"))
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")

import json  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from specdec_lib.decoding import SpeculativeDecoder  # noqa: E402
from specdec_lib.drafters.heads import FeatureHead  # noqa: E402
from specdec_lib.models import load_pair  # noqa: E402
from specdec_lib.research.stats import chisquare_gof, exact_continuation_law  # noqa: E402
from specdec_lib.training import DataSettings, TrainSettings, generate_onpolicy  # noqa: E402


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


@pytest.fixture()
def prompts_file(tmp_path):
    path = tmp_path / "prompts.json"
    texts = ["hello there", "the cat sat", "one two three", "abc abc", "zebra", "quiet river"]
    path.write_text(json.dumps({"prompts": [{"category": "x", "text": t} for t in texts]}))
    return str(path)


def data_settings(prompts_file, **kw):
    base = dict(
        pair="tiny-random", dtype="float32", prompts=prompts_file, batch_size=4, max_new_tokens=24
    )
    return DataSettings(**{**base, **kw})


@pytest.fixture(scope="module")
def random_head(tiny_pair):
    torch.manual_seed(0)
    subset = torch.arange(2, 26)  # the draft never proposes 0, 1 or 26..31: q = 0 there
    return FeatureHead(tiny_pair.target, subset, init_layer=-1)


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory, tiny_pair):
    root = tmp_path_factory.mktemp("train")
    prompts = root / "prompts.json"
    texts = [f"prompt {w} number {i}" for i, w in enumerate("abcdefghij")]
    prompts.write_text(json.dumps({"prompts": [{"text": t} for t in texts]}))
    s = DataSettings(
        pair="tiny-random", dtype="float32", prompts=str(prompts), batch_size=5, max_new_tokens=40
    )
    generate_onpolicy(root / "data", 1200, s, progress=False, pair=tiny_pair)
    return root


def train_settings(root, **kw):
    base = dict(
        data=str(root / "data"),
        out=str(root / "head.safetensors"),
        pair="tiny-random",
        teacher_dtype="float32",
        top=8,
        subset_size=24,
        epochs=3.0,
        batch_sequences=4,
        lr=3e-3,
        warmup_steps=2,
        checkpoint_every=5,
        eval_shards=1,
        cache=str(root / "cache"),
        teacher_layers=(0, -1),
        feature_layers=(0, -1),
    )
    return TrainSettings(**{**base, **kw})


def first_two_law_test(pair, drafter, prompt, n, seed):
    """Generate 3 tokens (K = 2: the first step drafts up to 2), test the law of the first 2
    against the target's exact law. Returns the test and how many drafts each step proposed."""
    dec = SpeculativeDecoder(drafter, pair.target, K=2, temperature=1.0, seed=seed)
    law = exact_continuation_law(pair.target, prompt, dec.warp, 2)
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    drafted = []
    for _ in range(n):
        r = dec.generate_ids(prompt, 3)
        first_two = tuple(r.tokens[:2])
        assert first_two in index, f"emitted {first_two}, which has probability 0 under the target"
        counts[index[first_two]] += 1
        drafted.append([len(s.draft_tokens) for s in r.steps])
    res = chisquare_gof(probs=np.array([law[k] for k in keys]), counts=counts, max_bins=60)
    return res, drafted


N_LAW = 1600  # enough power: the wrong rule below gets p < 1e-10 at each of seeds 1, 3-6
