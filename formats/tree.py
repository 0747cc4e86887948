"""Trajectory trees (`Tree`): sequential text segments and parallel blocks with typed branches.

A trajectory is a :class:`Tree` whose ``nodes`` alternate between plain text (``str``,
the sequential main chain) and :class:`Block` (one ``<Parallel>...</Parallel>`` region).

Tree classes are slotted dataclasses compared and hashed by value.  Treat them as immutable (they
are not ``frozen`` only because frozen dataclasses are ~3x slower to construct, and the parser
builds many).

Canonical form (what the parser produces, and what ``parse(render(t)) == t`` needs):

* node sequences never hold an empty string nor two adjacent strings;
* ``Block.gaps`` is ``()`` when every inter-tag gap is empty, otherwise a tuple of exactly
  :func:`gap_count` whitespace strings (characters from ``" \\t\\r\\n"``);
* Parallel-R1 blocks have ``summary`` set (a string, possibly empty) and ``path`` branches whose
  body is ``()`` or a single string; Parason blocks have ``summary=None`` and ``subtask``/``trial``
  branches with ``outline`` set (a string, possibly empty).

Gap layout (``g[i]`` is ``gaps[i]``; ``n`` branches)::

    Parallel-R1: <Parallel> g0 Path1 g1 Path2 ... Pathn g[n] Summary g[n+1] </Parallel>      (n + 2 gaps)
    Parason:     <Parallel> g0 <Outlines> g1 E1 g2 ... En g[n+1] </Outlines> g[n+2]
                 T1 g[n+3] T2 ... Tn g[2n+2] </Parallel>                                     (2n + 3 gaps)

where ``E_i`` is the outline entry ``<Subtask>outline</Subtask>`` or ``<Trial>outline</Trial>`` and
``T_i`` is ``<Thread>body</Thread>`` of branch ``i``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BRANCH_KINDS", "PATH", "SUBTASK", "TRIAL", "Block", "Branch", "Node", "Tree", "canonical_nodes", "gap_count",
]

#: Parallel-R1 branch kind (a ``<Path>``).
PATH = "path"
#: Parason AND branch (outline entry ``<Subtask>``): every thread's result is needed.
SUBTASK = "subtask"
#: Parason OR branch (outline entry ``<Trial>``): alternative attempts, any may succeed.
TRIAL = "trial"
BRANCH_KINDS = (PATH, SUBTASK, TRIAL)


@dataclass(slots=True, unsafe_hash=True)
class Branch:
    """One branch of a parallel block.

    ``kind``: ``"path"`` (Parallel-R1), ``"subtask"`` (AND) or ``"trial"`` (OR).
    ``body``: the branch content -- for a Path its text (``()`` or ``("text",)``), for a Parason
    Thread a node sequence of ``str`` and nested :class:`Block`.
    ``outline``: Parason only, the text of the branch's outline entry; ``None`` for Paths.
    """

    kind: str
    body: tuple[Node, ...] = ()
    outline: str | None = None


@dataclass(slots=True, unsafe_hash=True)
class Block:
    """One ``<Parallel>`` region: its branches, the Parallel-R1 summary, inter-tag whitespace."""

    branches: tuple[Branch, ...]
    summary: str | None = None
    gaps: tuple[str, ...] = ()


@dataclass(slots=True, unsafe_hash=True)
class Tree:
    """A whole trajectory: the top-level node sequence."""

    nodes: tuple[Node, ...] = ()

    @property
    def has_parallel(self) -> bool:
        return any(type(n) is Block for n in self.nodes)


Node = str | Block


def gap_count(block: Block, parason: bool) -> int:
    """Number of gap slots a block with ``len(block.branches)`` branches has in the given format."""
    n = len(block.branches)
    return 2 * n + 3 if parason else n + 2


def canonical_nodes(nodes) -> tuple:
    """A node sequence in canonical form: empty strings dropped, adjacent strings merged.

    >>> canonical_nodes(["a", "", "b", Block((), "s")])
    ('ab', Block(branches=(), summary='s', gaps=()))
    """
    out: list = []
    for n in nodes:
        if isinstance(n, str):
            if not n:
                continue
            if out and isinstance(out[-1], str):
                out[-1] += n
                continue
        out.append(n)
    return tuple(out)
