"""``python -m rewards list`` prints every reward with its params and defaults;
``python -m rewards goldcheck`` runs the real-data verification check.

Scoring a file of samples reads data files, so it is an evaluation tool: ``python -m parallax.evaluation score``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from rewards.registry import get_reward, reward_names

__all__ = ["main"]


def _list(out: TextIO) -> int:
    for name in reward_names():
        e = get_reward(name)
        defaults = {f.name: f.default for f in dataclasses.fields(e.params_cls)}
        out.write(json.dumps({"reward": name, "params": defaults, "doc": e.doc.splitlines()[0]}) + "\n")
    return 0


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    ap = argparse.ArgumentParser(prog="python -m rewards", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list rewards and their params")
    gc = sub.add_parser("goldcheck", help="verify every gold answer of the real data against itself")
    gc.add_argument("--data-dir", default=None)
    gc.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "list":
            return _list(out)
        from rewards.goldcheck import DEFAULT_DATA_DIR, run_goldcheck

        out.write(json.dumps(run_goldcheck(args.data_dir or DEFAULT_DATA_DIR, workers=args.workers)) + "\n")
        return 0
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
