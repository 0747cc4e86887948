"""Look at toy-world data.

    python -m parallax.toyworld sample --family mixed -n 5 --seed 0 --difficulty 1
    python -m parallax.toyworld sample --family trial -n 3 --difficulty 1,2,3   # mixed difficulty
    python -m parallax.toyworld sample --family mixed -n 4 --difficulty subtask:1,trial:7   # per family
    python -m parallax.toyworld stats --family all -n 400 --difficulty 1,3,5 --tokenizer runs/X/model_init
                                                                        # where a fork pays, in a model's tokens

``sample`` prints one JSON object per problem (uid, family, difficulty, prompt, answer, traces);
``stats`` the teacher's serial length against its parallel critical path, per stratum
(``parallax/toyworld/stats.py``), as a table and one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from parallax.toyworld.generate import Difficulty, as_difficulty, iter_problems
from parallax.toyworld.problem import FAMILY_CHOICES


def _difficulty(text: str) -> Difficulty:
    try:
        return as_difficulty(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parallax.toyworld", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sample = sub.add_parser("sample", help="print generated problems as JSONL")
    stats = sub.add_parser("stats", help="the teacher's critical path against its serial length, per stratum")
    for p, n in ((sample, 5), (stats, 400)):
        p.add_argument("--family", default="mixed",
                       help=f"{', '.join(FAMILY_CHOICES)}, or families joined by '+' (subtask+mul)")
        p.add_argument("-n", type=int, default=n)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--difficulty", type=_difficulty, default=1,
                       help="int, comma list (1,2,3) or per family (subtask:1,trial:6/7)")
    stats.add_argument("--tokenizer", default=None,
                       help="a Hugging Face tokenizer directory whose tokens to count (a tiny run's model_init/: "
                            "digits one token each); default: the format module's words")
    args = parser.parse_args(argv)
    if args.n < 0:
        parser.error("-n must be >= 0")
    try:  # the levels against the family's cycle, before any output
        next(iter_problems(args.family, 1, args.seed, args.difficulty))
    except (TypeError, ValueError) as e:
        parser.error(f"--difficulty: {e}")
    try:
        if args.cmd == "stats":
            _stats(args)
        else:
            for p in iter_problems(args.family, args.n, args.seed, args.difficulty):  # streamed: constant memory
                sys.stdout.write(json.dumps(dataclasses.asdict(p)) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _stats(args: argparse.Namespace) -> None:
    from parallax.toyworld.stats import format_stats, teacher_stats

    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    table = teacher_stats(iter_problems(args.family, args.n, args.seed, args.difficulty), tokenizer)
    print(format_stats(table))
    print(json.dumps({"units": args.tokenizer or "words", "family": args.family, "strata": table}))


if __name__ == "__main__":
    sys.exit(main())
