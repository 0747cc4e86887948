"""Metrics of a parsed trajectory: total and critical-path tokens, speed-up, shares, position.

Units
-----
With ``tokenizer=None`` the unit is the **default unit**: every tag string counts 1, and every
other piece of text (the text between two consecutive tags, or before the first / after the last)
counts its whitespace-separated words, whitespace being the characters with code point <= 32
(space and the ASCII control characters, e.g. ``" \\t\\n\\r\\v\\f"``; other Unicode spaces
count as word characters).
``"3*4=12"`` is 1 unit, ``"12+30=42 #### 42"`` is 3, ``"<Subtask>3*4</Subtask>"`` is 3, and
whitespace-only gaps between tags are 0.  A word is never split across a tag: ``"a<Path>b"`` is 3.

With a tokenizer (any object with HF-style ``__call__(text, add_special_tokens=False,
return_offsets_mapping=True)``, or a ``tokenizers.Tokenizer`` whose ``encode`` returns offsets)
the text is tokenised **once** and each piece ``[a, b)`` of characters is charged the number of
tokens whose start offset lies in ``[a, b)`` (offset mapping + bisection).  Tokenizers without
offsets fall back to encoding each piece separately (``encode(piece, add_special_tokens=False)``).

Definitions (``n`` = units)
---------------------------
* ``total_tokens``: units of the whole text.
* ``critical_path_tokens`` (``T``): units on the longest dependency chain when the branches of a
  block run concurrently.  Sequential text counts fully.  A block counts everything outside its
  *branch units* fully -- ``<Parallel>``/``</Parallel>``, whitespace gaps, the whole
  ``<Outlines>...</Outlines>`` section (outline entries are written before the threads fork), the
  whole ``<Summary>...</Summary>`` (written after the paths join) -- plus the **maximum** over its
  branch units of their critical path.  A branch unit is one ``<Thread>...</Thread>`` or
  ``<Path>...</Path>`` element including its two tags; its critical path is its tags plus the
  critical path of its body, so nested blocks are reduced recursively.
* ``speedup = total / T`` (1.0 for an empty text); ``eta = (total - T) / total`` (0.0 if empty).
* ``has_parallel``, ``num_blocks`` (all blocks, nested included), ``num_branches`` (all branches
  of all blocks), ``depth`` (maximum block nesting depth; 0 without blocks, 1 for a flat block).
* ``first_parallel_token``: index of the first ``<Parallel>`` tag's token (units before it);
  ``first_parallel_pos = first_parallel_token / total``; both ``None`` without blocks.
* Shares: every unit is attributed to the **innermost** branch containing it -- for a Parason
  branch that is its outline entry (``<Subtask>...</Subtask>`` incl. tags) and its Thread
  (incl. tags); for a Parallel-R1 branch its Path (incl. tags).  ``subtask_tokens``,
  ``trial_tokens``, ``path_tokens`` sum these; the remaining units (main chain, block tags,
  ``<Outlines>`` tags, Summary, gaps) are ``main_tokens``.  ``X_share = X_tokens / total``
  (0.0 for an empty text), and the four shares add up to 1.

Worked example (default units)::

    First. <Parallel><Outlines><Subtask>3*4</Subtask><Subtask>5*6</Subtask></Outlines>
    <Thread>3*4=12</Thread><Thread>5*6=30</Thread></Parallel> 12+30=42 #### 42

total = 1 + 1 + 1 + 3 + 3 + 1 + 3 + 3 + 1 + 3 = 20; T = 20 - (3 + 3) + 3 = 17;
speedup = 20/17; eta = 3/20; first_parallel_token = 1, first_parallel_pos = 0.05;
subtask_share = (3 + 3 + 3 + 3)/20 = 0.6.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from formats.parser import (
    _WS_TABLE,
    ParseResult,
    _compiled,
    _default_token_offset,
    _words,
    parse,
    part_words,
    render,
    resolve_spec,
)
from formats.spec import FormatSpec
from formats.tree import PATH, SUBTASK, TRIAL, Block, Trajectory

__all__ = ["METRIC_FIELDS", "Metrics", "compute_metrics", "text_stats"]


@dataclass(slots=True)
class Metrics:
    """Trajectory metrics; see the module docstring for exact definitions."""

    total_tokens: int
    critical_path_tokens: int
    speedup: float
    eta: float
    has_parallel: bool
    num_blocks: int
    num_branches: int
    depth: int
    first_parallel_token: int | None
    first_parallel_pos: float | None
    main_tokens: int
    subtask_tokens: int
    trial_tokens: int
    path_tokens: int
    subtask_share: float
    trial_share: float
    path_share: float

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in METRIC_FIELDS}


METRIC_FIELDS = tuple(Metrics.__dataclass_fields__)


# --------------------------------------------------------------------------- tokenizer adapters


def _token_starts(tokenizer, text: str) -> list[int] | None:
    """Sorted token start offsets of ``text`` from one tokenisation, or ``None`` if unavailable."""
    offsets = None
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
    except Exception:  # noqa: BLE001
        offsets = None
    if offsets is None:
        try:
            enc = tokenizer.encode(text, add_special_tokens=False)
            offsets = getattr(enc, "offsets", None)
        except Exception:  # noqa: BLE001
            offsets = None
    if offsets is None:
        return None
    if (
        offsets
        and isinstance(offsets[0], (list, tuple))
        and offsets[0]
        and isinstance(offsets[0][0], (list, tuple))
    ):
        offsets = offsets[0]  # batched output
    starts = [int(o[0]) for o in offsets]
    if any(starts[i] > starts[i + 1] for i in range(len(starts) - 1)):
        starts.sort()
    return starts


def _encode_len(tokenizer, s: str) -> int:
    if not s:
        return 0
    try:
        ids = tokenizer.encode(s, add_special_tokens=False)
    except TypeError:
        ids = tokenizer.encode(s)
    ids = getattr(ids, "ids", ids)
    return len(ids)


def _default_count(s: str, is_tag: bool) -> int:
    return 1 if is_tag else _words(s)


def _offset_counter(starts: list[int]):
    state = [0, 0]  # char cursor, token index at cursor

    def count(s: str, is_tag: bool) -> int:
        state[0] += len(s)
        i = bisect_left(starts, state[0])
        u = i - state[1]
        state[1] = i
        return u

    return count


def _encode_counter(tokenizer):
    cache: dict[str, int] = {}

    def count(s: str, is_tag: bool) -> int:
        if is_tag:
            u = cache.get(s)
            if u is None:
                u = cache[s] = _encode_len(tokenizer, s)
            return u
        return _encode_len(tokenizer, s)

    return count


# --------------------------------------------------------------------------- walker


class _Walker:
    __slots__ = ("blocks", "branches", "count", "depth", "first", "pos", "shares", "spec")

    def __init__(self, spec: FormatSpec, count):
        self.spec = spec
        self.count = count
        self.pos = 0
        self.shares = {"main": 0, PATH: 0, SUBTASK: 0, TRIAL: 0}
        self.blocks = 0
        self.branches = 0
        self.depth = 0
        self.first = None

    def seq(self, nodes, kind: str, depth: int) -> int:
        crit = 0
        count = self.count
        for n in nodes:
            if type(n) is str:
                u = count(n, False)
                self.pos += u
                self.shares[kind] += u
                crit += u
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

    def block(self, b: Block, kind: str, depth: int) -> int:
        spec = self.spec
        piece = self._piece
        if self.first is None:
            self.first = self.pos
        self.blocks += 1
        n = len(b.branches)
        self.branches += n
        self.depth = max(self.depth, depth)
        start = self.pos
        sum_units = 0
        max_crit = 0
        if spec.is_parason:
            gaps = b.gaps or ("",) * (2 * n + 3)
            piece(spec.parallel_open, kind, True)
            piece(gaps[0], kind, False)
            piece(spec.outlines_open, kind, True)
            piece(gaps[1], kind, False)
            for i, br in enumerate(b.branches):
                k = br.kind
                if k == TRIAL:
                    piece(spec.trial_open, k, True)
                    piece(br.outline or "", k, False)
                    piece(spec.trial_close, k, True)
                else:
                    piece(spec.subtask_open, k, True)
                    piece(br.outline or "", k, False)
                    piece(spec.subtask_close, k, True)
                piece(gaps[2 + i], kind, False)
            piece(spec.outlines_close, kind, True)
            piece(gaps[n + 2], kind, False)
            for i, br in enumerate(b.branches):
                k = br.kind
                t0 = self.pos
                c = piece(spec.thread_open, k, True)
                c += self.seq(br.body, k, depth)
                c += piece(spec.thread_close, k, True)
                sum_units += self.pos - t0
                max_crit = max(max_crit, c)
                piece(gaps[n + 3 + i], kind, False)
        else:
            gaps = b.gaps or ("",) * (n + 2)
            piece(spec.parallel_open, kind, True)
            piece(gaps[0], kind, False)
            for i, br in enumerate(b.branches):
                t0 = self.pos
                c = piece(spec.path_open, PATH, True)
                c += self.seq(br.body, PATH, depth)
                c += piece(spec.path_close, PATH, True)
                sum_units += self.pos - t0
                max_crit = max(max_crit, c)
                piece(gaps[1 + i], kind, False)
            piece(spec.summary_open, kind, True)
            piece(b.summary or "", kind, False)
            piece(spec.summary_close, kind, True)
            piece(gaps[n + 1], kind, False)
        piece(spec.parallel_close, kind, True)
        return (self.pos - start) - sum_units + max_crit


class _DefaultWalker:
    """Default-unit walker: tags are 1 unit and gaps 0, so only text nodes are counted.

    ``words(s, c)`` counts the words of text node ``s`` that starts at character ``c`` of the
    rendered text (the ASCII fast path counts in a once-translated copy of the whole text).
    """

    __slots__ = ("blocks", "branches", "c", "depth", "first", "lens", "pos", "shares", "spec", "words")

    def __init__(self, spec: FormatSpec, words):
        self.spec = spec
        self.words = words
        self.c = 0  # character cursor
        self.pos = 0  # unit cursor
        self.shares = {"main": 0, PATH: 0, SUBTASK: 0, TRIAL: 0}
        self.blocks = 0
        self.branches = 0
        self.depth = 0
        self.first = None
        if spec.is_parason:
            self.lens = (
                len(spec.parallel_open) + len(spec.outlines_open),
                len(spec.subtask_open),
                len(spec.subtask_close),
                len(spec.trial_open),
                len(spec.trial_close),
                len(spec.outlines_close),
                len(spec.thread_open),
                len(spec.thread_close),
                len(spec.parallel_close),
            )
        else:
            self.lens = (
                len(spec.parallel_open),
                len(spec.path_open),
                len(spec.path_close),
                len(spec.summary_open),
                len(spec.summary_close),
                len(spec.parallel_close),
            )

    def seq(self, nodes, kind: str, depth: int) -> int:
        crit = 0
        words = self.words
        for n in nodes:
            if type(n) is str:
                u = words(n, self.c)
                self.c += len(n)
                self.pos += u
                self.shares[kind] += u
                crit += u
            else:
                crit += self.block(n, kind, depth + 1)
        return crit

    def block(self, b: Block, kind: str, depth: int) -> int:
        if self.first is None:
            self.first = self.pos
        self.blocks += 1
        branches = b.branches
        n = len(branches)
        self.branches += n
        self.depth = max(self.depth, depth)
        words = self.words
        shares = self.shares
        start = self.pos
        sum_units = 0
        max_crit = 0
        gaps = b.gaps
        if self.spec.is_parason:
            l_po_oo, l_so, l_sc, l_to, l_tc, l_oc, l_tho, l_thc, l_pc = self.lens
            if gaps:
                self.c += len(gaps[0]) + len(gaps[1])
            self.c += l_po_oo
            self.pos += 2
            shares[kind] += 2
            for i, br in enumerate(branches):
                k = br.kind
                o = br.outline or ""
                self.c += l_to if k == TRIAL else l_so
                u = 2 + words(o, self.c) if o else 2
                self.c += len(o) + (l_tc if k == TRIAL else l_sc)
                if gaps:
                    self.c += len(gaps[2 + i])
                self.pos += u
                shares[k] += u
            self.c += l_oc
            if gaps:
                self.c += len(gaps[n + 2])
            self.pos += 1
            shares[kind] += 1
            for i, br in enumerate(branches):
                k = br.kind
                t0 = self.pos
                self.c += l_tho
                self.pos += 1
                c = 2 + self.seq(br.body, k, depth)
                self.pos += 1
                self.c += l_thc
                shares[k] += 2
                if gaps:
                    self.c += len(gaps[n + 3 + i])
                sum_units += self.pos - t0
                max_crit = max(max_crit, c)
            self.c += l_pc
            self.pos += 1
            shares[kind] += 1
        else:
            l_po, l_ho, l_hc, l_so, l_sc, l_pc = self.lens
            self.c += l_po
            if gaps:
                self.c += len(gaps[0])
            self.pos += 1
            shares[kind] += 1
            for i, br in enumerate(branches):
                t0 = self.pos
                self.c += l_ho
                self.pos += 1
                c = 2 + self.seq(br.body, PATH, depth)
                self.pos += 1
                self.c += l_hc
                shares[PATH] += 2
                if gaps:
                    self.c += len(gaps[1 + i])
                sum_units += self.pos - t0
                max_crit = max(max_crit, c)
            sm = b.summary or ""
            self.c += l_so
            u = 2 + words(sm, self.c) if sm else 2
            self.c += len(sm) + l_sc
            if gaps:
                self.c += len(gaps[n + 1])
            self.c += l_pc
            u += 1
            self.pos += u
            shares[kind] += u
        return (self.pos - start) - sum_units + max_crit


class _PartsWalker(_DefaultWalker):
    """Default units from precomputed per-piece word counts of the parsed text.

    ``wc[k]`` is the word count of ``parts[k]`` (the parser's tag split).  Between two tags there
    is exactly one even-indexed piece, so walking the tree in textual order and moving ``k`` by 2
    at every tag keeps ``k`` on the piece that holds the current text node (empty text nodes
    are absent from the tree but their piece is still counted past).
    """

    __slots__ = ("k", "wc")

    def __init__(self, spec: FormatSpec, wc: list[int]):
        super().__init__(spec, None)
        self.wc = wc
        self.k = 0

    def seq(self, nodes, kind: str, depth: int) -> int:
        crit = 0
        for n in nodes:
            if type(n) is str:
                u = self.wc[self.k]
                self.pos += u
                self.shares[kind] += u
                crit += u
            else:
                crit += self.block(n, kind, depth + 1)
        return crit

    def block(self, b: Block, kind: str, depth: int) -> int:
        if self.first is None:
            self.first = self.pos
        self.blocks += 1
        branches = b.branches
        n = len(branches)
        self.branches += n
        self.depth = max(self.depth, depth)
        wc = self.wc
        shares = self.shares
        start = self.pos
        sum_units = 0
        max_crit = 0
        if self.spec.is_parason:
            k = self.k + 4  # the gap after <Outlines>; each entry's text is then at k + 2
            self.pos += 2
            shares[kind] += 2
            for br in branches:
                u = 2 + wc[k + 2]  # piece after the entry's opening tag
                k += 4  # past the opening and closing tag of the entry
                self.pos += u
                shares[br.kind] += u
            k += 2  # past </Outlines>
            self.pos += 1
            shares[kind] += 1
            for br in branches:
                bk = br.kind
                t0 = self.pos
                self.k = k + 2  # the first piece of the Thread body
                self.pos += 1
                c = 2 + self.seq(br.body, bk, depth)
                self.pos += 1
                shares[bk] += 2
                k = self.k + 2  # past </Thread>
                sum_units += self.pos - t0
                max_crit = max(max_crit, c)
            self.k = k + 2  # past </Parallel>
            self.pos += 1
            shares[kind] += 1
        else:
            k = self.k + 2  # past <Parallel>
            self.pos += 1
            shares[kind] += 1
            for _br in branches:
                t0 = self.pos
                c = 2 + wc[k + 2]  # <Path> text </Path>
                k += 4
                self.pos += c
                shares[PATH] += c
                sum_units += c
                max_crit = max(max_crit, c)
            u = 3 + wc[k + 2]  # <Summary> text </Summary> </Parallel>
            self.k = k + 6
            self.pos += u
            shares[kind] += u
        return (self.pos - start) - sum_units + max_crit


def _string_words(s: str, c: int) -> int:
    return _words(s)


def _ascii_words(text: str):
    b = text.encode("ascii").translate(_WS_TABLE)
    cnt = b.count

    def words(s: str, a: int) -> int:
        return cnt(b" a", a, a + len(s)) + (b[a] == 97) if s else 0

    return words


def compute_metrics(
    tree: Trajectory | ParseResult,
    spec: FormatSpec | str = "parason",
    tokenizer=None,
    *,
    text: str | None = None,
    _generic: bool = False,
) -> Metrics:
    """Metrics of a valid tree, or of a successful :class:`ParseResult` (fastest: the parser's
    pieces are reused, and all default-unit word counts come from one vectorised pass).

    ``text`` must be the tree's exact rendering when given (as after ``parse(text)``): it saves
    a render when a tokenizer is used, and lets default units be counted in one pass.
    """
    spec = resolve_spec(spec)
    if isinstance(tree, ParseResult):
        if not tree.ok:
            raise ValueError(f"cannot compute metrics of a failed parse ({tree.status})")
        res = tree
        tree = res.tree
        if text is None:
            text = res._text
        if tokenizer is None and not _generic and res._parts is not None:
            w = _PartsWalker(spec, part_words(res._text, res._parts))
            return _finish(w, w.seq(tree.nodes, "main", 0))
    if tokenizer is None and _generic:  # reference implementation, used by the tests
        w = _Walker(spec, _default_count)
    elif tokenizer is None:
        w = _DefaultWalker(spec, _ascii_words(text) if text is not None and text.isascii() else _string_words)
    else:
        if text is None:
            text = render(tree, spec)
        starts = _token_starts(tokenizer, text)
        count = _offset_counter(starts) if starts is not None else _encode_counter(tokenizer)
        w = _Walker(spec, count)
    return _finish(w, w.seq(tree.nodes, "main", 0))


def _finish(w, crit: int) -> Metrics:
    total = w.pos
    sh = w.shares
    first = w.first
    t = total or 1  # empty text: every ratio is 0 (speedup 1)
    return Metrics(
        total_tokens=total,
        critical_path_tokens=crit,
        speedup=total / crit if crit else 1.0,
        eta=(total - crit) / t,
        has_parallel=w.blocks > 0,
        num_blocks=w.blocks,
        num_branches=w.branches,
        depth=w.depth,
        first_parallel_token=first,
        first_parallel_pos=None if first is None else first / t,
        main_tokens=sh["main"],
        subtask_tokens=sh[SUBTASK],
        trial_tokens=sh[TRIAL],
        path_tokens=sh[PATH],
        subtask_share=sh[SUBTASK] / t,
        trial_share=sh[TRIAL] / t,
        path_share=sh[PATH] / t,
    )


def text_stats(text, spec: FormatSpec | str = "parason", tokenizer=None) -> dict:
    """Parse + metrics of one text as a flat JSON-able dict; never raises on bad input.

    Keys: every :class:`Metrics` field, ``valid`` (bool), ``status`` and ``error`` (``None`` or
    :meth:`ParseError.to_dict`).  For an invalid text only ``total_tokens`` and ``has_parallel``
    (whether the ``<Parallel>`` tag occurs) are filled; the other metric fields are ``None``.
    """
    spec = resolve_spec(spec)
    res: ParseResult = parse(text, spec, tokenizer=tokenizer)
    if res.ok:
        try:
            out = compute_metrics(res, spec, tokenizer).to_dict()
        except Exception as e:  # noqa: BLE001 -- a broken tokenizer object
            out = dict.fromkeys(METRIC_FIELDS)
            out.update(valid=False, status="error", error={"code": "metrics_failed", "message": repr(e)})
            return out
        out.update(valid=True, status="ok", error=None)
        return out
    out = dict.fromkeys(METRIC_FIELDS)
    if isinstance(text, str):
        try:
            if tokenizer is None:
                out["total_tokens"] = _default_token_offset(text, len(text), _compiled(spec))
            else:
                starts = _token_starts(tokenizer, text)
                out["total_tokens"] = len(starts) if starts is not None else _encode_len(tokenizer, text)
        except Exception:  # noqa: BLE001
            out["total_tokens"] = None
        out["has_parallel"] = spec.parallel_open in text
    out.update(valid=False, status=res.status, error=res.error.to_dict() if res.error else None)
    return out
