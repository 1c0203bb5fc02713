"""The series' figures, one module per notebook, named after it (``acceptance_rule`` for
``01_acceptance_rule``, ...). A figure function takes data the notebook computed and returns the
:class:`~matplotlib.figure.Figure`; its docstring says what it draws and the name it is saved under
(:func:`~specdec_lib.figures.style.savefig`). The core never imports this package."""
