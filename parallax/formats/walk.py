"""Tree walks behind :func:`parallax.formats.metrics.compute_metrics` (definitions in :mod:`parallax.formats.metrics`).

Two walkers, both visiting the tree in textual order and keeping the same tallies:

* :class:`_Walker` charges every piece of the rendering (tag, gap, text) through a ``count(piece,
  is_tag)`` function -- tokenizer units, or default units via ``_default_count``.  It handles any
  tree and is the reference implementation the tests compare against.
* :func:`_walk_parts` reads precomputed default-unit counts of the parser's tag split: tags are
  1 unit and whitespace gaps 0, so it only steps a part index through the tree and looks up the
  text pieces (total units are ``sum(wc)``).  The tree must be the parser's tree of that split.

Both return ``(total, crit, blocks, branches, depth, first, subtask, trial, path, outline)`` for
:func:`parallax.formats.metrics.compute_metrics`.  A block *saves* its summed branch units minus the
longest branch's critical path; a critical path is the units minus the savings of the outermost
blocks in it (a nested block's saving is part of its branch's critical path).  A summary or
conclusion is sequential text of the block, wherever it sits.  An untyped ``<Outline>`` branch is
tallied as ``spec.outline_kind``.
"""

from __future__ import annotations

from parallax.formats.spec import FormatSpec
from parallax.formats.tree import OUTLINE, PATH, SUBTASK, TRIAL, Block


class _Walker:
    """Generic walker: every piece is charged ``count(piece, is_tag)`` units."""

    __slots__ = ("blocks", "branches", "count", "depth", "first", "pos", "shares", "spec")

    def __init__(self, spec: FormatSpec, count):
        self.spec = spec
        self.count = count
        self.pos = 0  # units so far
        self.shares = {"main": 0, PATH: 0, SUBTASK: 0, TRIAL: 0, OUTLINE: 0}  # units by innermost branch kind
        self.blocks = 0
        self.branches = 0
        self.depth = 0
        self.first = None  # units before the first <Parallel>

    def run(self, nodes) -> tuple:
        crit = self.seq(nodes, "main", 0)
        sh = self.shares
        tallies = (self.blocks, self.branches, self.depth, self.first)
        return (self.pos, crit, *tallies, sh[SUBTASK], sh[TRIAL], sh[PATH], sh[OUTLINE])

    def seq(self, nodes, kind: str, depth: int) -> int:
        """Walk a node sequence; returns its critical-path units."""
        crit = 0
        for n in nodes:
            if type(n) is str:
                crit += self._piece(n, kind, False)
            else:
                crit += self.block(n, kind, depth + 1)
        return crit

    def _piece(self, s: str, kind: str, is_tag: bool) -> int:
        if not s:
            return 0
        u = self.count(s, is_tag)
        self.pos += u
        self.shares[kind] += u
        return u

    def _branch(self, open_: str, body, close: str, kind: str, depth: int) -> tuple[int, int]:
        """(units, critical units) of one branch unit: open tag, body, close tag."""
        t0 = self.pos
        c = self._piece(open_, kind, True)
        c += self.seq(body, kind, depth)
        c += self._piece(close, kind, True)
        return self.pos - t0, c

    def block(self, b: Block, kind: str, depth: int) -> int:
        spec = self.spec
        piece = self._piece
        if self.first is None:
            self.first = self.pos
        n = len(b.branches)
        self.blocks += 1
        self.branches += n
        self.depth = max(self.depth, depth)
        start = self.pos
        sum_units = 0
        max_crit = 0
        piece(spec.parallel_open, kind, True)
        okind = spec.outline_kind
        if spec.is_parason:
            gaps = b.gaps or ("",) * (2 * n + 3 + (b.summary is not None))
            piece(gaps[0], kind, False)
            piece(spec.outlines_open, kind, True)
            piece(gaps[1], kind, False)
            for i, br in enumerate(b.branches):
                k = okind if br.kind == OUTLINE else br.kind
                if br.kind == TRIAL:
                    o, c = spec.trial_open, spec.trial_close
                elif br.kind == OUTLINE:
                    o, c = spec.outline_open, spec.outline_close
                else:
                    o, c = spec.subtask_open, spec.subtask_close
                piece(o, k, True)
                piece(br.outline or "", k, False)
                piece(c, k, True)
                piece(gaps[2 + i], kind, False)
            piece(spec.outlines_close, kind, True)
            piece(gaps[n + 2], kind, False)
            for i, br in enumerate(b.branches):
                k = okind if br.kind == OUTLINE else br.kind
                units, c = self._branch(spec.thread_open, br.body, spec.thread_close, k, depth)
                sum_units += units
                max_crit = max(max_crit, c)
                piece(gaps[n + 3 + i], kind, False)
            last = 2 * n + 3
            s_open, s_close = spec.conclusion_open, spec.conclusion_close
        else:
            gaps = b.gaps or ("",) * (n + 2)
            piece(gaps[0], kind, False)
            for i, br in enumerate(b.branches):
                units, c = self._branch(spec.path_open, br.body, spec.path_close, PATH, depth)
                sum_units += units
                max_crit = max(max_crit, c)
                piece(gaps[1 + i], kind, False)
            last = n + 1
            s_open, s_close = spec.summary_open, spec.summary_close
        after = (b.placement or spec.summary_placement) == "after"
        if b.summary is not None and after:
            piece(spec.parallel_close, kind, True)
            piece(gaps[last], kind, False)
        if b.summary is not None:
            piece(s_open, kind, True)
            piece(b.summary, kind, False)
            piece(s_close, kind, True)
        if b.summary is None or not after:
            if b.summary is not None:
                piece(gaps[last], kind, False)
            piece(spec.parallel_close, kind, True)
        return (self.pos - start) - sum_units + max_crit


def _walk_parts(nodes, wc: list[int], spec: FormatSpec) -> tuple:
    """Tallies of a parser tree (top-level ``nodes``) from ``wc``, the unit count of every part."""
    total = sum(wc)
    outline = 0
    if spec.is_parason:
        w = _ParasonParts(wc)
        w.seq(nodes, 0, 0)
        blocks, branches, depth = w.blocks, w.branches, w.depth
        saving, sub, trial, path, outline = w.saving, w.sub, w.trial, 0, w.outline
        if outline and spec.outline_kind != OUTLINE:  # untyped entries counted as a kind
            if spec.outline_kind == SUBTASK:
                sub, outline = sub + outline, 0
            else:
                trial, outline = trial + outline, 0
    else:
        blocks = branches = saving = path = sub = trial = 0
        k = 0  # the part before the next block's <Parallel>
        for n in nodes:
            if type(n) is not str:
                nb = len(n.branches)
                texts = wc[k + 4 : k + 4 * nb + 4 : 4]  # Path texts: <Parallel> g0 (<Path> text </Path> g)*
                units = 2 * nb + sum(texts)
                saving += units - 2 - max(texts)
                path += units
                blocks += 1
                branches += nb
                k += 4 * nb + 8  # past <Summary> text </Summary> g </Parallel> (or </Parallel> g <Summary> ..)
        depth = 1 if blocks else 0
    # the first tag of a valid text is the first <Parallel>: part 1
    first = wc[0] if blocks else None
    return total, total - saving, blocks, branches, depth, first, sub, trial, path, outline


class _ParasonParts:
    """Recursive part of :func:`_walk_parts` for Parason (Thread bodies nest blocks).

    ``k`` is a part index.  Between two tags there is exactly one text piece, so stepping ``k`` by
    2 per tag while walking the tree in textual order keeps it on the piece of the current text
    node (an empty piece has no node in the tree but is still stepped over).
    """

    __slots__ = ("blocks", "branches", "depth", "outline", "saving", "sub", "trial", "wc")

    def __init__(self, wc: list[int]):
        self.wc = wc
        self.blocks = self.branches = self.depth = self.saving = self.sub = self.trial = self.outline = 0

    def seq(self, nodes, k: int, depth: int) -> int:
        """Walk a node sequence whose first piece is part ``k``; returns the index of its last piece."""
        for n in nodes:
            if type(n) is not str:
                k = self.block(n, k, depth + 1)
        return k

    def block(self, b: Block, k: int, depth: int) -> int:
        """Block whose ``<Parallel>`` is part ``k + 1``; returns the index of the piece after it."""
        branches = b.branches
        self.blocks += 1
        self.branches += len(branches)
        self.depth = max(self.depth, depth)
        wc = self.wc
        saving0 = self.saving
        sub = trial = outl = 0  # units of this block's branches, nested branches excluded
        k += 4  # the gap after <Outlines>: <Parallel> g0 <Outlines> g1
        for br in branches:
            kind = br.kind
            if kind == TRIAL:  # <Trial> text </Trial> gap
                trial += 2 + wc[k + 2]
            elif kind == SUBTASK:
                sub += 2 + wc[k + 2]
            else:
                outl += 2 + wc[k + 2]
            k += 4
        k += 2  # the gap after </Outlines>
        sum_units = max_crit = 0
        for br in branches:
            body = br.body
            if not body or (len(body) == 1 and type(body[0]) is str):  # <Thread> text </Thread> gap
                units = crit = own = 2 + wc[k + 2]
                k += 4
            else:
                saved = self.saving
                nested0 = self.sub + self.trial + self.outline
                end = self.seq(body, k + 2, depth)  # the body's pieces are parts k + 2 .. end
                units = 2 + sum(wc[k + 2 : end + 1])
                crit = units - (self.saving - saved)  # the savings of the blocks in the body
                own = units - (self.sub + self.trial + self.outline - nested0)
                k = end + 2
            kind = br.kind
            if kind == TRIAL:
                trial += own
            elif kind == SUBTASK:
                sub += own
            else:
                outl += own
            sum_units += units
            max_crit = max(max_crit, crit)
        # this block's saving replaces its nested blocks' (already counted in max_crit)
        self.saving = saving0 + sum_units - max_crit
        self.sub += sub
        self.trial += trial
        self.outline += outl
        # past </Parallel>; a conclusion, inside or after, adds 4 parts (2 tags, its text, a gap)
        return k + 2 if b.summary is None else k + 6
