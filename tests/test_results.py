"""Provenance and prompt files (``specdec_lib.results``): the machine named in every result and
comparisons across machines refused; malformed prompt files refused with the path and the reason;
the committed benchmark prompts load."""

from __future__ import annotations

import pytest

from specdec_lib.results import (
    check_same_machine,
    load_prompts,
    machine_info,
    machine_key,
    provenance,
)


@pytest.mark.parametrize(
    "content, match",
    [
        ("{not json", "not valid JSON"),
        ('{"prompts": []}', "must hold"),
        ('{"prompts": [{"text": ""}]}', "non-empty"),
    ],
)
def test_malformed_prompts(tmp_path, content, match):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=match):
        load_prompts(path)
    with pytest.raises(ValueError, match="does not exist"):
        load_prompts(tmp_path / "missing.json")


def test_default_prompts_file():
    prompts = load_prompts()
    assert len(prompts) == 20
    cats = {p["category"] for p in prompts}
    assert len(cats) == 5 and all(sum(p["category"] == c for p in prompts) == 4 for c in cats)


def test_provenance_names_the_machine():
    m = provenance(seed=0)["machine"]
    assert m == machine_info() and m["cores"] >= 1 and m["torch_threads"] >= 1
    assert m["memory_bandwidth_gbs"] > 0 and set(m["isa"]) <= {
        "avx2",
        "avx512f",
        "avx512bw",
        "avx512_bf16",
        "amx_bf16",
        "amx_tile",
        "avx_vnni",
    }
    assert m["cpu"] in machine_key({"machine": m})


def test_results_from_two_machines_are_not_compared(monkeypatch):
    for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS"):
        monkeypatch.delenv(name, raising=False)  # this machine as it is
    here = {"provenance": {"machine": machine_info()}}
    assert check_same_machine([here, here], "x") == machine_key(here["provenance"])
    # the same CPU name, another generation (the model name alone does not tell them apart)
    other = {**machine_info(), "family_model_stepping": "25/1/1"}
    with pytest.raises(ValueError, match="speedup table: the results come from 2 machines"):
        check_same_machine([here, {"provenance": {"machine": other}}], "speedup table")
    # kernels limited to AVX2 on this machine are another machine's kernels
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    with pytest.raises(ValueError, match="kernels limited: ATEN_CPU_CAPABILITY=avx2"):
        check_same_machine([here, {"provenance": {"machine": machine_info()}}], "levers")
    # results stored before provenance named the machine: their CPU name and core count
    old = [{"provenance": {"cpu": "AMD EPYC", "cpu_count": 2}}, {"provenance": {"cpu": "Intel"}}]
    with pytest.raises(ValueError, match="AMD EPYC, 2 cores"):
        check_same_machine(old, "old")


def test_read_json_notes_what_it_read(tmp_path):
    import hashlib

    from specdec_lib.results import read_json, results_read

    path = tmp_path / "r.json"
    path.write_text('{"a": 1}')
    assert read_json(path) == {"a": 1}
    digest = hashlib.sha256(b'{"a": 1}').hexdigest()[:16]
    assert f"sha256:{digest}  {path}" in results_read().splitlines()


def test_describe_machine_names_the_matrix_kernels_and_the_bandwidth():
    from specdec_lib.results import describe_machine

    m = {"cpu": "AMD EPYC 7B13", "family_model_stepping": "25/1/1", "cores": 2, "isa": ["avx2"],
         "isa_limits": {}, "memory_bandwidth_gbs": 19.5}  # fmt: skip
    assert (
        describe_machine(m) == "AMD EPYC 7B13 (25/1/1, AVX2, bfloat16 emulated), 2 cores, 19.5 GB/s"
    )
    amx = {**m, "isa": ["amx_bf16", "avx2"], "isa_limits": {"ONEDNN_MAX_CPU_ISA": "AVX2"}}
    assert "AMX, kernels limited by ONEDNN_MAX_CPU_ISA=AVX2)" in describe_machine(amx)
