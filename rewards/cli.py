"""Command line: debug rewards offline.

``python -m rewards score FILE.jsonl --reward NAME [--step N] [--stage S] [key=value ...]``
reads one sample per line (``{"group": ..., "text": ..., "answer": ...}``), groups lines by
``group`` (a line without one is its own group), scores each group and prints one JSON
object per sample, in input order: reward, correct, extracted answer, format validity,
error (if any) and every component.  ``key=value`` pairs set reward params, e.g.
``beta_sub=0.1 alpha=0.1 f=sigmoid format=parason``.

``python -m rewards list`` prints every reward with its params and defaults;
``python -m rewards goldcheck`` runs the real-data verification check.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from rewards.analysis import analyze_group
from rewards.api import analysis_options, score_samples
from rewards.pool import TimeoutPool
from rewards.registry import get_reward, make_params, reward_names
from rewards.types import RewardContext
from rewards.verify import slow_verify

__all__ = ["main", "parse_kv", "read_groups"]


def parse_kv(pairs: Sequence[str]) -> dict[str, str]:
    """``["a=1", "f=sigmoid"]`` -> ``{"a": "1", "f": "sigmoid"}``; ValueError on a bad pair."""
    out = {}
    for p in pairs:
        key, sep, val = p.partition("=")
        if not sep or not key:
            raise ValueError(f"expected key=value, got {p!r}")
        out[key.strip()] = val.strip()
    return out


def read_groups(lines: Sequence[str]) -> tuple[dict[str, list[int]], list[dict[str, Any]]]:
    """Parse JSONL lines -> (group key -> line indices in order, rows).  ValueError with the
    line number on a malformed line or on answers that disagree within a group."""
    rows: list[dict[str, Any]] = []
    groups: dict[str, list[int]] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"line {n}: not JSON ({e.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise ValueError(f"line {n}: need an object with a string 'text'")  # noqa: TRY004 - bad input, one error type
        key = str(row["group"]) if "group" in row else f"__line{n}"
        idx = groups.setdefault(key, [])
        if idx and str(rows[idx[0]].get("answer", "")) != str(row.get("answer", "")):
            raise ValueError(f"line {n}: group {key!r} has two different answers")
        row["_line"] = n
        idx.append(len(rows))
        rows.append(row)
    return groups, rows


def _score(args: argparse.Namespace, out: TextIO) -> int:
    params = make_params(args.reward, parse_kv(args.params))
    with open(args.file, encoding="utf-8") as f:
        groups, rows = read_groups(f.readlines())
    opts = analysis_options(args.reward, params)
    results: dict[int, dict[str, Any]] = {}
    with TimeoutPool(slow_verify, workers=args.workers, timeout_s=args.timeout) as pool:
        for key, idx in groups.items():
            gold = str(rows[idx[0]].get("answer", ""))
            samples = analyze_group([rows[i]["text"] for i in idx], gold, opts, pool)
            ctx = RewardContext(step=args.step, stage=args.stage, ground_truth=gold)
            sc = score_samples(args.reward, samples, ctx, params)
            for j, (i, s) in enumerate(zip(idx, samples)):
                results[i] = {
                    "line": rows[i]["_line"],
                    "group": rows[i].get("group", key),
                    "reward": sc.rewards[j],
                    "correct": sc.correct[j],
                    "pred": s.pred,
                    "format_valid": s.format_valid,
                    "error": s.error,
                    "components": {k: v[j] for k, v in sc.components.items()},
                }
    for i in range(len(rows)):
        out.write(json.dumps(results[i]) + "\n")
    return 0


def _list(out: TextIO) -> int:
    for name in reward_names():
        e = get_reward(name)
        defaults = {f.name: f.default for f in dataclasses.fields(e.params_cls)}
        out.write(json.dumps({"reward": name, "params": defaults, "doc": e.doc.splitlines()[0]}) + "\n")
    return 0


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    ap = argparse.ArgumentParser(prog="python -m rewards", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sc = sub.add_parser("score", help="score a JSONL file of samples")
    sc.add_argument("file")
    sc.add_argument("--reward", required=True, help=f"one of: {', '.join(reward_names())}")
    sc.add_argument("--step", type=int, default=0, help="0-based global step (S2 schedule)")
    sc.add_argument("--stage", default="")
    sc.add_argument("--workers", type=int, default=1)
    sc.add_argument("--timeout", type=float, default=10.0, help="per-item verification timeout (s)")
    sc.add_argument("params", nargs="*", help="reward params as key=value")
    sub.add_parser("list", help="list rewards and their params")
    gc = sub.add_parser("goldcheck", help="verify every gold answer of the real data against itself")
    gc.add_argument("--data-dir", default=None)
    gc.add_argument("--workers", type=int, default=2)
    # key=value pairs may follow options (argparse leaves them over): collect them here
    args, extra = ap.parse_known_args(argv)
    bad = [x for x in extra if "=" not in x or x.startswith("-")]
    if bad or (extra and args.cmd != "score"):
        ap.error(f"unrecognized arguments: {' '.join(bad or extra)}")
    try:
        if args.cmd == "score":
            args.params = list(args.params) + extra
            return _score(args, out)
        if args.cmd == "list":
            return _list(out)
        from rewards.goldcheck import DEFAULT_DATA_DIR, run_goldcheck

        out.write(json.dumps(run_goldcheck(args.data_dir or DEFAULT_DATA_DIR, workers=args.workers)) + "\n")
        return 0
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
