"""Teacher traces from one format to the other: Parallel-R1 <-> Parason, through the :mod:`formats` tree.

Conversion works on the tree (never on tag strings) and only where the formats correspond:

* Parallel-R1 -> Parason: each ``<Path>`` becomes one branch whose Thread is the path text; its
  kind (``subtask`` / ``trial``) and outline come from ``labels`` (one ``(kind, outline)`` list per
  block; default: kind ``default_kind`` and the path's first sentence as outline).  The
  ``<Summary>`` text has no slot in Parason (the main chain merges), so it opens the main-chain
  text after the block, followed by a newline.
* Parason -> Parallel-R1: flat regions only (a nested region has no Parallel-R1 form: ValueError);
  Threads become Paths, outline entries are dropped, and the first line of the main-chain text
  after the region becomes the ``<Summary>``.  Both directions round-trip when summaries are one line.

The ``parason_traces`` set (:mod:`parallax.trainingdata.loaders`) and ``python -m parallax.evaluation convert`` use it;
``python -m parallax.evaluation annotate`` labels the kinds with an LLM first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from parallax.formats import PATH, SUBTASK, TRIAL, Block, Branch, Tree, canonical_nodes, get_spec, parse, render

__all__ = ["convert"]


def _outline_of(text: str) -> str:
    """A short outline entry: the first sentence (or line) of a branch, at most 12 words."""
    first = re.split(r"(?<=[.!?])\s|\n", text.strip(), maxsplit=1)[0]
    return " ".join(first.split()[:12])


def _text(body: Sequence) -> str:
    if any(isinstance(x, Block) for x in body):
        raise ValueError("a nested parallel region has no Parallel-R1 form")
    return "".join(body)


def _r1_to_parason(tree: Tree, labels: Sequence[Sequence[tuple[str, str | None]]] | None,
                   default_kind: str) -> Tree:
    nodes: list = []
    carry = None  # the summary waiting to open the next main-chain text
    bi = 0
    for node in list(tree.nodes) + [""]:
        if isinstance(node, Block):
            if carry is not None:
                nodes.append(carry)
            lab = labels[bi] if labels is not None else [(default_kind, None)] * len(node.branches)
            if len(lab) != len(node.branches):
                raise ValueError(f"block {bi}: {len(lab)} labels for {len(node.branches)} paths")
            branches = []
            for br, (kind, outline) in zip(node.branches, lab):
                if kind not in (SUBTASK, TRIAL):
                    raise ValueError(f"block {bi}: kind must be {SUBTASK!r} or {TRIAL!r}, got {kind!r}")
                body = "".join(br.body)
                branches.append(Branch(kind, (body,) if body else (),
                                       _outline_of(body) if outline is None else outline))
            nodes.append(Block(tuple(branches), None, ()))
            carry, bi = node.summary or "", bi + 1
        else:
            text = node if carry is None else (carry + "\n" + node if node else carry)
            if text:
                nodes.append(text)
            carry = None
    return Tree(canonical_nodes(nodes))


def _parason_to_r1(tree: Tree) -> Tree:
    nodes: list = []
    items = list(tree.nodes)
    i = 0
    while i < len(items):
        node = items[i]
        if isinstance(node, Block):
            paths = tuple(Branch(PATH, (t,) if (t := _text(b.body)) else (), None) for b in node.branches)
            if node.summary is not None:  # the release's <Conclusion> is the summary
                nodes.append(Block(paths, node.summary, ()))
                i += 1
                continue
            nxt = items[i + 1] if i + 1 < len(items) and isinstance(items[i + 1], str) else ""
            summary, _, rest = nxt.partition("\n")
            nodes.append(Block(paths, summary, ()))
            if rest:
                nodes.append(rest)
            i += 2 if nxt else 1
        else:
            nodes.append(node)
            i += 1
    return Tree(canonical_nodes(nodes))


def convert(text: str, src: str, dst: str, labels: Sequence[Sequence[tuple[str, str | None]]] | None = None,
            default_kind: str = TRIAL) -> str:
    """``text`` in format ``src`` rendered in format ``dst`` (see module docstring); ValueError if impossible."""
    get_spec(src), get_spec(dst)
    res = parse(text, src)
    if not res.ok:
        raise ValueError(f"not a valid {src} trace: {res.status} ({res.error.message if res.error else ''})")
    if src == dst:
        return text
    tree = _r1_to_parason(res.tree, labels, default_kind) if src == "parallel_r1" else _parason_to_r1(res.tree)
    return render(tree, dst)
