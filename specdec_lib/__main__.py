"""``python -m specdec_lib``: the command line of :mod:`specdec_lib.cli`."""

import sys

from specdec_lib.cli import main

sys.exit(main())
