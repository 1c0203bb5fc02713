"""Host work per step (``specdec_lib.research.hostwork``): the allocator experiment says what it
set, and the greedy baseline without the argmax, run by the benchmark, emits the argmax's tokens."""

import json

from specdec_lib.bench import BenchSettings, run_benchmark
from specdec_lib.research.hostwork import BASELINES, InverseCDFDecoder, reuse_freed_memory


def test_reuse_freed_memory_says_what_it_set():
    got = reuse_freed_memory()
    assert got.startswith(("glibc mallopt", "unchanged"))  # glibc here; elsewhere, why not
    assert reuse_freed_memory() == got  # setting it again changes nothing


def test_greedy_baselines_agree_token_for_token(tmp_path, tiny_pair):
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"prompts": [{"category": "a", "text": "hello world"}] * 2}))
    s = BenchSettings(
        pair="tiny-random",
        K=[1],
        max_new_tokens=6,
        prompts=str(prompts),
        cost_reps=2,
        temperature=0.0,
        methods=["autoregressive", "autoregressive_inverse_cdf"],
    )
    res = run_benchmark(s, tmp_path / "g.json", progress=False, pair=tiny_pair, baselines=BASELINES)
    runs = {r["method"]: r for r in res["runs"]}
    assert runs["autoregressive_inverse_cdf"]["identical_to_autoregressive"] == 1.0
    assert BASELINES["autoregressive_inverse_cdf"] is InverseCDFDecoder
