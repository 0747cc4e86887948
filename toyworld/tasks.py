"""The two toy task families: sampling a problem and solving it into a :class:`Solution`.

* **subtask** -- a sum of ``1 + d`` products, ``"Q: 3*4+5*6\\nA:"``.  The products are
  independent (AND): one branch each, then the sum.
* **trial** -- pick the one candidate ``x`` with ``x*m%10=r``, ``"Q: x*7%10=1 x?2 3\\nA:"``.
  Each candidate is a hypothesis (OR): one branch each computes ``x*m``, takes the last digit
  and says ``yes``/``no``; the merge states the winner.  The product's last digit must be
  computed, so the answer is not readable from the prompt, and the check reuses the same
  multiplication table as the subtask family.

Difficulty ``d`` (1..7) sets the number of branches (``1 + d``) and, from d=4 on, widens the
operand range.  Everything is pure: a ``random.Random`` goes in, a prompt and a solution
come out.
"""

from __future__ import annotations

import random

from toyworld.problem import MAX_DIFFICULTY, Part, Solution

__all__ = ["check_difficulty", "flawed", "operand_max", "sample_subtask", "sample_trial", "trial_ok"]

_MOD = 10  # the trial check is on the last digit of a product


def check_difficulty(difficulty: int) -> int:
    """Return ``difficulty`` if it is an int in 1..MAX_DIFFICULTY; ``TypeError`` for a non-int,
    ``ValueError`` for one out of range.

    >>> check_difficulty(2)
    2
    """
    if isinstance(difficulty, bool) or not isinstance(difficulty, int):
        raise TypeError(f"difficulty must be an int in 1..{MAX_DIFFICULTY}, got {difficulty!r}")
    if not 1 <= difficulty <= MAX_DIFFICULTY:
        raise ValueError(f"difficulty must be in 1..{MAX_DIFFICULTY}, got {difficulty}")
    return difficulty


def operand_max(difficulty: int) -> int:
    """Largest operand at this difficulty: one-digit factors up to d=3, then up to 12.

    >>> operand_max(1), operand_max(5)
    (9, 12)
    """
    return 9 if difficulty <= 3 else 12


def sample_subtask(rng: random.Random, difficulty: int) -> tuple[str, Solution]:
    """A sum of ``1 + difficulty`` products of operands in 2..operand_max(difficulty).

    >>> prompt, sol = sample_subtask(random.Random(0), 1)
    >>> prompt.startswith("Q: ") and prompt.endswith("\\nA:"), len(sol.parts)
    (True, 2)
    """
    check_difficulty(difficulty)
    hi = operand_max(difficulty)
    pairs = [(rng.randint(2, hi), rng.randint(2, hi)) for _ in range(1 + difficulty)]
    terms = [f"{a}*{b}" for a, b in pairs]
    values = [a * b for a, b in pairs]
    total = sum(values)
    parts = tuple(Part(outline=t, work=f"{t}={v}") for t, v in zip(terms, values))
    merge = "+".join(str(v) for v in values) + f"={total}"
    prompt = f"Q: {'+'.join(terms)}\nA:"
    key = ("subtask",) + tuple(sorted((min(a, b), max(a, b)) for a, b in pairs))
    return prompt, Solution(kind="subtask", parts=parts, merge=merge, answer=total, key=key)


def trial_ok(x: int, m: int, r: int) -> bool:
    """The trial condition ``x*m % 10 == r``.

    >>> trial_ok(3, 7, 1), trial_ok(2, 7, 1)
    (True, False)
    """
    return x * m % _MOD == r


def sample_trial(rng: random.Random, difficulty: int) -> tuple[str, Solution]:
    """Pick the one of ``1 + difficulty`` candidates ``x`` with ``x*m%10=r``.

    The winner and the multiplier are drawn first; distractors are drawn only among values
    that fail the condition, so exactly one candidate is correct (asserted below).

    >>> prompt, sol = sample_trial(random.Random(0), 2)
    >>> len(sol.parts), sum(b.work.endswith(" yes") for b in sol.parts)
    (3, 1)
    """
    check_difficulty(difficulty)
    hi = operand_max(difficulty) + (10 if difficulty >= 4 else 0)  # room for up to 8 candidates
    m = rng.randint(2, 9)
    x = rng.randint(2, hi)
    r = x * m % _MOD
    losers = [y for y in range(2, hi + 1) if not trial_ok(y, m, r)]
    need = difficulty
    if len(losers) < need:  # only for degenerate ranges; retry with another multiplier
        return sample_trial(rng, difficulty)
    candidates = rng.sample(losers, need) + [x]
    rng.shuffle(candidates)
    winners = [c for c in candidates if trial_ok(c, m, r)]
    assert winners == [x], f"trial generator produced winners {winners} for {candidates}"
    parts = tuple(_trial_part(c, m, r) for c in candidates)
    prompt = f"Q: x*{m}%10={r} x?{' '.join(map(str, candidates))}\nA:"
    key = ("trial", m, r) + tuple(sorted(candidates))
    return prompt, Solution(kind="trial", parts=parts, merge=f"x={x}", answer=x, key=key)


def _trial_part(c: int, m: int, r: int) -> Part:
    """Test one hypothesis: ``x=3`` -> ``"3*7=21 21%10=1 yes"``."""
    prod = c * m
    verdict = "yes" if trial_ok(c, m, r) else "no"
    return Part(outline=f"x={c}", work=f"{c}*{m}={prod} {prod}%10={prod % _MOD} {verdict}")


def flawed(sol: Solution, rng: random.Random) -> Solution:
    """The same solution with a slip in its merge, as an imperfect (model-written) teacher makes.

    The branches stay right; the merge goes wrong in the family's typical way: a trial merge
    names a candidate whose branch said ``no``; a subtask sum carries one ten too many or too
    few.  The answer line follows the merge, so the trace is valid but its answer is wrong.

    >>> _, sol = sample_trial(random.Random(0), 1)
    >>> bad = flawed(sol, random.Random(0))
    >>> bad.parts == sol.parts, bad.answer != sol.answer, bad.merge == f"x={bad.answer}"
    (True, True, True)
    """
    if sol.kind == "trial":
        losers = [int(p.outline.removeprefix("x=")) for p in sol.parts if p.work.endswith(" no")]
        wrong = rng.choice(losers)
        return Solution(sol.kind, sol.parts, f"x={wrong}", wrong, sol.key)
    if sol.kind == "subtask":
        wrong = sol.answer + (10 if sol.answer < 10 or rng.random() < 0.5 else -10)
        return Solution(sol.kind, sol.parts, sol.merge.rsplit("=", 1)[0] + f"={wrong}", wrong, sol.key)
    raise ValueError(f"unknown solution kind {sol.kind!r}")
