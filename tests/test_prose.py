"""The prose speaks of its subject: no chronology, no process, no control characters.

Scanned: the markdown cells of every notebook twin, the strings a code cell renders as text
(``Markdown(...)`` and ``print(...)`` arguments), ``README.md`` and every ``data/**/README*.md``.
Code spans and link targets are left out, so that a JSON field (```sessions```) or a URL can be
named."""

import ast
import re
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
TWINS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
READMES = [ROOT / "README.md", *sorted((ROOT / "data").rglob("README*.md"))]

# Each pattern names a way the text can speak of how it was made instead of what it found.
PROCESS_WORDS = {
    "sessions": r"\bsessions?\b",
    "issues or work items": r"\bissues?\b|\bwork items?\b|\btickets?\b",
    "paths outside the repository": r"\.\./shared|\bMEASURED\.md\b",
    "goals set outside the series": r"\bgoals?\b|\b(?:aim|target)(?:ed|s)? (?:of|for|at) \d",
    "when something was written or measured": (
        r"this series was written|committed runs of|\bmeasured (?:on|in) 20\d\d"
        r"|\bsittings?\b|\b20\d\d-\d\d-\d\d\b"
    ),
    "the history of fixes": (
        r"first version of|\b(?:was|were) (?:later )?(?:fixed|discarded)\b"
        r"|\bhappened once\b|\bno longer\b"
    ),
}
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

_CODE_SPAN = re.compile(r"```.*?```|`[^`\n]*`", re.S)
_LINK_TARGET = re.compile(r"\]\([^)]*\)|https?://\S+")


def _rendered_strings(source: str) -> list[str]:
    # The string constants passed to Markdown(...) or print(...), f-strings included.
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a cell with IPython magics: nothing rendered to check
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if name in {"Markdown", "print"}:
                for arg in node.args:
                    for sub in ast.walk(arg):
                        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                            out.append(sub.value)
    return out


def _texts(path: Path) -> list[tuple[str, str]]:
    """(where, text) pairs: every piece of prose a reader of ``path`` sees."""
    if path.suffix == ".md":
        return [(path.name, path.read_text(encoding="utf-8"))]
    texts = []
    for i, cell in enumerate(jupytext.read(path).cells):
        if cell.cell_type == "markdown":
            texts.append((f"{path.name} cell {i}", cell.source))
        elif cell.cell_type == "code":
            texts += [
                (f"{path.name} cell {i} (rendered)", s) for s in _rendered_strings(cell.source)
            ]
    return texts


def _hits(path: Path) -> list[str]:
    hits = []
    for where, text in _texts(path):
        prose = _LINK_TARGET.sub("]", _CODE_SPAN.sub("`…`", text))
        for what, pattern in PROCESS_WORDS.items():
            for m in re.finditer(pattern, prose, flags=re.I):
                context = prose[max(0, m.start() - 40) : m.end() + 40].replace("\n", " ")
                hits.append(f"{where}: {what}: …{context}…")
    return hits


@pytest.mark.parametrize("path", TWINS + READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_prose_speaks_of_the_subject(path):
    hits = _hits(path)
    assert not hits, "process words in the prose:\n" + "\n".join(hits)


@pytest.mark.parametrize(
    "path",
    TWINS + sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + READMES,
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_control_characters(path):
    # A "\a" or "\b" escape in a Python string renders "$\alpha$" as "lpha".
    text = path.read_text(encoding="utf-8")
    bad = [(text.count("\n", 0, m.start()) + 1, repr(m.group())) for m in CONTROL.finditer(text)]
    assert not bad, f"control characters (line, char): {bad[:10]}"


def test_the_scan_can_fail():
    # The patterns catch what they are for, and leave the maths and the subject alone.
    flagged = [
        "as measured in two sessions",
        "see issue 15",
        "the goal of 1.3x",
        "the aim of 1.3x is met",
        "../shared/MEASURED.md",
        "the committed runs of 2026-11-29",
        "the first version of merge_bins",
    ]
    clean = [
        "**Aim.** Notebooks 01 and 02 showed that speculative sampling is exact.",
        "acceptance $\\alpha$ = 0.42 at $K = 1$",
        "the `sessions` field of a results file",
        "[EAGLE#20](https://github.com/SafeAILab/EAGLE/issues/20)",
    ]
    for text in flagged:
        prose = _LINK_TARGET.sub("]", _CODE_SPAN.sub("`…`", text))
        assert any(re.search(p, prose, re.I) for p in PROCESS_WORDS.values()), text
    for text in clean:
        prose = _LINK_TARGET.sub("]", _CODE_SPAN.sub("`…`", text))
        assert not any(re.search(p, prose, re.I) for p in PROCESS_WORDS.values()), text
