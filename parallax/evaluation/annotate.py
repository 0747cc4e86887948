"""Parason data tools: label parallel stages Subtask / Trial; the ``annotate`` and ``convert`` commands.

Annotator (Parason §taxonomy): an LLM (any :class:`~parallax.evaluation.teachers.Teacher`, e.g. the builder's
HTTP endpoint) reads each parallel stage and answers ``Subtask`` (independent parts, all needed)
or ``Trial`` (competing attempts); :func:`taxonomy` gives the share of Subtask vs Trial stages.
Conversion between the formats (``convert``, labelled or not) is :mod:`parallax.trainingdata.convert`.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from parallax.formats import SUBTASK, TRIAL, Block, Tree, get_spec, parse, render
from parallax.trainingdata.convert import convert

__all__ = ["ANNOTATOR_PROMPT", "add_cli", "annotate_trace", "parse_label", "stages", "taxonomy"]

ANNOTATOR_PROMPT = (
    "Below is one step of a solution where the reasoning split into {n} branches that were written "
    "independently.\n\n{branches}\n\nClassify the step. Answer Subtask if the branches work on different "
    "parts of the problem and every branch's result is needed afterwards. Answer Trial if the branches "
    "are competing attempts or hypotheses for the same thing, where one successful branch would be "
    "enough. Reply with exactly one word: Subtask or Trial.\n\nAnswer:"
)


def stages(text: str, fmt: str) -> list[list[str]]:
    """The branch texts of every parallel block (nested Parason blocks included, depth first)."""
    res = parse(text, fmt)
    if not res.ok:
        raise ValueError(f"not a valid {fmt} trace: {res.status}")
    out: list[list[str]] = []

    def walk(nodes: Sequence) -> None:
        for n in nodes:
            if isinstance(n, Block):
                spec = get_spec(fmt)
                out.append([render(Tree(tuple(b.body)), spec) for b in n.branches])
                for b in n.branches:
                    walk(b.body)

    walk(res.tree.nodes)
    return out


def parse_label(reply: str) -> str | None:
    """``subtask`` / ``trial`` from an annotator reply (the last of the two words it names), else None."""
    hits = re.findall(r"\b(subtask|trial)s?\b", reply.lower())
    return hits[-1] if hits else None


def annotate_trace(text: str, fmt: str, teacher: Any, seed: int = 0) -> list[str | None]:
    """One label per parallel stage of ``text`` (``subtask``, ``trial`` or None when unparseable)."""
    blocks = stages(text, fmt)
    prompts = [ANNOTATOR_PROMPT.format(n=len(b), branches="\n\n".join(f"Branch {i + 1}:\n{t.strip()}"
                                                                      for i, t in enumerate(b))) for b in blocks]
    replies = teacher.complete(prompts, n=1, seed=seed) if prompts else []
    return [parse_label(r[0]) for r in replies]


def taxonomy(labels: Sequence[Sequence[str | None]]) -> dict[str, float | int]:
    """Share of Subtask vs Trial stages over all traces (unlabelled stages counted apart)."""
    flat = [x for row in labels for x in row]
    sub, tri = flat.count(SUBTASK), flat.count(TRIAL)
    labelled = sub + tri
    return {"stages": len(flat), "subtask": sub, "trial": tri, "unlabelled": len(flat) - labelled,
            "subtask_share": sub / labelled if labelled else 0.0, "trial_share": tri / labelled if labelled else 0.0}


def add_cli(sub: Any) -> None:
    """Register ``annotate`` and ``convert`` on the ``python -m parallax.evaluation`` parser."""
    a = sub.add_parser("annotate", help="label each parallel stage Subtask/Trial with an LLM endpoint")
    a.add_argument("path", help="JSONL with a 'trace' (or 'text') field")
    a.add_argument("--format", default="parallel_r1", choices=("parallel_r1", "parason"))
    a.add_argument("--endpoint", required=True)
    a.add_argument("--model", default="default")
    a.add_argument("--chat", action="store_true")
    a.add_argument("--out", required=True, help="output JSONL: input rows + labels (+ parason trace)")
    c = sub.add_parser("convert", help="convert traces between parallel_r1 and parason")
    c.add_argument("path")
    c.add_argument("--src", required=True, choices=("parallel_r1", "parason"))
    c.add_argument("--dst", required=True, choices=("parallel_r1", "parason"))
    c.add_argument("--kind", default=TRIAL, choices=(SUBTASK, TRIAL), help="branch kind when no labels")
    c.add_argument("--out", required=True)

    def rows(path: str) -> list[dict]:
        return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]

    def run_annotate(x: argparse.Namespace) -> int:
        from parallax.evaluation.teachers import HTTPTeacher

        teacher = HTTPTeacher(x.endpoint, x.model, chat=x.chat, temperature=0.0, max_tokens=8)
        out, all_labels = [], []
        for r in rows(x.path):
            text = r.get("trace", r.get("text", ""))
            labels = annotate_trace(text, x.format, teacher)
            all_labels.append(labels)
            r = {**r, "stage_labels": labels}
            if x.format == "parallel_r1" and all(labels):
                per_block = [[(lab, None)] * len(b) for lab, b in zip(labels, stages(text, x.format))]
                r["parason_trace"] = convert(text, "parallel_r1", "parason", per_block)
            out.append(r)
        Path(x.out).write_text("".join(json.dumps(r) + "\n" for r in out))
        print(json.dumps(taxonomy(all_labels)))
        return 0

    def run_convert(x: argparse.Namespace) -> int:
        out, failed = [], 0
        for r in rows(x.path):
            try:
                out.append({**r, "trace": convert(r.get("trace", r.get("text", "")), x.src, x.dst, default_kind=x.kind),
                            "format": x.dst})
            except ValueError:
                failed += 1  # no counterpart in the target format (nested region, malformed)
        Path(x.out).write_text("".join(json.dumps(r) + "\n" for r in out))
        print(json.dumps({"converted": len(out), "skipped": failed}))
        return 0

    a.set_defaults(run=run_annotate)
    c.set_defaults(run=run_convert)
