"""The teacher's critical path against its serial length, per stratum (family x difficulty).

Where a fork pays: a Parason (or Parallel-R1) trace's critical path, the tokens on its longest
chain when the branches run at once (``parallax.formats.compute_metrics``), against the serial trace's
length.  ``python -m parallax.toyworld stats --family all --difficulty 1,2,3 --tokenizer DIR`` prints one row
per stratum and one JSON line; the unit is a model's token (``DIR``: a tiny run's ``model_init/``,
whose tokenizer writes each digit as a token), or without ``--tokenizer`` the format module's words.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from statistics import mean

from parallax.formats import compute_metrics, parse
from parallax.toyworld.problem import Problem

__all__ = ["STAT_COLUMNS", "format_stats", "teacher_stats"]

#: (key, header) of each column, in reading order.
STAT_COLUMNS = (
    ("n", "n"),
    ("serial", "serial"),
    ("parallel_r1", "R1 crit"),
    ("parason", "Parason crit"),
    ("parason_total", "Parason total"),
    ("speedup", "serial/crit"),
)


def _lengths(p: Problem, tokenizer) -> dict[str, float]:
    serial = compute_metrics(parse(p.traces["serial"], "parason"), "parason", tokenizer).total_tokens
    r1 = compute_metrics(parse(p.traces["parallel_r1"], "parallel_r1"), "parallel_r1", tokenizer)
    pa = compute_metrics(parse(p.traces["parason"], "parason"), "parason", tokenizer)
    return {"serial": serial, "parallel_r1": r1.critical_path_tokens, "parason": pa.critical_path_tokens,
            "parason_total": pa.total_tokens}


def teacher_stats(problems: Iterable[Problem], tokenizer=None) -> dict[str, dict[str, float]]:
    """Mean lengths per stratum ``"<family>/d<difficulty>"``, and ``"all"``: ``n``, ``serial`` (the
    serial trace's tokens), ``parallel_r1`` / ``parason`` (each parallel trace's critical path),
    ``parason_total`` and ``speedup`` = serial / Parason critical path (above 1: a fork pays).

    >>> from parallax.toyworld import generate
    >>> s = teacher_stats(generate("subtask", 20, seed=0, difficulty=1))  # words: each step is one
    >>> s["subtask/d1"]["n"], s["subtask/d1"]["serial"], s["all"]["parallel_r1"] > s["all"]["serial"]
    (20, 5, True)
    """
    rows: dict[str, list[dict[str, float]]] = defaultdict(list)
    for p in problems:
        lengths = _lengths(p, tokenizer)
        rows[f"{p.family}/d{p.difficulty}"].append(lengths)
        rows["all"].append(lengths)
    out = {}
    for name in sorted(rows, key=lambda k: (k == "all", k)):
        got = rows[name]
        means = {k: mean(r[k] for r in got) for k in got[0]}
        out[name] = {"n": len(got), **means, "speedup": means["serial"] / means["parason"]}
    return out


def format_stats(stats: dict[str, dict[str, float]]) -> str:
    """An aligned table, one row per stratum."""
    head = ["stratum"] + [h for _, h in STAT_COLUMNS]
    body = [[name] + [f"{row[k]:.0f}" if k == "n" else f"{row[k]:.2f}" if k == "speedup" else f"{row[k]:.1f}"
                      for k, _ in STAT_COLUMNS] for name, row in stats.items()]
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head] + body]
    lines.insert(1, " | ".join("-" * w for w in widths))
    return "\n".join(lines)
