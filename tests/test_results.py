"""Prompt files (``specdec_lib.results.load_prompts``): malformed files refused with the path and the reason; the committed benchmark prompts load."""

from __future__ import annotations

import pytest

from specdec_lib.results import load_prompts


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
