"""The HTML edition of the series (``make book``): Sphinx with MyST-NB, over the notebooks as they
are committed, executed, with their outputs. Nothing runs again: the outputs are the publication.

Sphinx with MyST-NB rather than Jupyter Book 2: it is pure Python (Jupyter Book 2 builds with
Node.js), it renders stored outputs as they are (``nb_execution_mode = "off"``), and its ``-W``
turns a broken cross-reference or heading into a failed build, which ``make test`` runs.
"""

project = "specdec: speculative decoding, proven and measured"
author = "the specdec authors"
extensions = ["myst_nb", "sphinx-mathjax-offline"]  # MathJax 3 copied into the build
root_doc = "index"
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["*.py", ".ipynb_checkpoints", "_build"]
nb_execution_mode = "off"  # render the committed outputs; never execute
nb_merge_streams = True
nb_render_markdown_format = "myst"  # Markdown outputs with the same maths as the cells
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
html_theme = "sphinx_book_theme"
html_title = "Speculative decoding, proven and measured"
html_theme_options = {"show_toc_level": 2, "home_page_in_toc": True}
html_last_updated_fmt = None

# Maths render with MathJax 3, copied into the build by sphinx-mathjax-offline (a package the index
# serves) and linked from _static/: the edition reads offline, as the series runs.
# tests/test_book.py opens its pages in headless Chromium with the network off.
