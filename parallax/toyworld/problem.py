"""The record every toy-world generator returns, and the solution structure the teachers render.

A :class:`Solution` is the small tree a programmatic teacher solves a problem into: one
parallel block of independent branches plus a merge step.  The three traces of a
:class:`Problem` are renderings of that one tree (``parallax.toyworld.traces``), so they always carry
the same content and the same final answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = ["FAMILIES", "MAX_DIFFICULTY", "TRACE_KINDS", "Part", "Problem", "Solution"]

#: Problem families; ``"mixed"`` (accepted by :func:`parallax.toyworld.generate`) alternates them.
FAMILIES: tuple[str, ...] = ("subtask", "trial")
#: Families whose branches are long enough that a fork can pay (``parallax.toyworld.tasks``); ``"all"``
#: alternates ``FAMILIES + LONG_FAMILIES``.
LONG_FAMILIES: tuple[str, ...] = ("mul", "search")
#: What ``family`` may name: one family, ``"mixed"`` (the short two) or ``"all"`` (all four); streams also
#: take several families joined by ``+`` (``"subtask+mul"``), alternated in that order.
FAMILY_CHOICES: tuple[str, ...] = FAMILIES + LONG_FAMILIES + ("mixed", "all")
#: Keys of :attr:`Problem.traces`.
TRACE_KINDS: tuple[str, ...] = ("serial", "parallel_r1", "parason")
#: Difficulty d gives 1 + d branches; both formats allow at most 8 branches per block.
MAX_DIFFICULTY = 7


@dataclass(frozen=True)
class Problem:
    """One verifiable toy problem with its teacher traces.

    ``prompt`` is fed raw to the model (no chat template); ``answer`` is an integer written as
    a string; every trace ends with ``" #### <answer>"``.

    >>> p = Problem("u0", "subtask", 1, "Q: 3*4+5*6\\nA:", "42",
    ...             {"serial": "3*4=12 5*6=30 12+30=42 #### 42", "parallel_r1": "", "parason": ""})
    >>> p.answer
    '42'
    """

    uid: str
    family: str
    difficulty: int
    prompt: str
    answer: str
    traces: dict[str, str] = field(hash=False)
    #: True when the traces come from a flawed teacher (``make_splits(teacher_error=...)``):
    #: they are valid text but end with a wrong answer; ``answer`` is still the true one.
    teacher_flawed: bool = False
    #: True when the traces stop before the final ``#### answer`` line, as a teacher that
    #: forgot it writes (``make_splits(teacher_no_answer=...)``); the reward then finds no answer.
    teacher_no_answer: bool = False
    #: True when the teacher did not fork on this problem (``make_splits(teacher_serial=...)``):
    #: every trace kind holds the serial trace.
    teacher_serial: bool = False
    #: Where the parallel traces fork (``parallax.toyworld.traces.SHAPES``; ``make_splits(teacher_verify=...,
    #: teacher_midfork=...)``): ``"fork"`` at the first token, ``"midfork"`` or ``"verify"`` later.
    teacher_shape: str = "fork"
    #: The problem's identity up to reordering (:attr:`Solution.key`): ``3*4+5*6`` and ``6*5+4*3`` share
    #: one.  Splits use it (no test problem in train; ``data.rl_holdout`` keeps RL's problems out of SFT).
    key: tuple = ()

    def as_serial(self) -> Problem:
        """This problem as a teacher that did not fork on it shows it: every trace kind its serial trace."""
        return replace(self, traces={kind: self.traces["serial"] for kind in self.traces}, teacher_serial=True,
                       teacher_shape="fork")


@dataclass(frozen=True)
class Part:
    """One independent part of a solution: one branch of its parallel block.

    ``outline`` is the Parason outline entry (the branch's task, e.g. ``"3*4"`` or ``"x=3"``);
    ``work`` is the branch's full reasoning (``"3*4=12"``), the Parallel-R1 path and the
    Parason thread.  Neither may contain ``'<'`` (tags are reserved for the format).
    """

    outline: str
    work: str


@dataclass(frozen=True)
class Solution:
    """A teacher's solution: independent branches, then a merge step on the main chain.

    ``kind`` is the family: ``"subtask"`` or ``"mul"`` (AND: the merge needs every branch),
    ``"trial"`` or ``"search"`` (OR: branches test hypotheses, the merge states the winner).  ``merge`` is
    the Parallel-R1 summary and the Parason main-chain continuation, e.g. ``"12+30=42"`` or ``"x=3"``.  ``key`` is the
    problem's identity up to reordering (``3*4+5*6`` and ``6*5+4*3`` share one), used to keep
    train and test apart.  ``serial_parts``: how many parts the serial trace works before its
    merge (0: all; a serial search stops at the first ``yes``).
    """

    kind: str
    parts: tuple[Part, ...]
    merge: str
    answer: int
    key: tuple = ()
    serial_parts: int = 0
