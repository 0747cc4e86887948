"""Parser: text -> :class:`~formats.tree.Trajectory`, strict or lenient; renderer: tree -> text.

One ``re.finditer`` scan over the alternation of the format's tag strings drives an explicit
state machine with a stack (no recursion, no per-character Python loop).  The parser never
raises on any ``str`` input, runs in time linear in the input length and bounds nesting depth
by ``spec.max_depth`` (deeper ``<Parallel>`` is an error, not a deeper stack).

Content alphabet rule (shared with the grammars in :mod:`formats.grammar`)
-------------------------------------------------------------------------
Free text -- the main chain, Path/Summary text, outline entries, Thread text -- is any string
that contains **no tag string of the format** (other ``<`` are fine: ``x < 3`` is text, and so is
``<Foo>`` or a ``<Thread>`` inside a Parallel-R1 trajectory).  Between structural tags inside a
block (e.g. between ``</Path>`` and ``<Path>``, or ``<Parallel>`` and ``<Outlines>``) only
whitespace from ``" \\t\\r\\n"`` is allowed; it is kept in ``Block.gaps`` so round trips are exact.
Branch contents may be empty.

Statuses (``ParseResult.status``)
---------------------------------
``"ok"``                  valid, complete trajectory.
``"truncated_in_branch"`` input ends inside an open content element (Path, Summary, Subtask,
                          Trial or Thread) -- typical of a max-length cut.
``"unclosed_block"``      input ends inside an open ``<Parallel>`` block but outside any content
                          element (e.g. between two Threads, or after ``</Summary>``).
``"malformed"``           any structural violation before the end of input (unexpected or
                          mismatched tag, text between structural tags, branch count out of
                          ``[min_branches, max_branches]``, Thread count != outline count, nesting
                          deeper than ``max_depth``).

Both modes report the same status and :class:`ParseError`.  In ``strict`` mode ``tree`` is
``None`` unless the status is ``"ok"``; in ``lenient`` mode ``tree`` is always set: for a failed
parse it is the tree of the longest valid prefix ``text[:prefix_end]``, which ends where the
outermost element containing the problem starts (the start of the unclosed top-level
``<Parallel>``, or the offending top-level tag).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass, field
from functools import lru_cache

from formats.spec import FormatSpec, get_spec
from formats.tree import PATH, SUBTASK, TRIAL, Block, Branch, Trajectory

__all__ = [
    "GAP_CHARS",
    "STATUSES",
    "ParseError",
    "ParseResult",
    "final_segment",
    "parse",
    "render",
    "resolve_spec",
]

STATUSES = ("ok", "truncated_in_branch", "unclosed_block", "malformed")
#: Characters allowed between structural tags inside a block.
GAP_CHARS = " \t\r\n"

# tag codes
_P_O, _P_C, _PATH_O, _PATH_C, _SUM_O, _SUM_C = 0, 1, 2, 3, 4, 5
_OUT_O, _OUT_C, _SUB_O, _SUB_C, _TRI_O, _TRI_C, _THR_O, _THR_C = 6, 7, 8, 9, 10, 11, 12, 13

# parser states
_SEQ = 0  # main chain or Thread body: free text and nested blocks
_R1_BR = 1  # Parallel-R1 block, between tags, expecting <Path> or <Summary>
_IN_PATH = 2
_IN_SUM = 3
_R1_END = 4  # after </Summary>, expecting </Parallel>
_PA_OPEN = 5  # Parason block just opened, expecting <Outlines>
_OUTL = 6  # inside <Outlines>, between entries
_IN_ENTRY = 7
_THREADS = 8  # after </Outlines> or </Thread>, expecting <Thread> or </Parallel>

_CONTENT_STATES = frozenset((_IN_PATH, _IN_SUM, _IN_ENTRY))


@dataclass(frozen=True, slots=True)
class ParseError:
    """What went wrong and where.

    ``code``: short machine-readable reason (``unexpected_tag``, ``mismatched_close``,
    ``text_between_tags``, ``too_few_branches``, ``too_many_branches``, ``missing_thread``,
    ``extra_thread``, ``too_deep``, ``truncated_in_branch``, ``unclosed_block``, ``not_a_string``).
    ``char_offset``: character index in the input (``len(text)`` for end-of-input problems).
    ``token_offset``: index of the token containing ``char_offset`` -- in tokens of the tokenizer
    passed to :func:`parse`, else in the default units of :mod:`formats.metrics` (whitespace
    words, each tag one unit).
    """

    code: str
    message: str
    char_offset: int
    token_offset: int
    tag: str | None = None

    def to_dict(self) -> dict:
        return {
            "code": self.code,
            "message": self.message,
            "char_offset": self.char_offset,
            "token_offset": self.token_offset,
            "tag": self.tag,
        }


@dataclass(slots=True)
class ParseResult:
    """Outcome of :func:`parse`; ``ok`` iff ``status == "ok"``.

    A successful result also remembers the parsed text and its tag-split pieces, so that
    :func:`formats.metrics.compute_metrics` given the result counts default units without
    scanning the text again.
    """

    status: str
    tree: Trajectory | None
    error: ParseError | None
    prefix_end: int
    _text: str | None = field(default=None, repr=False, compare=False)
    _parts: list | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def resolve_spec(spec: FormatSpec | str) -> FormatSpec:
    """Accept a :class:`FormatSpec` or a format name."""
    if isinstance(spec, FormatSpec):
        return spec
    return get_spec(spec)


class _Compiled:
    __slots__ = ("codes", "parason", "regex", "spec", "split", "tags")

    def __init__(self, spec: FormatSpec):
        self.spec = spec
        self.parason = spec.is_parason
        by_code = {
            _P_O: spec.parallel_open,
            _P_C: spec.parallel_close,
        }
        if self.parason:
            by_code.update(
                {
                    _OUT_O: spec.outlines_open,
                    _OUT_C: spec.outlines_close,
                    _SUB_O: spec.subtask_open,
                    _SUB_C: spec.subtask_close,
                    _TRI_O: spec.trial_open,
                    _TRI_C: spec.trial_close,
                    _THR_O: spec.thread_open,
                    _THR_C: spec.thread_close,
                }
            )
        else:
            by_code.update(
                {
                    _PATH_O: spec.path_open,
                    _PATH_C: spec.path_close,
                    _SUM_O: spec.summary_open,
                    _SUM_C: spec.summary_close,
                }
            )
        self.tags = by_code
        self.codes = {t: c for c, t in by_code.items()}
        # Longest first is not needed (no tag is a prefix of another: all end with the only '>').
        alt = "|".join(re.escape(t) for t in sorted(by_code.values(), key=len, reverse=True))
        self.regex = re.compile(alt)
        self.split = re.compile("(" + alt + ")").split


@lru_cache(maxsize=64)
def _compiled(spec: FormatSpec) -> _Compiled:
    return _Compiled(spec)


def _is_gap(s: str) -> bool:
    return not s.strip(GAP_CHARS)


#: Default-unit whitespace: code points 0-32 (space and the ASCII control characters, which
#: include \t \n \v \f \r); every other character is part of a word.
_WS_TABLE = bytes(32 if b <= 32 else 97 for b in range(256))


def _default_token_offset(text: str, pos: int, comp: _Compiled) -> int:
    """Index of the default unit containing char ``pos`` (number of units starting before it)."""
    parts = comp.split(text[:pos])
    return _units_before(parts[:-1] if len(parts) > 1 else [], parts[-1])


def _units_before(parts: list, tail: str = "") -> int:
    """Default units in ``parts`` (alternating text, tag, ...) followed by the text ``tail``."""
    return len(parts) // 2 + sum(_words(p) for p in parts[0::2]) + _words(tail)


def _words(s: str) -> int:
    if not s:
        return 0
    b = s.encode("utf-8", "surrogatepass").translate(_WS_TABLE)
    return b.count(b" a") + (b[0] == 97)


def part_words(text: str, parts: list) -> list[int]:
    """Whitespace-word count of every element of ``parts`` (a split of ``text``), vectorised.

    One numpy pass over the text finds every word start; each part's count is then a binary
    search.  Equals ``[_words(p) for p in parts]``.
    """
    import numpy as np

    n = len(text)
    if n == 0:
        return [0] * len(parts)
    if text.isascii():
        arr = np.frombuffer(text.encode("ascii"), np.uint8)
    else:  # one code unit per character, so part lengths are offsets
        arr = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    ws = arr <= 32
    starts = np.flatnonzero(ws[:-1] > ws[1:])  # p: whitespace at p, a word starts at p + 1
    lens = np.array(list(map(len, parts)))
    e = lens.cumsum()
    a = e - lens
    m = len(parts)
    # word starts strictly inside (a, e) are p in [a, e - 1); plus one if the part starts a word
    q = np.searchsorted(starts, np.concatenate((e - 1, a)))
    first = ~ws[np.minimum(a, n - 1)]
    return np.where(lens > 0, q[:m] - q[m:] + first, 0).tolist()


def _token_offset(text: str, pos: int, comp: _Compiled, tokenizer, parts=None, k=None) -> int:
    if tokenizer is None:
        if parts is not None and k is not None:
            # pos is the start of part k (k == len(parts): the end of the input)
            head = parts[:k]
            words = part_words(text[:pos], head)
            return len(head) // 2 + sum(words[0::2])
        return _default_token_offset(text, pos, comp)
    try:
        from formats.metrics import _token_starts

        starts = _token_starts(tokenizer, text)
        if starts is not None:
            # the token containing pos is the last one starting at or before it
            i = bisect_left(starts, pos + 1) - 1
            return max(i, 0) if pos < len(text) else len(starts)
        from formats.metrics import _encode_len

        return _encode_len(tokenizer, text[:pos])
    except Exception:  # noqa: BLE001 -- a tokenizer failure must not make parse() raise
        return _default_token_offset(text, pos, comp)


def parse(
    text: str, spec: FormatSpec | str = "parason", *, strict: bool = True, tokenizer=None
) -> ParseResult:
    """Parse ``text`` in format ``spec`` (a :class:`FormatSpec` or ``"parallel_r1"``/``"parason"``).

    Never raises for any input (a non-``str`` gives status ``"malformed"``, code ``not_a_string``).
    ``tokenizer`` only affects :attr:`ParseError.token_offset`.
    """
    comp = _compiled(resolve_spec(spec))
    if not isinstance(text, str):
        err = ParseError("not_a_string", f"expected str, got {type(text).__name__}", 0, 0)
        return ParseResult("malformed", Trajectory(()) if not strict else None, err, 0)
    out = _scan(text, comp)
    if out[0] == "ok":
        return ParseResult("ok", out[1], None, len(text), text, out[2])
    status, code, msg, pos, tag, prefix_end, top_nodes, top_last, parts, k = out
    err = ParseError(code, msg, pos, _token_offset(text, pos, comp, tokenizer, parts, k), tag)
    tree = None
    if not strict:
        nodes = list(top_nodes)
        if prefix_end > top_last:
            nodes.append(text[top_last:prefix_end])
        tree = Trajectory(tuple(nodes))
    return ParseResult(status, tree, err, prefix_end)


def _scan(text: str, comp: _Compiled):
    """Core state machine.  Returns ("ok", tree) or an error tuple (see :func:`parse`).

    ``regex.split`` (one C-level scan, capturing group) yields ``[text, tag, text, tag, ..., text]``:
    even indices are the free-text pieces, odd indices the tags.  Character offsets are only
    computed on the error path.
    """
    parts = comp.split(text)
    # local aliases of the module constants (LOAD_FAST in the hot loop)
    SEQ, R1_BR, IN_PATH, IN_SUM, R1_END = _SEQ, _R1_BR, _IN_PATH, _IN_SUM, _R1_END
    PA_OPEN, OUTL, IN_ENTRY = _PA_OPEN, _OUTL, _IN_ENTRY
    P_O, P_C, PATH_O, PATH_C, SUM_O, SUM_C = _P_O, _P_C, _PATH_O, _PATH_C, _SUM_O, _SUM_C
    OUT_O, OUT_C, SUB_O, SUB_C, TRI_O, TRI_C, THR_O, THR_C = (
        _OUT_O,
        _OUT_C,
        _SUB_O,
        _SUB_C,
        _TRI_O,
        _TRI_C,
        _THR_O,
        _THR_C,
    )
    codes = comp.codes
    parason = comp.parason
    spec = comp.spec
    min_b = spec.min_branches
    max_b = spec.max_branches
    max_depth = spec.max_depth if parason else 1
    tags = comp.tags

    top: list = []  # top-level nodes
    nodes = top  # current node sequence (top level or Thread body)
    state = _SEQ
    # block frame: [gaps, bodies, entries (kind, outline), summary, threads_done]
    block = None
    stack: list = []  # (block, parent node list) of enclosing Parason blocks
    depth = 0
    entry_kind = 0  # code of the open outline entry's opening tag
    top_block_k = -1  # part index of the open top-level <Parallel>
    top_last_k = 0  # first part index not yet consumed at top level

    def off(k: int) -> int:
        return sum(map(len, parts[:k]))

    def fail(code, msg, k, tag=None, eof=False):
        pos = len(text) if eof else off(k)
        if top_block_k >= 0:
            prefix_end = off(top_block_k)
        else:
            prefix_end = pos
        status = "malformed" if not eof else code
        return (
            status,
            code,
            msg,
            pos,
            tag,
            prefix_end,
            top,
            off(top_last_k),
            parts,
            len(parts) if eof else k,
        )

    i = 1
    n_parts = len(parts)
    while i < n_parts:
        tag = parts[i]
        c = codes[tag]
        piece = parts[i - 1]
        if state == SEQ:
            if c == P_O:
                if piece:
                    nodes.append(piece)
                depth += 1
                if depth > max_depth:
                    return fail("too_deep", f"{tag} at nesting depth {depth} > max_depth {max_depth}", i, tag)
                if block is None:
                    top_block_k = top_last_k = i
                else:
                    stack.append((block, nodes))
                block = [[], [], [], None, 0]
                state = PA_OPEN if parason else R1_BR
            elif c == THR_C and block is not None:
                if piece:
                    nodes.append(piece)
                block[1].append(tuple(nodes))
                block[4] += 1
                state = _THREADS
            else:
                where = "in a Thread" if block is not None else "in the main chain"
                return fail("unexpected_tag", f"unexpected {tag} {where}", i, tag)
        elif state == IN_PATH:
            if c != PATH_C:
                return fail("unexpected_tag", f"expected {tags[PATH_C]} inside a Path, found {tag}", i, tag)
            block[1].append(Branch(PATH, (piece,) if piece else ()))
            state = R1_BR
        elif state == IN_ENTRY:
            if c != entry_kind + 1:
                if c == SUB_C or c == TRI_C:
                    return fail("mismatched_close", f"{tag} closes {tags[entry_kind]}", i, tag)
                return fail("unexpected_tag", f"expected {tags[entry_kind + 1]}, found {tag}", i, tag)
            block[2].append((SUBTASK if entry_kind == SUB_O else TRIAL, piece))
            state = OUTL
        elif state == IN_SUM:
            if c != SUM_C:
                return fail("unexpected_tag", f"expected {tags[SUM_C]} inside Summary, found {tag}", i, tag)
            block[3] = piece
            state = R1_END
        else:
            # structural states: only whitespace may precede this tag
            if piece and piece.strip(GAP_CHARS):
                return fail(
                    "text_between_tags", f"non-whitespace text before {tag} inside a block", i - 1, tag
                )
            block[0].append(piece)
            if state == R1_BR:
                nb = len(block[1])
                if c == PATH_O:
                    if nb >= max_b:
                        return fail("too_many_branches", f"more than max_branches={max_b} Paths", i, tag)
                    state = IN_PATH
                elif c == SUM_O:
                    if nb < min_b:
                        return fail(
                            "too_few_branches", f"{nb} Path(s) before Summary, need >= {min_b}", i, tag
                        )
                    state = IN_SUM
                else:
                    exp = tags[PATH_O] if nb < min_b else f"{tags[PATH_O]} or {tags[SUM_O]}"
                    return fail("unexpected_tag", f"expected {exp}, found {tag}", i, tag)
            elif state == R1_END:
                if c != P_C:
                    return fail("unexpected_tag", f"expected {tags[P_C]} after Summary, found {tag}", i, tag)
                gaps = block[0]
                top.append(Block(tuple(block[1]), block[3], tuple(gaps) if any(gaps) else ()))
                depth = 0
                block = None
                top_block_k = -1
                state = SEQ
            elif state == PA_OPEN:
                if c != OUT_O:
                    return fail("unexpected_tag", f"expected {tags[OUT_O]}, found {tag}", i, tag)
                state = OUTL
            elif state == OUTL:
                ne = len(block[2])
                if c == SUB_O or c == TRI_O:
                    if ne >= max_b:
                        return fail(
                            "too_many_branches", f"more than max_branches={max_b} outline entries", i, tag
                        )
                    entry_kind = c
                    state = IN_ENTRY
                elif c == OUT_C:
                    if ne < min_b:
                        return fail("too_few_branches", f"{ne} outline entries, need >= {min_b}", i, tag)
                    state = _THREADS
                else:
                    return fail(
                        "unexpected_tag",
                        f"expected {tags[SUB_O]}, {tags[TRI_O]} or {tags[OUT_C]}, found {tag}",
                        i,
                        tag,
                    )
            else:  # _THREADS
                ne = len(block[2])
                nt = block[4]
                if c == THR_O:
                    if nt >= ne:
                        return fail("extra_thread", f"Thread {nt + 1} but only {ne} outline entries", i, tag)
                    nodes = []  # the Thread body; the parent sequence is restored at </Parallel>
                    state = SEQ
                elif c == P_C:
                    if nt < ne:
                        return fail("missing_thread", f"{tag} after {nt} of {ne} Threads", i, tag)
                    gaps = block[0]
                    node = Block(
                        tuple([Branch(k, b, o) for (k, o), b in zip(block[2], block[1])]),
                        None,
                        tuple(gaps) if any(gaps) else (),
                    )
                    depth -= 1
                    state = SEQ
                    if stack:
                        block, nodes = stack.pop()
                        nodes.append(node)
                    else:
                        block = None
                        nodes = top
                        top.append(node)
                        top_block_k = -1
                else:
                    exp = tags[THR_O] if nt < ne else tags[P_C]
                    return fail("unexpected_tag", f"expected {exp}, found {tag}", i, tag)
        if block is None:
            top_last_k = i + 1
        i += 2

    # end of input
    piece = parts[-1]
    if block is None:
        if piece:
            top.append(piece)
        return ("ok", Trajectory(tuple(top)), parts)
    if state in _CONTENT_STATES or state == _SEQ:
        return fail("truncated_in_branch", "input ends inside an open branch/content element", 0, eof=True)
    if piece and piece.strip(GAP_CHARS):
        rest = piece.lstrip(GAP_CHARS)
        if not any(t.startswith(rest) for t in tags.values()):
            return fail(
                "text_between_tags", "non-whitespace text at end of input inside a block", n_parts - 1
            )
        # else: the input was cut in the middle of a tag -- still a truncation
    return fail("unclosed_block", "input ends inside an unclosed parallel block", 0, eof=True)


# --------------------------------------------------------------------------- renderer


def render(tree: Trajectory, spec: FormatSpec | str = "parason") -> str:
    """Render a tree back to text (exact inverse of :func:`parse` on canonical trees).

    The renderer does not validate branch counts or depth (parse the result to check), but
    raises ``ValueError`` for a block whose ``gaps`` has the wrong length or a non-``str`` node.
    """
    spec = resolve_spec(spec)
    parts: list[str] = []
    _render_nodes(tree.nodes, spec, parts)
    return "".join(parts)


def _render_nodes(nodes, spec: FormatSpec, parts: list[str]) -> None:
    for n in nodes:
        if type(n) is str:
            parts.append(n)
        elif type(n) is Block:
            _render_block(n, spec, parts)
        else:
            raise ValueError(f"tree node must be str or Block, got {type(n).__name__}")


def _render_block(b: Block, spec: FormatSpec, parts: list[str]) -> None:
    n = len(b.branches)
    parason = spec.is_parason
    ng = 2 * n + 3 if parason else n + 2
    gaps = b.gaps or ("",) * ng
    if len(gaps) != ng:
        raise ValueError(f"block with {n} branches needs {ng} gaps in {spec.name}, got {len(gaps)}")
    parts.append(spec.parallel_open)
    parts.append(gaps[0])
    if parason:
        parts.append(spec.outlines_open)
        parts.append(gaps[1])
        for i, br in enumerate(b.branches):
            if br.kind == SUBTASK:
                o, c = spec.subtask_open, spec.subtask_close
            elif br.kind == TRIAL:
                o, c = spec.trial_open, spec.trial_close
            else:
                raise ValueError(f"Parason branch kind must be {SUBTASK!r} or {TRIAL!r}, got {br.kind!r}")
            parts.append(o)
            parts.append(br.outline or "")
            parts.append(c)
            parts.append(gaps[2 + i])
        parts.append(spec.outlines_close)
        parts.append(gaps[n + 2])
        for i, br in enumerate(b.branches):
            parts.append(spec.thread_open)
            _render_nodes(br.body, spec, parts)
            parts.append(spec.thread_close)
            parts.append(gaps[n + 3 + i])
    else:
        for i, br in enumerate(b.branches):
            if br.kind != PATH:
                raise ValueError(f"Parallel-R1 branch kind must be {PATH!r}, got {br.kind!r}")
            parts.append(spec.path_open)
            _render_nodes(br.body, spec, parts)
            parts.append(spec.path_close)
            parts.append(gaps[1 + i])
        parts.append(spec.summary_open)
        parts.append(b.summary or "")
        parts.append(spec.summary_close)
        parts.append(gaps[n + 1])
    parts.append(spec.parallel_close)


def final_segment(tree: Trajectory | str, spec: FormatSpec | str = "parason") -> str | None:
    """Main-chain text after the last top-level parallel block closes (where answers live).

    ``""`` when the trajectory ends with a block; the whole text when it has no block.  Accepts
    a :class:`Trajectory` or a text (parsed strictly with ``spec``; ``None`` if it is invalid).
    """
    if isinstance(tree, str):
        res = parse(tree, spec)
        if not res.ok:
            return None
        tree = res.tree
    nodes = tree.nodes
    for i in range(len(nodes) - 1, -1, -1):
        if type(nodes[i]) is Block:
            return "".join(n for n in nodes[i + 1 :] if type(n) is str)
    return "".join(n for n in nodes if type(n) is str)
