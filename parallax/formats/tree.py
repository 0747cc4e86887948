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
  body is ``()`` or a single string; Parason blocks have ``subtask``/``trial``/``outline``
  branches with ``outline`` set (a string, possibly empty), and ``summary`` is the text of the
  optional ``<Conclusion>`` (``None``: no conclusion);
* ``Block.placement`` is ``None`` when the block has no summary or its summary sits where the
  spec writes it (``FormatSpec.summary_placement``), else the placement the text used
  (``"after"`` or ``"inside"``).  So a tree built without placements renders in the spec's own
  convention, and ``parse(render(t, spec), spec) == t``.

Gap layout (``g[i]`` is ``gaps[i]``; ``n`` branches; ``S`` the summary element)::

    Parallel-R1, inside: <Parallel> g0 Path1 g1 ... Pathn g[n] S g[n+1] </Parallel>          (n + 2 gaps)
    Parallel-R1, after:  <Parallel> g0 Path1 g1 ... Pathn g[n] </Parallel> g[n+1] S          (n + 2 gaps)
    Parason:     <Parallel> g0 <Outlines> g1 E1 g2 ... En g[n+1] </Outlines> g[n+2]
                 T1 g[n+3] T2 ... Tn g[2n+2] </Parallel>                                     (2n + 3 gaps)
    with a conclusion: ... Tn g[2n+2] S g[2n+3] </Parallel>, or ... Tn g[2n+2] </Parallel> g[2n+3] S
                                                                                             (2n + 4 gaps)

where ``E_i`` is the outline entry ``<Subtask>outline</Subtask>``, ``<Trial>outline</Trial>`` or
``<Outline>outline</Outline>`` and ``T_i`` is ``<Thread>body</Thread>`` of branch ``i``.  The gap
before an "after" summary holds whitespace only (text there means no summary follows the block).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BRANCH_KINDS", "OUTLINE", "PATH", "SUBTASK", "TRIAL", "Block", "Branch", "Node", "Tree", "canonical_nodes",
    "gap_count", "is_written",
]

#: Parallel-R1 branch kind (a ``<Path>``).
PATH = "path"
#: Parason AND branch (outline entry ``<Subtask>``): every thread's result is needed.
SUBTASK = "subtask"
#: Parason OR branch (outline entry ``<Trial>``): alternative attempts, any may succeed.
TRIAL = "trial"
#: Parason untyped branch (the release's ``<Outline>`` entry); ``FormatSpec.outline_kind`` says
#: what metrics and rewards count it as.
OUTLINE = "outline"
BRANCH_KINDS = (PATH, SUBTASK, TRIAL, OUTLINE)


@dataclass(slots=True, unsafe_hash=True)
class Branch:
    """One branch of a parallel block.

    ``kind``: ``"path"`` (Parallel-R1), ``"subtask"`` (AND), ``"trial"`` (OR) or ``"outline"``
    (untyped Parason entry).
    ``body``: the branch content -- for a Path its text (``()`` or ``("text",)``), for a Parason
    Thread a node sequence of ``str`` and nested :class:`Block`.
    ``outline``: Parason only, the text of the branch's outline entry; ``None`` for Paths.
    """

    kind: str
    body: tuple[Node, ...] = ()
    outline: str | None = None


@dataclass(slots=True, unsafe_hash=True)
class Block:
    """One ``<Parallel>`` region: its branches, the summary (Parallel-R1) or conclusion (Parason),
    inter-tag whitespace, and where the summary sat if not where the spec writes it."""

    branches: tuple[Branch, ...]
    summary: str | None = None
    gaps: tuple[str, ...] = ()
    placement: str | None = None


@dataclass(slots=True, unsafe_hash=True)
class Tree:
    """A whole trajectory: the top-level node sequence."""

    nodes: tuple[Node, ...] = ()

    @property
    def has_parallel(self) -> bool:
        return any(type(n) is Block for n in self.nodes)


Node = str | Block


def gap_count(block: Block, parason: bool) -> int:
    """Number of gap slots of ``block`` in the given format (see the module docstring)."""
    n = len(block.branches)
    return 2 * n + 3 + (block.summary is not None) if parason else n + 2


def canonical_nodes(nodes) -> tuple:
    """A node sequence in canonical form: empty strings dropped, adjacent strings merged.

    >>> canonical_nodes(["a", "", "b", Block((), "s")])
    ('ab', Block(branches=(), summary='s', gaps=(), placement=None))
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


def is_written(tree: Tree, parason: bool) -> bool:
    """Whether the format writes `tree` as it is: every summary where the spec puts it
    (``placement`` None) and, for Parason, no release alias (no ``<Outline>`` entry, no
    ``<Conclusion>``).  The grammar (:func:`parallax.formats.grammar.ebnf`) accepts exactly the texts that
    parse to such a tree.

    >>> is_written(Tree((Block((Branch(PATH, ("a",)), Branch(PATH, ("b",))), "s", (), "inside"),)), False)
    False
    """
    return _written(tree.nodes, parason)


def _written(nodes, parason: bool) -> bool:
    for n in nodes:
        if type(n) is str:
            continue
        if n.placement is not None or (parason and n.summary is not None):
            return False
        for br in n.branches:
            if br.kind == OUTLINE or (parason and not _written(br.body, True)):
                return False
    return True
