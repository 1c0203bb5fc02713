"""The series' figures, one module per notebook, named after it.

``acceptance_rule`` draws notebook ``01_acceptance_rule``'s figures, ``distribution_check`` those
of ``02_distribution_check``, and so on to ``drafting_appendix`` for ``06_drafting_appendix``. A
figure function takes data the notebook computed (arrays, DataFrames, dicts of results) and
returns the :class:`~matplotlib.figure.Figure`; it computes no statistics and reads no files. Its
docstring says what it draws and the name the notebook saves it under. A figure cell is then a
few lines::

    from specdec_lib.figures import acceptance_rule as figs
    from specdec_lib.figures.style import savefig

    fig = figs.tokens_per_step(K_grid, expected, mc, n_steps=N_STEPS)
    savefig("01_tokens_per_step", fig);

A function a later notebook draws with again stays in the module of the first. The style (theme,
palette, ``savefig``) is :mod:`specdec_lib.figures.style`; this package imports the core and the
core never imports it.
"""
