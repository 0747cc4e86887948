"""Independent checkers for toy-world problems, written without toyworld's code.

They read the prompt and the traces as text and recompute everything, so a bug in the
generator or the teacher cannot hide behind a shared helper.
"""

from __future__ import annotations

import re

SUBTASK_PROMPT = re.compile(r"Q: (\d+\*\d+(?:\+\d+\*\d+)*)\nA:")
TRIAL_PROMPT = re.compile(r"Q: x\*(\d+)%10=(\d) x\?(\d+(?: \d+)*)\nA:")
TAG = re.compile(r"</?[A-Za-z]+>")


def eval_sum_of_products(expr: str) -> int:
    """Tiny safe evaluator for ``a*b+c*d+...`` (no eval()): split on '+' then '*'.

    >>> eval_sum_of_products("3*4+5*6")
    42
    """
    total = 0
    for term in expr.split("+"):
        factors = term.split("*")
        if not factors or not all(f.isdigit() for f in factors):
            raise ValueError(f"not a product of integers: {term!r}")
        value = 1
        for f in factors:
            value *= int(f)
        total += value
    return total


def parse_subtask(prompt: str) -> list[tuple[int, int]]:
    m = SUBTASK_PROMPT.fullmatch(prompt)
    if not m:
        raise ValueError(f"not a subtask prompt: {prompt!r}")
    return [tuple(int(f) for f in t.split("*")) for t in m.group(1).split("+")]


def parse_trial(prompt: str) -> tuple[int, int, list[int]]:
    m = TRIAL_PROMPT.fullmatch(prompt)
    if not m:
        raise ValueError(f"not a trial prompt: {prompt!r}")
    return int(m.group(1)), int(m.group(2)), [int(c) for c in m.group(3).split()]


def solve(prompt: str) -> tuple[str, int]:
    """``(family, answer)`` recomputed from the prompt; trial needs exactly one winner."""
    if prompt.startswith("Q: x*"):
        mult, rem, cands = parse_trial(prompt)
        winners = [c for c in cands if (c * mult) % 10 == rem]
        if len(winners) != 1:
            raise AssertionError(f"{prompt!r} has winners {winners}, want exactly one")
        return "trial", winners[0]
    return "subtask", eval_sum_of_products(SUBTASK_PROMPT.fullmatch(prompt).group(1))


def content_tokens(trace: str) -> list[str]:
    """The trace with tags replaced by spaces, split on whitespace."""
    return TAG.sub(" ", trace).split()


def check_step(token: str) -> bool:
    """Is one serial step arithmetically true?  Non-equations (``no``, ``####``) pass."""
    if "=" not in token or token.startswith("x="):
        return True
    lhs, rhs = token.split("=")
    if "%" in lhs:
        a, b = lhs.split("%")
        return int(a) % int(b) == int(rhs)
    return eval_sum_of_products(lhs) == int(rhs)
