"""What a notebook read, for its last cell: one line per machine, commit and date the numbers
were measured on, with the files behind each line folded away.

The text form (what a plain viewer and the repository's tests read) keeps every file's SHA-256,
one ``sha256:<16 hex>  <path>`` line each (:func:`~specdec_lib.results.results_read`); the HTML
form shows the summary and folds the list.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from functools import cache
from pathlib import Path

from ..config import REPO_ROOT
from ..results import results_read

__all__ = ["DataRead", "data_read"]

CAMPAIGN = "data/results/campaign/"
NOTHING = "This page read no results files: every number on it is computed on the page."


@cache
def _campaign_source(manifest: Path) -> str:
    """The campaign whose ``manifest`` this is: machine, commit and start date, read once."""
    m = json.loads(manifest.read_text())
    machine = m["machine"]
    return (
        f"the campaign, on {machine['cpu']} ({machine['cores']} cores), commit "
        f"{m['commit'][:7]}, {m['started'][:10]}"
    )


def _source(path: str) -> str:
    """Where the numbers of the file at ``path`` (relative to the repository) were measured: the
    campaign, or the file's own provenance, or ``"inputs"`` for what is not a measurement."""
    full = REPO_ROOT / path
    if path.startswith(CAMPAIGN):
        return _campaign_source(full.parent / "manifest.json")
    try:
        prov = json.loads(full.read_text()).get("provenance")
    except (OSError, ValueError, AttributeError):
        prov = None
    if not isinstance(prov, dict) or "git_commit" not in prov:
        return "inputs, not measurements"
    device = prov.get("gpu") or prov.get("cpu", "an unnamed machine")
    what = "a GPU run" if prov.get("gpu") else "a run"
    return f"{what}, on {device}, commit {prov['git_commit'][:7]}, {prov.get('date', '')[:10]}"


class DataRead:
    """The files a page read, summarised by source (``summary``) and listed (``lines``)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        sources = Counter(_source(line.split(maxsplit=1)[1]) for line in lines)
        self.summary = [f"{src} ({n} file{'s' * (n > 1)})" for src, n in sources.items()]

    def __repr__(self) -> str:
        if not self.lines:
            return NOTHING
        return "\n".join(["Read: " + "; ".join(self.summary), *self.lines])

    def _repr_html_(self) -> str:
        if not self.lines:
            return f"<p>{NOTHING}</p>"
        items = "".join(f"<li>{html.escape(s)}</li>" for s in self.summary)
        files = html.escape("\n".join(self.lines))
        return (
            f"<p>What this page read:</p><ul>{items}</ul><details><summary>the "
            f"{len(self.lines)} files, with the first 16 digits of their SHA-256</summary>"
            f"<pre>{files}</pre></details>"
        )


def data_read() -> DataRead:
    """The results files this process read, for a notebook's last cell."""
    text = results_read()
    return DataRead([] if text == "none" else text.splitlines())
