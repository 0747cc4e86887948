"""Parason thread headers: the outline entry the executor forces after each `<Thread>`.

An executed thread sees the shared prefix (the whole outline) and its own tokens only, so the
k-th `<Thread>` of a block is followed by a forced *header*: outline entry k, then
`THREAD_HEADER_SEP` (why, and how the executor forces it: `parallax/executors/tracker.py`). Teacher traces
write the same header (`with_thread_headers`), so SFT teaches threads to continue from it.
"""

from __future__ import annotations

from parallax.formats.tree import Block, Branch, Tree

THREAD_HEADER_SEP = "\n"  # ends a thread header; a newline never merges with text tokens either side


def thread_header(outline: str) -> str:
    """Text the executor forces after a Parason `<Thread>`: its outline entry, then the separator.

    >>> thread_header("x=8")
    'x=8\\n'
    """
    return outline + THREAD_HEADER_SEP


def with_thread_headers(tree: Tree) -> Tree:
    """`tree` with every Parason thread body starting with its header (nested blocks too).

    Idempotent: a body that already starts with its header is kept."""

    def nodes(seq) -> tuple:
        return tuple(block(n) if isinstance(n, Block) else n for n in seq)

    def block(b: Block) -> Block:
        branches = []
        for br in b.branches:
            body, head = nodes(br.body), thread_header(br.outline) if br.outline is not None else None
            if head is not None and not (body and isinstance(body[0], str) and body[0].startswith(head)):
                body = (head + body[0],) + body[1:] if body and isinstance(body[0], str) else (head,) + body
            branches.append(Branch(br.kind, body, br.outline))
        return Block(tuple(branches), b.summary, b.gaps, b.placement)

    return Tree(nodes(tree.nodes))
