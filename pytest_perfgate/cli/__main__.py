"""``python -m pytest_perfgate.cli`` is the ``perfgate`` console script."""

import sys

from pytest_perfgate.cli import main

sys.exit(main())
