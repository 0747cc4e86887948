"""The per-stage table printed at the end of a run."""

from __future__ import annotations

import doctest

from orchestrator import stage_table
from orchestrator.stage_table import format_table, in_table

ROWS = [
    {"stage": "init", "eval/acc": 0, "eval/pass@8": 0.0, "eval/parallel/ratio": 0.22, "eval/acc@32": 0.0,
     "eval/parallel/valid_parallel": 0.0},
    {"stage": "sft", "eval/acc": 0.5537, "eval/pass@8": 0.8828, "eval/parallel/ratio": 1,
     "eval/parallel/first_pos": 7e-05, "eval/parallel/acc_serial": None, "eval/acc@32": 0.55},
]


def test_columns_in_reading_order_aligned_with_missing_cells_dashed():
    lines = format_table(ROWS, k=8).splitlines()
    header = [c.strip() for c in lines[0].split("|")]
    assert header == ["stage", "acc", "pass@8", "#Parallel", "first<P>"]  # no empty / budget columns
    bars = {tuple(i for i, ch in enumerate(line) if ch == "|") for line in lines[:4]}
    assert len(bars) == 1  # aligned: every row has its separators at the same columns
    assert [c.strip() for c in lines[2].split("|")] == ["init", "0.000", "0.000", "0.220", "-"]
    assert [c.strip() for c in lines[3].split("|")] == ["sft", "0.554", "0.883", "1.000", "0.000"]
    assert lines[4].startswith("acc: mean@8 at the rollout temperature")
    assert max(len(line) for line in lines[4:]) <= 100


def test_no_rows_and_the_summary_filter():
    assert format_table([]) == "(no evaluation)"
    assert in_table("eval/parallel/ratio") and in_table("eval/acc@32")
    assert not in_table("eval/heldout/mean@8") and not in_table("eval/overall/pass@8")


def test_docstring_example():
    assert doctest.testmod(stage_table, optionflags=doctest.ELLIPSIS).failed == 0
