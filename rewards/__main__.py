"""``python -m rewards ...``: see :mod:`rewards.cli`."""

import sys

from rewards.cli import main

if __name__ == "__main__":
    sys.exit(main())
