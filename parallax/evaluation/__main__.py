"""``python -m parallax.evaluation`` -- see :mod:`parallax.evaluation.cli`."""

import sys

from parallax.evaluation.cli import main

sys.exit(main())
