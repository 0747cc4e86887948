"""The two toy task families: sampling a problem and solving it into a :class:`Solution`.

* **subtask** -- a sum of ``1 + d`` products, ``"Q: 3*4+5*6\\nA:"``.  The products are
  independent (AND): one branch each, then the sum.
* **trial** -- pick the one candidate ``x`` with ``x*m%10=r``, ``"Q: x*7%10=1 x?2 3\\nA:"``.
  Each candidate is a hypothesis (OR): one branch each computes ``x*m``, takes the last digit
  and says ``yes``/``no``; the merge states the winner.  The product's last digit must be
  computed, so the answer is not readable from the prompt, and the check reuses the same
  multiplication table as the subtask family.

Two more families have branches long enough that a fork pays (Parason's synthetic
multiplication), and are not part of ``"mixed"`` (``"all"`` alternates all four):

* **mul** -- a sum of ``1 + d`` products of a three-digit number by a digit,
  ``"Q: 347*3+582*6\\nA:"``.  Each branch works its product digit by digit
  (``300*3=900 40*3=120 900+120=1020 7*3=21 1020+21=1041``, AND); the merge adds the products
  one at a time.
* **search** -- the one candidate ``x`` with ``x*a*b*c%10=r``, ``"Q: x*7*3*9%10=1 x?2 5 4\\nA:"``.
  A branch follows the chain on last digits (``2*7=14 4*3=12 2*9=18 18%10=8 no``, OR).  The
  winner's place is uniform, so a serial solver, which stops at the first ``yes``, checks
  ``(k+1)/2`` candidates on average and a fork checks all of them in the time of one.

Difficulty ``d`` (1..7) sets the number of branches (``1 + d``) and, from d=4 on, widens the
operand range of the first two families.  Everything is pure: a ``random.Random`` goes in, a
prompt and a solution come out.
"""

from __future__ import annotations

import random

from parallax.toyworld.problem import MAX_DIFFICULTY, Part, Solution

__all__ = ["check_difficulty", "flawed", "operand_max", "sample_mul", "sample_search", "sample_subtask", "sample_trial",
           "trial_ok"]

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


def _product_steps(a: int, b: int) -> tuple[str, int]:
    """``a*b`` worked one digit of ``a`` at a time, each partial product added as it comes.

    >>> _product_steps(347, 3)
    ('300*3=900 40*3=120 900+120=1020 7*3=21 1020+21=1041', 1041)
    >>> _product_steps(307, 3)[0]
    '300*3=900 7*3=21 900+21=921'
    """
    place = 10 ** (len(str(a)) - 1)
    steps, total = [], None
    while place:
        digit = a // place % 10
        if digit:
            part = digit * place
            steps.append(f"{part}*{b}={part * b}")
            if total is not None:
                steps.append(f"{total}+{part * b}={total + part * b}")
            total = (total or 0) + part * b
        place //= 10
    return " ".join(steps), total


def _running_sum(values: list[int]) -> str:
    """Add ``values`` one at a time: ``[1041, 3492, 12]`` -> ``"1041+3492=4533 4533+12=4545"``."""
    steps, total = [], values[0]
    for v in values[1:]:
        steps.append(f"{total}+{v}={total + v}")
        total += v
    return " ".join(steps)


def sample_mul(rng: random.Random, difficulty: int) -> tuple[str, Solution]:
    """A sum of ``1 + difficulty`` products of a three-digit number by a digit in 2..9.

    >>> prompt, sol = sample_mul(random.Random(0), 1)
    >>> prompt, sol.parts[0].work, sol.merge, sol.answer
    ('Q: 964*8+876*8\\nA:', '900*8=7200 60*8=480 7200+480=7680 4*8=32 7680+32=7712', '7712+7008=14720', 14720)
    """
    check_difficulty(difficulty)
    pairs = [(rng.randint(100, 999), rng.randint(2, 9)) for _ in range(1 + difficulty)]
    worked = [_product_steps(a, b) for a, b in pairs]
    terms = [f"{a}*{b}" for a, b in pairs]
    parts = tuple(Part(outline=t, work=w) for t, (w, _) in zip(terms, worked))
    values = [v for _, v in worked]
    key = ("mul",) + tuple(sorted(pairs))
    return f"Q: {'+'.join(terms)}\nA:", Solution("mul", parts, _running_sum(values), sum(values), key)


def _chain(x: int, factors: tuple[int, ...]) -> tuple[str, int]:
    """``x*a*b*...`` on last digits: ``(2, (7, 3, 9))`` -> ``("2*7=14 4*3=12 2*9=18 18%10=8", 8)``."""
    steps, last = [], x
    for f in factors:
        steps.append(f"{last}*{f}={last * f}")
        prod, last = last * f, last * f % _MOD
    steps.append(f"{prod}%10={last}")
    return " ".join(steps), last


def sample_search(rng: random.Random, difficulty: int) -> tuple[str, Solution]:
    """Pick the one of ``1 + difficulty`` candidates in 2..9 (2..19 from d=4) with ``x*a*b*c%10=r``.

    The serial trace checks the candidates in the prompt's order and stops at the winner
    (``Solution.serial_parts``); the parallel traces check every candidate at once.

    >>> prompt, sol = sample_search(random.Random(1), 2)
    >>> prompt, sol.parts[0].work, sol.merge, sol.serial_parts
    ('Q: x*4*3*6%10=6 x?6 3 9\\nA:', '6*4=24 4*3=12 2*6=12 12%10=2 no', 'x=3', 2)
    """
    check_difficulty(difficulty)
    hi = 9 if difficulty <= 3 else 19
    factors = tuple(rng.randint(2, 9) for _ in range(3))
    x = rng.randint(2, hi)
    r = _chain(x, factors)[1]
    losers = [y for y in range(2, hi + 1) if _chain(y, factors)[1] != r]
    if len(losers) < difficulty:  # the chain maps too many candidates to r: another chain
        return sample_search(rng, difficulty)
    candidates = rng.sample(losers, difficulty) + [x]
    rng.shuffle(candidates)
    parts = tuple(Part(outline=f"x={c}", work=_chain(c, factors)[0] + (" yes" if c == x else " no"))
                  for c in candidates)
    prompt = f"Q: x*{'*'.join(map(str, factors))}%10={r} x?{' '.join(map(str, candidates))}\nA:"
    key = ("search", factors, r) + tuple(sorted(candidates))
    return prompt, Solution("search", parts, f"x={x}", x, key, serial_parts=candidates.index(x) + 1)


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
    if sol.kind in ("trial", "search"):
        losers = [int(p.outline.removeprefix("x=")) for p in sol.parts if p.work.endswith(" no")]
        wrong = rng.choice(losers)
        return Solution(sol.kind, sol.parts, f"x={wrong}", wrong, sol.key)
    if sol.kind in ("subtask", "mul"):
        wrong = sol.answer + (10 if sol.answer < 10 or rng.random() < 0.5 else -10)
        return Solution(sol.kind, sol.parts, sol.merge.rsplit("=", 1)[0] + f"={wrong}", wrong, sol.key)
    raise ValueError(f"unknown solution kind {sol.kind!r}")
