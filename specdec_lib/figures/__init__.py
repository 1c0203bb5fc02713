"""The series' figures, one module per notebook, named after it (``acceptance_rule`` for
``01_acceptance_rule``, ...). A figure function takes data the notebook computed and returns the
:class:`~matplotlib.figure.Figure`; its docstring says what it draws and the name it is saved under
(:func:`~specdec_lib.figures.style.savefig`). A page whose findings are measured numbers has them
rendered by its module's ``findings(campaign)``, the first cell a reader meets (prose numbers:
:mod:`~specdec_lib.figures.words`). The core never imports this package."""
