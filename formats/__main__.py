"""``python -m formats``: the format tools that read files live with the evaluation tools."""

import sys

print("error: `python -m formats stats` moved to `python -m evaluation stats` (same arguments)", file=sys.stderr)
sys.exit(2)
