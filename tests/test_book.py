"""The HTML edition (``make book``) reads offline: each page, opened in headless Chromium with every
network request refused, shows its maths typeset by the MathJax copied into the build, and no raw
TeX delimiters. ``make test`` runs this after ``make book`` with ``SPECDEC_BOOK_REQUIRED=1``; run
alone without a build or a Chromium, it skips and says why."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "build" / "book"
REQUIRED = os.environ.get("SPECDEC_BOOK_REQUIRED") == "1"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PAGES = sorted(BOOK.glob("0[0-9]_*.html")) if BOOK.is_dir() else []


def _missing() -> str | None:
    if not PAGES:
        return "no HTML edition in build/book (make book builds it)"
    if CHROMIUM is None:
        return "no Chromium on this machine (make test installs Debian's chromium)"
    return None


def _dom(page: Path) -> str:
    """The page's DOM after its scripts ran, with the network refused."""
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
        "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
        "--virtual-time-budget=20000", "--allow-file-access-from-files", page.as_uri(),
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout


def test_the_book_builds_and_a_browser_is_there():
    if REQUIRED:
        assert _missing() is None, _missing()
    elif _missing():
        pytest.skip(_missing())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_a_page_typesets_its_maths_offline(page):
    if _missing():
        pytest.skip(_missing())
    dom = _dom(page)
    assert 'src="_static/mathjax/tex-chtml.js"' in dom or "_static/mathjax/" in dom
    text = re.sub(r"<script\b.*?</script>", "", dom, flags=re.S)
    assert "<mjx-container" in text, f"{page.name}: no maths typeset"
    assert "\\(" not in text and "\\[" not in text, f"{page.name}: raw TeX left on the page"
