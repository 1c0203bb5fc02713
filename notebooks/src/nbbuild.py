"""The shared scaffolding of the notebook builders (``build_NN.py``).

Each builder keeps one notebook's source reviewable as one Python file: ``md(...)`` and
``code(...)`` append cells, ``write(name)`` writes ``notebooks/<name>`` without outputs. Then
``ruff format`` the notebook and execute it in place (``make reproduce`` does the executing).
``SPECDEC_NB_OUT`` redirects the output folder (to compare a rebuild with the committed notebook).
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells: list = []


def md(text: str) -> None:
    cells.append(new_markdown_cell(text.strip("\n"), id=f"c{len(cells):02d}"))


def code(text: str) -> None:
    cells.append(new_code_cell(text.strip("\n"), id=f"c{len(cells):02d}"))


def write(name: str) -> Path:
    folder = Path(os.environ.get("SPECDEC_NB_OUT", Path(__file__).resolve().parents[1]))
    out = folder / name
    nb = new_notebook(cells=cells)
    nb.metadata = {
        "kernelspec": {
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "name": "python3",
        },
        "language_info": {"name": "python"},
    }
    nbformat.write(nb, out)
    print(f"wrote {out}")
    return out
