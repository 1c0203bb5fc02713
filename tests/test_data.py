"""On-policy data (``specdec_lib.training.data``): shards written and resumed, other settings refused, bad settings, and the batched sampler following the target's exact law with rows leaving at EOS."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import data_settings

from specdec_lib.research.stats import chisquare_gof, exact_continuation_law
from specdec_lib.sampling import Warp
from specdec_lib.training.data import (
    DataSettings,
    generate_onpolicy,
    iter_sequences,
    load_manifest,
    sample_batch,
)

PROMPT = torch.tensor([0, 5, 9, 3, 17, 4])


def test_generate_onpolicy_writes_shards_and_resumes(tmp_path, tiny_pair, prompts_file):
    folder = tmp_path / "data"
    s = data_settings(prompts_file)
    generate_onpolicy(folder, 150, s, progress=False, pair=tiny_pair)
    m = load_manifest(folder)
    assert sum(x["generated_tokens"] for x in m["shards"]) >= 150
    first = (folder / "shard_00000.npz").read_bytes()
    seqs = list(iter_sequences(folder))
    assert len(seqs) == 4 * len(m["shards"])
    prompts = json.loads(open(prompts_file).read())["prompts"]
    for seq in seqs:
        encoded = tiny_pair.tokenizer(prompts[seq.prompt_index]["text"]).input_ids[0]
        assert seq.ids[: seq.prompt_len].tolist() == encoded
        assert seq.prompt_len < len(seq.ids) <= seq.prompt_len + 24
        assert seq.ids.max() < tiny_pair.target.config.vocab_size
    # Extending keeps the finished shards bit for bit and appends new ones.
    generate_onpolicy(folder, 400, s, progress=False, pair=tiny_pair)
    m2 = load_manifest(folder)
    assert len(m2["shards"]) > len(m["shards"])
    assert (folder / "shard_00000.npz").read_bytes() == first
    # Reproducible: the same settings elsewhere give the same tokens.
    other = tmp_path / "again"
    generate_onpolicy(other, 150, s, progress=False, pair=tiny_pair)
    a = [x.ids.tolist() for x in iter_sequences(folder, [0])]
    b = [x.ids.tolist() for x in iter_sequences(other, [0])]
    assert a == b


def test_generate_onpolicy_refuses_other_settings(tmp_path, tiny_pair, prompts_file):
    folder = tmp_path / "data"
    generate_onpolicy(folder, 20, data_settings(prompts_file), progress=False, pair=tiny_pair)
    with pytest.raises(ValueError, match="other settings"):
        generate_onpolicy(
            folder, 40, data_settings(prompts_file, seed=1), progress=False, pair=tiny_pair
        )


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"max_new_tokens": 2.5}, "max_new_tokens"),
        ({"temperature": 0}, "temperature"),
        ({"seed": -1}, "seed"),
    ],
)
def test_data_settings_bad_arguments(kw, name):
    with pytest.raises(ValueError, match=name):
        DataSettings(**kw)


def test_sample_batch_follows_the_target_law_with_rows_leaving(tiny_pair):
    """Rows of different lengths share the batch; rows that emit EOS leave it (their cache rows are
    dropped); the first 2 tokens after the test prompt still follow the target's exact law."""

    target = tiny_pair.target
    prompt = PROMPT.tolist()
    others = [[0, 3], [0, 7, 7, 7, 7, 7, 7, 7, 9], [0, 12, 1, 5, 6]]
    law = exact_continuation_law(target, PROMPT, Warp(1.0), 2)
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    gen = torch.Generator().manual_seed(0)
    left = 0
    for _ in range(40):
        batch = [prompt if r % 2 == 0 else others[r % 3] for r in range(40)]
        out = sample_batch(target, batch, 3, eos={1}, pad_id=1, generator=gen)
        for r, seq in enumerate(out):
            cont = seq[len(batch[r]) :]
            assert 1 <= len(cont) <= 3 and (len(cont) == 3 or cont[-1] == 1)
            left += len(cont) < 3
            if r % 2 == 0 and len(cont) >= 2:
                counts[index[tuple(cont[:2])]] += 1
    # Rows whose first token is EOS have no second token: compare the law given "first != EOS".
    mask = np.array([k[0] != 1 for k in keys])
    probs = np.array([law[k] for k in keys])[mask]
    res = chisquare_gof(probs=probs / probs.sum(), counts=counts[mask], max_bins=60)
    assert left > 20  # rows did leave the batch early
    assert res.pvalue > 1e-3, res
