"""figures.provenance: what a page read, one line per source, every file's hash kept."""

from specdec_lib.figures import provenance


def test_each_source_is_named_once_and_every_file_keeps_its_hash(monkeypatch):
    lines = [
        "sha256:aaaaaaaaaaaaaaaa  data/results/campaign/bench_x.json",
        "sha256:bbbbbbbbbbbbbbbb  data/results/campaign/bench_y.json",
        "sha256:cccccccccccccccc  data/prompts.json",
    ]
    monkeypatch.setattr(
        provenance, "_source", lambda p: "campaign" if "campaign" in p else "inputs"
    )
    read = provenance.DataRead(lines)
    assert repr(read).splitlines() == ["Read: campaign (2 files); inputs (1 file)", *lines]
    assert "<details>" in read._repr_html_() and "bench_y.json" in read._repr_html_()


def test_a_file_with_its_own_provenance_names_its_machine_and_commit():
    source = provenance._source("data/results/gpu_run_cuda.json")
    assert source.startswith("a GPU run, on NVIDIA") and "commit " in source
    assert provenance._source("data/prompts.json") == "inputs, not measurements"


def test_a_page_that_read_nothing_says_so():
    read = provenance.DataRead([])
    assert repr(read) == provenance.NOTHING and provenance.NOTHING in read._repr_html_()
