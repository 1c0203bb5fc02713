"""The README's headline is the campaign's (``Campaign.headline`` on data/results/campaign/), not a
copy: the K chosen on the first run, confirmed on the replicate, and greedy, each with its interval,
and the machine it was measured on."""

import re
from pathlib import Path

import pytest

from specdec_lib.config import RESULTS_DIR
from specdec_lib.research.campaign import Campaign

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = RESULTS_DIR / "campaign"


@pytest.fixture(scope="module")
def paragraph() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"\*\*The headline\.\*\*.*?\n\n", text, flags=re.S)
    assert m, "README.md: the paragraph that opens with **The headline.** is missing"
    return " ".join(m.group().split())


@pytest.mark.skipif(
    not (CAMPAIGN / "bench_recommended_greedy.json").exists(), reason="no campaign committed"
)
def test_readme_headline_is_the_campaigns(paragraph):
    h = Campaign.read(CAMPAIGN).headline()
    assert f"`K = {h['K']}`" in paragraph, f"README.md: the best K is {h['K']}"
    for name in ("T1", "replicate", "greedy"):
        r = h[name]
        point, interval = f"{r['speedup']:.2f}×", f"{r['low']:.2f}–{r['high']:.2f}×"
        assert point in paragraph, f"README.md: {name} at K = {h['K']} is {point}"
        assert interval in paragraph, f"README.md: {name}'s 95% interval is {interval}"
    machine = Campaign.read(CAMPAIGN).machine  # as the notebooks name it: the manifest's record
    assert machine in paragraph, f"README.md: name the campaign's machine, {machine}"


@pytest.mark.skipif(not (CAMPAIGN / "manifest.json").exists(), reason="no campaign committed")
def test_data_readme_describes_each_campaign_run_as_it_ran():
    # each row of data/README.md's table names its plan runs; where it states a K range, it is
    # the range the run's command asked for, and every run of the manifest has its row
    from specdec_lib.results import read_json

    manifest = read_json(CAMPAIGN / "manifest.json")
    rows = [
        r for r in (ROOT / "data" / "README.md").read_text().splitlines() if r.startswith("| `")
    ]
    described = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        for name in re.findall(r"`(\w+)`", cells[-1]):
            described[name] = cells[1]
    assert set(described) == set(manifest["runs"])
    for name, what in described.items():
        cmd = manifest["runs"][name]["command"]
        stated = re.search(r"K = (\d+)\.\.(\d+)", what)
        if stated and "--K" in cmd:
            Ks = []
            for a in cmd[cmd.index("--K") + 1 :]:
                if a.startswith("--"):
                    break
                Ks.append(int(a))
            assert (min(Ks), max(Ks)) == tuple(map(int, stated.groups())), name


@pytest.mark.skipif(
    not (CAMPAIGN / "bench_recommended_greedy.json").exists(), reason="no campaign committed"
)
def test_readme_table_is_the_campaigns():
    """The README's table of speedups by K: each row's numbers are the campaign's recommended runs
    (point and 95% interval at T = 1 and greedy), at every K both runs measured."""
    from specdec_lib.bench import runs_frame

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [r for r in text.splitlines() if re.match(r"\| \d+ \|", r)]
    runs = Campaign.read(CAMPAIGN).runs(["recommended_T1", "recommended_greedy"])
    frames = {
        name: runs_frame(res, intervals=True).query("method == 'speculative'").set_index("K")
        for name, res in runs.items()
    }
    Ks = sorted(set(frames["recommended_T1"].index) & set(frames["recommended_greedy"].index))
    assert [int(r.split("|")[1]) for r in rows] == Ks, "README.md: one row per K measured"
    for row in rows:
        K = int(row.split("|")[1])
        for name in ("recommended_T1", "recommended_greedy"):
            f = frames[name].loc[K]
            cell = f"{f.speedup:.2f}× [{f.speedup_low:.2f}, {f.speedup_high:.2f}]"
            assert cell in row, f"README.md, K = {K}: {name} is {cell}"
    if "every `K`'s point lies within every other `K`'s interval" in " ".join(text.split()):
        for f in frames.values():
            assert (
                f.speedup.max() <= f.speedup_high.min() and f.speedup.min() >= f.speedup_low.max()
            )


@pytest.mark.skipif(not (CAMPAIGN / "peers_T1.json").exists(), reason="no peers run committed")
def test_readme_llamacpp_sentence_is_the_campaigns():
    """The README's comparison with llama.cpp: tokens/s of llama.cpp one token a pass and of the
    recommended configuration, and their ratio with its interval, at T = 1 and greedy."""
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    m = re.search(r"\*\*Against llama\.cpp\.\*\*.*?(?=\*\*|$)", text)
    assert m, "README.md: the paragraph that opens with **Against llama.cpp.** is missing"
    para = m.group()
    for name in ("peers_T1", "peers_greedy"):
        rows = {r["method"]: r for r in Campaign.read(CAMPAIGN).run(name)["summary"]}
        lcp, spec = rows["llamacpp_autoregressive"], rows["speculative"]
        low, high = spec["vs_llamacpp_ci"]
        ratio = f"{spec['tokens_per_s'] / lcp['tokens_per_s']:.2f}× [{low:.2f}, {high:.2f}]"
        assert ratio in para, f"README.md: {name}'s ratio is {ratio}"
        assert f"{lcp['tokens_per_s']:.0f} tokens/s" in para, name
        assert f"{spec['tokens_per_s']:.0f} tokens/s" in para, name


@pytest.mark.skipif(
    not (CAMPAIGN / "peer_sampler.json").exists(), reason="no peer sampler run committed"
)
def test_readme_peer_sampler_sentence_is_the_campaigns():
    """The README's sentence on llama.cpp's own speculative sampler: rejected against the
    target's law, with the p-values of both tests as the campaign measured them."""
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    tests = Campaign.read(CAMPAIGN).run("peer_sampler")["tests"]
    target, rule = tests["target_law"]["pvalue"], tests["argmax_draft_law"]["pvalue"]
    assert target < 1e-3 < rule, "the campaign's peer sampler run no longer says what README says"
    shown = "p below 1e-300" if target < 1e-300 else f"p = {target:.1g}"
    assert "llama.cpp's own speculative sampling" in text and shown in text, shown
    assert f"p = {rule:.2f}" in text, f"p = {rule:.2f}"
    n = Campaign.read(CAMPAIGN).run("peer_sampler")["n"]
    assert f"over {n} runs" in text, f"over {n} runs"
