"""``python -m parallax.evaluation score FILE --reward NAME [--step N] [--stage S] [key=value ...]``: debug
rewards offline.

Reads one sample per row (``{"group": ..., "text": ..., "answer": ...}``; JSONL, JSON or parquet;
other shapes through ``--text-field`` / ``--answer-field`` / ``--group-field`` dotted paths, verl's
dataset schema and rollout dumps without them), groups rows by ``group`` (a verl dump by its
prompt ``input``; a row without one is its own group), scores each group and prints one JSON
object per sample, in input order: reward, correct, extracted answer, format validity,
error (if any) and every component.  ``key=value`` pairs set reward params, e.g.
``beta_sub=0.1 alpha=0.1 f=sigmoid format=parason``. ``python -m rewards list`` names the rewards.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from parallax.formats.spec import FORMAT_NAMES, FORMAT_OPTIONS, PLACEMENTS
from parallax.trainingdata.fields import ANSWER_FIELDS, TEXT_FIELDS, FieldError, field, find_field, text_of
from parallax.trainingdata.rows import Row, parse_line, read_rows
from rewards.analysis import analyze_group
from rewards.api import analysis_options, score_samples
from rewards.pool import TimeoutPool
from rewards.registry import make_params, reward_names
from rewards.types import RewardContext
from rewards.verify import preload_modules, slow_verify

__all__ = ["add_cli", "group_rows", "parse_kv", "read_groups"]


def parse_kv(pairs: Sequence[str]) -> dict[str, str]:
    """``["a=1", "f=sigmoid"]`` -> ``{"a": "1", "f": "sigmoid"}``; ValueError on a bad pair."""
    out = {}
    for p in pairs:
        key, sep, val = p.partition("=")
        if not sep or not key:
            raise ValueError(f"expected key=value, got {p!r}")
        out[key.strip()] = val.strip()
    return out


def group_rows(rows: Iterable[Row], text_field: str | None = None, answer_field: str | None = None,
               group_field: str | None = None) -> tuple[dict[str, list[int]], list[dict[str, Any]]]:
    """Rows -> (group key -> row indices in order, samples ``{"text", "answer", "group", "_line"}``).

    Fields are dotted paths (`parallax.trainingdata.fields`); unset, the text is the first of `TEXT_FIELDS`, the answer
    the first of `ANSWER_FIELDS`, the group `group` -- or, in a verl rollout dump (`input`, `output`,
    `gts`), the prompt `input`, whose n samples are one GRPO group. A row without a group is its own.
    ValueError naming the line on a malformed row, a missing field or answers that disagree in a group.
    """
    samples: list[dict[str, Any]] = []
    groups: dict[str, list[int]] = {}
    for row in rows:
        n, obj = row.line, row.data
        if row.error is not None:
            raise ValueError(f"line {n}: {row.message}")
        try:
            text, answer, key = _fields(obj, n, text_field, answer_field, group_field)
        except FieldError as e:
            raise ValueError(f"line {n}: {e}") from None
        idx = groups.setdefault(key, [])
        if idx and str(samples[idx[0]]["answer"]) != str(answer):
            raise ValueError(f"line {n}: group {key[:60]!r} has two different answers")
        idx.append(len(samples))
        samples.append({"text": text, "answer": answer, "group": obj.get("group", key), "_line": n})
    return groups, samples


def _fields(obj: dict, n: int, text_field: str | None, answer_field: str | None,
            group_field: str | None) -> tuple[str, str, str]:
    """(text, answer, group key) of one row (the `group_rows` defaults)."""
    tpath = text_field or find_field(obj, TEXT_FIELDS)
    text = text_of(field(obj, tpath)) if tpath else None
    if not isinstance(text, str):
        raise FieldError(f"no trajectory text at {tpath or TEXT_FIELDS} (set --text-field)")
    apath = answer_field or find_field(obj, ANSWER_FIELDS)
    value = field(obj, apath) if apath else ""
    answer = str(value) if isinstance(value, (int, float)) else (text_of(value) or "")
    gpath = group_field or ("group" if "group" in obj else "input" if {"input", "gts"} <= set(obj) else None)
    return text, answer, str(text_of(field(obj, gpath)) if gpath else f"__line{n}")


def read_groups(lines: Sequence[str], **fields: str | None) -> tuple[dict[str, list[int]], list[dict[str, Any]]]:
    """`group_rows` over JSONL lines (blank lines skipped)."""
    return group_rows((parse_line(n, line.rstrip("\r\n")) for n, line in enumerate(lines, 1) if line.strip()),
                      **fields)


def _score(args: argparse.Namespace, out: TextIO) -> int:
    kv = parse_kv(args.params)
    for key in ("format", *FORMAT_OPTIONS):  # a flag set on the command line; key=value wins
        if getattr(args, key, None) is not None and key not in kv:
            kv[key] = str(getattr(args, key))
    params = make_params(args.reward, kv)
    groups, rows = group_rows(read_rows(args.file), args.text_field, args.answer_field, args.group_field)
    opts = analysis_options(args.reward, params)
    results: dict[int, dict[str, Any]] = {}
    # the verifier's imports happen before any item's clock starts (a cold verl import is 5-8 s)
    with TimeoutPool(slow_verify, workers=args.workers, timeout_s=args.timeout,
                     preload=preload_modules({params.verifier})) as pool:
        for idx in groups.values():
            gold = str(rows[idx[0]].get("answer", ""))
            samples = analyze_group([rows[i]["text"] for i in idx], gold, opts, pool)
            ctx = RewardContext(step=args.step, stage=args.stage, ground_truth=gold)
            sc = score_samples(args.reward, samples, ctx, params)
            for j, (i, s) in enumerate(zip(idx, samples)):
                results[i] = {
                    "line": rows[i]["_line"],
                    "group": rows[i]["group"],
                    "reward": sc.rewards[j],
                    "correct": sc.correct[j],
                    "pred": s.pred,
                    "format_valid": s.format_valid,
                    "error": s.error,
                    "reason": s.reason,  # why correct is false: no_answer, too_long, unparseable, mismatch, ...
                    "components": {k: v[j] for k, v in sc.components.items()},
                }
    for i in range(len(rows)):
        out.write(json.dumps(results[i]) + "\n")
    return 0


def add_cli(sub) -> None:
    """Register ``score`` on the ``python -m parallax.evaluation`` parser (its ``key=value`` pairs may follow options:
    `parallax.evaluation.cli.main` hands over what argparse leaves)."""
    sc = sub.add_parser("score", help="score a file of samples with a reward, one JSON line per sample")
    sc.add_argument("file", help="JSONL, JSON or parquet (verl datasets and rollout dumps read as they are)")
    sc.add_argument("--text-field", default=None, help=f"dotted path of the text (default: first of {TEXT_FIELDS})")
    sc.add_argument("--answer-field", default=None,
                    help=f"dotted path of the reference answer (default: first of {ANSWER_FIELDS})")
    sc.add_argument("--group-field", default=None,
                    help="dotted path grouping samples (default: group; verl dumps: input)")
    sc.add_argument("--reward", required=True, help=f"one of: {', '.join(reward_names())}")
    sc.add_argument("--step", type=int, default=0, help="0-based global step (S2 schedule)")
    sc.add_argument("--stage", default="")
    sc.add_argument("--workers", type=int, default=1)
    sc.add_argument("--timeout", type=float, default=10.0, help="per-item verification timeout (s)")
    sc.add_argument("--format", default=None, choices=FORMAT_NAMES, help="trajectory format (param format=)")
    sc.add_argument("--summary-placement", default=None, choices=PLACEMENTS,
                    help="where the format writes the Parallel-R1 summary (default: after </Parallel>)")
    sc.add_argument("--summary-accept", default=None,
                    help="comma-separated summary placements the parser accepts (default: after,inside)")
    sc.add_argument("--no-aliases", dest="aliases", action="store_const", const=False, default=None,
                    help="reject the Parason release's <Outline> entries and <Conclusion>")
    sc.add_argument("--outline-kind", default=None, choices=("outline", "subtask", "trial"),
                    help="what an untyped <Outline> entry counts as (default: neither)")
    sc.add_argument("params", nargs="*", help="reward params as key=value")
    sc.set_defaults(run=lambda args: _score(args, args.stream))
