"""A reward per branch: every branch's own steps are checked, not only the final answer.

Toy-world traces write their work as checkable steps: ``3*4=12`` (an equation), and in a trial
branch ``3*7=21 21%10=1 yes`` (equations, then a verdict on the candidate the branch tests).
:func:`unit_correct` checks one unit of work: every equation must hold and a verdict must agree
with the ground truth (the winning candidate is the answer).  The units of a sample are the
branches of its parallel blocks, and its main chain (the text outside the blocks, with their
summaries) when that holds an equation (the join ``12+30=42``); a sample without a block is one
unit, its whole text.

``branch_acc`` -- ``correct``/``wrong`` for the final answer (+1/-1, as ``accuracy``), plus
``branch_weight`` x the share of the sample's units that check.  The answer still dominates; the
branch term separates, inside a group, samples whose answers agree but whose steps do not.

Example:
    >>> unit_correct("3*4=12", "42"), unit_correct("3*4=13", "42"), unit_correct("3*7=21 21%10=1 yes", "3")
    (True, False, True)
    >>> unit_correct("3*7=21 21%10=1 yes", "4"), unit_correct("x=3\\n3*7=21 21%10=1 no", "4")
    (False, True)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rewards.registry import register
from rewards.types import Analysis, BaseParams, GroupScore, RewardContext

__all__ = ["BranchParams", "branch_acc", "sample_units", "steps_share", "tree_units", "unit_correct"]

_EQUATION = re.compile(r"(?<![\w.])(\d+(?:[*+%-]\d+)+)=(-?\d+)(?![\w.])")
_VERDICT = re.compile(r"\b(yes|no)\b")
_NUMBER = re.compile(r"\d+")


def _evaluate(expr: str) -> int:
    """``+``/``-`` of terms, each ``*``/``%`` of numbers left to right (Python's precedence)."""
    total, sign = 0, 1
    for term in re.split(r"([+-])", expr):
        if term in "+-":
            sign = 1 if term == "+" else -1
            continue
        nums, ops = re.split(r"[*%]", term), re.findall(r"[*%]", term)
        value = int(nums[0])
        for op, n in zip(ops, nums[1:]):
            value = value * int(n) if op == "*" else value % int(n) if int(n) else value
        total += sign * value
    return total


def unit_correct(text: str, ground_truth: str) -> bool:
    """Whether a unit of work checks: it holds at least one equation, every equation holds, and
    every ``yes``/``no`` verdict is ``yes`` exactly when the candidate it tests (the first number
    since the previous verdict) is the ground-truth answer."""
    equations = _EQUATION.findall(text)
    if not equations or any(_evaluate(lhs) != int(rhs) for lhs, rhs in equations):
        return False
    start = 0
    for verdict in _VERDICT.finditer(text):
        truth = ground_truth.strip()
        candidate = _NUMBER.search(text, start, verdict.start())
        if not truth.lstrip("-").isdigit() or candidate is None:
            return False
        if (verdict.group() == "yes") != (int(candidate.group()) == int(truth)):
            return False
        start = verdict.end()
    return True


def _text(nodes) -> str:
    return " ".join(n if isinstance(n, str) else " ".join(_text(b.body) for b in n.branches) for n in nodes)


def _main_chain(nodes) -> str:
    return " ".join(n if isinstance(n, str) else n.summary or "" for n in nodes)


def tree_units(tree) -> list[str]:
    """The texts of a parsed text's units: its blocks' branches (nested blocks count as their outer
    branch) and its main chain if that holds an equation, or its whole main chain when it has no block."""
    units = [_text(b.body) for node in tree.nodes if not isinstance(node, str) for b in node.branches]
    main = _main_chain(tree.nodes)
    return units + [main] if not units or _EQUATION.search(main) else units


def sample_units(sample: Analysis) -> list[str]:
    """:func:`tree_units` of a scored sample; ``[]`` when it did not parse."""
    return tree_units(sample.tree) if sample.tree is not None and sample.format_valid else []


def _share(units: list[str], ground_truth: str) -> float:
    return sum(unit_correct(u, ground_truth) for u in units) / len(units) if units else 0.0


def steps_share(text: str, fmt, ground_truth: str) -> float:
    """The share of ``text``'s units whose steps check (0 when it does not parse in ``fmt``).

    >>> steps_share("<Parallel><Path>3*4=12</Path><Path>5*6=31</Path></Parallel><Summary>12+30=42</Summary>", \
"parallel_r1", "42")
    0.6666666666666666
    """
    from parallax import formats

    result = formats.parse(text, fmt)
    return _share(tree_units(result.tree) if result.ok else [], ground_truth)


@dataclass(frozen=True)
class BranchParams(BaseParams):
    """Answer values, and the weight of the share of units that check."""

    correct: float = 1.0
    wrong: float = -1.0
    branch_weight: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.branch_weight:
            raise ValueError(f"branch_weight must be >= 0, got {self.branch_weight}")


@register("branch_acc", params=BranchParams, needs_accuracy=True, needs_parse=True)
def branch_acc(samples: Sequence[Analysis], ctx: RewardContext, p: BranchParams) -> GroupScore:
    """Per-branch reward: +-1 for the answer plus ``branch_weight`` x the share of the sample's
    units (its branches, and its main chain's join) whose steps check; a text that does not
    parse gets no branch credit."""
    shares = [_share(sample_units(s), ctx.ground_truth) for s in samples]
    rewards = [(p.correct if s.correct else p.wrong) + p.branch_weight * share for s, share in zip(samples, shares)]
    return GroupScore(rewards, [s.correct for s in samples],
                      {"acc": [float(s.correct) for s in samples],
                       "format_valid": [float(s.format_valid) for s in samples],
                       "parallel": [float(s.has_parallel) for s in samples], "branch_share": shares})
