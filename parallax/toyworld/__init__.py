"""Toy world: seeded, verifiable arithmetic problems with programmatic teachers.

Two families need the two kinds of parallelism:

* ``subtask`` (AND) -- ``"Q: 3*4+5*6\\nA:"``; branches compute the products, the merge sums.
* ``trial`` (OR) -- ``"Q: x*7%10=1 x?2 3\\nA:"``; a branch tests each candidate, the merge
  states the one that passes (exactly one does).

Each :class:`Problem` carries three traces of the same solution, all ending ``" #### <answer>"``:
``serial`` (no tags), ``parallel_r1`` (``<Parallel><Path>..</Parallel><Summary>..``) and ``parason``
(``<Parallel><Outlines><Subtask|Trial>..</Outlines><Thread>..``).  No torch or ray imports.

>>> train, test = make_splits(100, 20, seed=0, difficulty=1)
>>> train[0].prompt, train[0].traces["serial"]
('Q: 2*2+7*2\\nA:', '2*2=4 7*2=14 4+14=18 #### 18')

Look at the data: ``python -m parallax.toyworld sample --family mixed -n 5 --seed 0 --difficulty 1``.
"""

from parallax.toyworld.generate import (
    Difficulty,
    as_difficulty,
    corpus,
    difficulty_text,
    generate,
    iter_problems,
    make_splits,
)
from parallax.toyworld.problem import FAMILIES, MAX_DIFFICULTY, TRACE_KINDS, Part, Problem, Solution

__all__ = [
    "FAMILIES",
    "MAX_DIFFICULTY",
    "TRACE_KINDS",
    "Difficulty",
    "Part",
    "Problem",
    "Solution",
    "as_difficulty",
    "corpus",
    "difficulty_text",
    "generate",
    "iter_problems",
    "make_splits",
]
