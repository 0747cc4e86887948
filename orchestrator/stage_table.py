"""The per-stage held-out table the driver prints at the end of a run.

``summary.json`` keeps every headline metric of each stage (:func:`in_table`); the console shows
the columns a reader compares across stages, in reading order, aligned.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

# (summary key, console header), in reading order; pass@k sits after acc (k = eval samples).
_COLUMNS = (
    ("eval/acc", "acc"),
    (re.compile(r"eval/pass@\d+"), None),
    ("eval/acc_greedy", "greedy"),
    ("eval/answered", "answered"),
    ("eval/parallel/ratio", "#Parallel"),
    ("eval/parallel/valid", "valid"),
    ("eval/parallel/speedup", "speed-up"),
    ("eval/parallel/critical_path", "crit.path"),
    ("eval/parallel/first_pos", "first<P>"),
    ("eval/parallel/acc_parallel", "acc fork"),
    ("eval/parallel/acc_serial", "acc serial"),
)
_LEGEND = ("acc: mean@{k} at the rollout temperature; greedy: one greedy sample; answered: share with a "
           "final answer; #Parallel: share with a parallel block; valid: well-formed format; speed-up "
           "(total / critical-path tokens), crit.path (critical-path tokens) and first<P> (relative "
           "position of the first <Parallel>): over the forking samples; acc fork / acc serial: accuracy "
           "of the samples that fork / do not. Every column, and the acc@B budget curve: summary.json.")


# per benchmark and stratum, summary.json keeps accuracy, the fork share and the latency (where forking pays)
_PER_STRATUM = re.compile(r"eval/[^/]+/[^/]+/(mean@\d+|parallel_ratio|critical_path_tokens)")


def in_table(key: str) -> bool:
    """Headline metrics go to summary.json, with each stratum's mean@k, #Parallel and critical path; the rest
    of the per-benchmark breakdown stays in W&B and metrics.jsonl.

    >>> [in_table(k) for k in ("eval/acc", "eval/heldout/mul_d3/parallel_ratio", "eval/heldout/pass@8")]
    [True, True, False]
    """
    nested = key.startswith("eval/") and key.count("/") >= 2 and not key.startswith("eval/parallel/")
    return not nested or bool(_PER_STRATUM.fullmatch(key))


def _columns(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    present = {k for r in rows for k, v in r.items() if v is not None}
    cols = [("stage", "stage")]
    for key, header in _COLUMNS:
        if isinstance(key, re.Pattern):
            cols += [(k, k.removeprefix("eval/")) for k in sorted(present) if key.fullmatch(k)]
        elif key in present:
            cols.append((key, header))
    return cols


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{v:.3f}"
    return str(v)


def format_table(rows: list[dict[str, Any]], k: int | None = None) -> str:
    """Aligned, pipe-separated rows (one per evaluated stage) and a legend; ``k`` names mean@k.

    >>> print(format_table([{"stage": "sft", "eval/acc": 0.5, "eval/parallel/ratio": 1}], k=8))
    ... # doctest: +ELLIPSIS
    stage | acc   | #Parallel
    ----- | ----- | ---------
    sft   | 0.500 | 1.000
    acc: mean@8 ...
    """
    if not rows:
        return "(no evaluation)"
    cols = _columns(rows)
    cells = [[h for _, h in cols]] + [[_cell(r.get(key)) for key, _ in cols] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cols))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells]
    lines.insert(1, " | ".join("-" * w for w in widths))
    legend = textwrap.fill(_LEGEND.format(k=k if k else "k"), width=100)
    return "\n".join(lines + [legend])
