"""The parser's core: one split of the text at the format's tag strings drives a state machine.

:func:`scan` splits the text into ``[text, tag, text, tag, ..., text]`` (even indices: free-text
pieces, odd indices: tags; the C accelerator or a regex split, see :mod:`parallax.formats.units`) and feeds
the tags to an explicit state machine with a stack -- one per format, no recursion and no
per-character Python loop -- that builds the tree or stops at the first violation.  Nesting depth
is bounded by ``spec.max_depth`` (a deeper ``<Parallel>`` is an error, not a deeper stack).
Character offsets are only computed on the error path (by :func:`parallax.formats.parser.parse`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from parallax.formats.spec import FormatSpec
from parallax.formats.tree import OUTLINE, PATH, SUBTASK, TRIAL, Block, Branch, Tree
from parallax.formats.units import split_tags

#: Characters allowed between structural tags inside a block.
GAP_CHARS = " \t\r\n"

# tag codes (an opening tag's closer is its code + 1)
_P_O, _P_C, _PATH_O, _PATH_C, _SUM_O, _SUM_C = 0, 1, 2, 3, 4, 5
_OUT_O, _OUT_C, _SUB_O, _SUB_C, _TRI_O, _TRI_C, _THR_O, _THR_C = 6, 7, 8, 9, 10, 11, 12, 13
_OLN_O, _OLN_C, _CON_O, _CON_C = 14, 15, 16, 17  # Parason aliases: <Outline>, <Conclusion>

# parser states; content states (free text before the next tag) are the ones < _PA_OPEN
_SEQ = 0  # main chain or Thread body: free text and nested blocks
_R1_BR = 1  # Parallel-R1 block, between tags, expecting <Path>, <Summary> or </Parallel>
_IN_PATH = 2
_IN_SUM = 3  # inside a Parallel-R1 <Summary> or a Parason <Conclusion>
_R1_END = 4  # after an inside </Summary>, expecting </Parallel>
_IN_ENTRY = 5
_R1_AFTER = 6  # Parallel-R1: after </Parallel> of a block whose <Summary> comes next
# Parason structural states (only whitespace before their next tag) are the ones >= _PA_OPEN
_PA_OPEN = 7  # Parason block just opened, expecting <Outlines>
_OUTL = 8  # inside <Outlines>, between entries
_THREADS = 9  # after </Outlines> or </Thread>, expecting <Thread>, <Conclusion> or </Parallel>
_CON_END = 10  # after an inside </Conclusion>, expecting </Parallel>

_ENTRY_KIND = {_SUB_O: SUBTASK, _TRI_O: TRIAL, _OLN_O: OUTLINE}


class _Compiled:
    """Per-spec tables: tag string <-> code, and the tags for the split (longest first)."""

    __slots__ = (
        "after",
        "closers",
        "codes",
        "entry_tags",
        "inside",
        "mark_after",
        "mark_inside",
        "parason",
        "spec",
        "split",
        "tag_tuple",
        "tags",
    )

    def __init__(self, spec: FormatSpec):
        self.spec = spec
        self.parason = spec.is_parason
        by_code = {_P_O: spec.parallel_open, _P_C: spec.parallel_close}
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
            if spec.uses_aliases:
                by_code.update(
                    {
                        _OLN_O: spec.outline_open,
                        _OLN_C: spec.outline_close,
                        _CON_O: spec.conclusion_open,
                        _CON_C: spec.conclusion_close,
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
        # summary / conclusion placements: accepted, and recorded (None where the spec writes it)
        has_summary = spec.uses_aliases if self.parason else True  # Parason's conclusion is an alias
        self.inside = has_summary and spec.accepts("inside")
        self.after = has_summary and spec.accepts("after")
        self.mark_after = None if spec.summary_placement == "after" else "after"
        self.mark_inside = None if spec.summary_placement == "inside" else "inside"
        if self.parason:
            self.closers = ""
            alias = f", {spec.outline_open}" if spec.uses_aliases else ""
            self.entry_tags = f"{spec.subtask_open}, {spec.trial_open}{alias}"
        else:
            self.closers = " or ".join(([spec.summary_open] if self.inside else []) +
                                       ([spec.parallel_close] if self.after else []))
            self.entry_tags = ""
        # Longest first like a regex alternation would need, though no tag is a prefix of another
        # (each ends with its only '>').  The C split returns these very objects as its tags.
        self.tag_tuple = tuple(sorted(by_code.values(), key=len, reverse=True))
        alt = "|".join(re.escape(t) for t in self.tag_tuple)
        self.split = re.compile("(" + alt + ")").split


_BY_ID: dict[int, tuple[FormatSpec, _Compiled]] = {}


def _compiled(spec: FormatSpec) -> _Compiled:
    """The tables of ``spec``, cached by identity first: hashing a spec costs more than a parse step."""
    hit = _BY_ID.get(id(spec))
    if hit is not None and hit[0] is spec:  # the entry holds spec, so its id is not reused
        return hit[1]
    if len(_BY_ID) >= 64:
        _BY_ID.clear()
    comp = _by_value(spec)
    _BY_ID[id(spec)] = (spec, comp)
    return comp


@lru_cache(maxsize=64)
def _by_value(spec: FormatSpec) -> _Compiled:
    return _Compiled(spec)


@dataclass(slots=True)
class _Failure:
    """Where and why :func:`scan` stopped; offsets are part indices (``len(parts)``: end of input)."""

    status: str
    code: str
    msg: str
    k: int  # the offending part
    tag: str | None
    top_k: int  # the open top-level <Parallel>, or -1
    top: list  # top-level nodes completed so far
    last_k: int  # first part not consumed at top level


def scan(text: str, comp: _Compiled) -> tuple[list[str], list[int] | None, Tree | _Failure]:
    """``(parts, words, tree or failure)``; ``words`` as from :func:`parallax.formats.units.split_tags`."""
    parts, words = split_tags(text, comp.tag_tuple, comp.split)
    out = _scan_parason(parts, comp) if comp.parason else _scan_r1(parts, comp)
    return parts, words, out


def _end(parts: list[str], comp: _Compiled, state: int, top: list, top_k: int, last_k: int):
    """End of input: the tree, or the truncation / unclosed-block failure."""
    piece = parts[-1]
    if top_k < 0:
        if piece:
            top.append(piece)
        return Tree(tuple(top))
    n = len(parts)
    if state == _R1_AFTER and piece.strip(GAP_CHARS):
        rest = piece.lstrip(GAP_CHARS)
        if not comp.tags[_SUM_O].startswith(rest):
            spec = comp.spec
            msg = f"text after {spec.parallel_close} where the block's {spec.summary_open} must come"
            return _Failure("malformed", "missing_summary", msg, n - 1, None, top_k, top, last_k)
    if state in (_SEQ, _IN_PATH, _IN_SUM, _IN_ENTRY):  # inside a branch, summary, conclusion or entry
        msg = "input ends inside an open branch/content element"
        return _Failure("truncated_in_branch", "truncated_in_branch", msg, n, None, top_k, top, last_k)
    if piece and piece.strip(GAP_CHARS):
        rest = piece.lstrip(GAP_CHARS)
        if not any(t.startswith(rest) for t in comp.tag_tuple):
            msg = "non-whitespace text at end of input inside a block"
            return _Failure("malformed", "text_between_tags", msg, n - 1, None, top_k, top, last_k)
        # else: the input was cut in the middle of a tag -- still a truncation
    msg = "input ends inside an unclosed parallel block"
    return _Failure("unclosed_block", "unclosed_block", msg, n, None, top_k, top, last_k)


def _scan_r1(parts: list[str], comp: _Compiled):
    """Parallel-R1 state machine (blocks never nest); the summary inside or after the block."""
    SEQ, R1_BR, IN_PATH, IN_SUM = _SEQ, _R1_BR, _IN_PATH, _IN_SUM
    P_O, P_C, PATH_O, PATH_C, SUM_O, SUM_C = _P_O, _P_C, _PATH_O, _PATH_C, _SUM_O, _SUM_C
    codes, tags, spec = comp.codes, comp.tags, comp.spec
    path_c, sum_o, sum_c = tags[PATH_C], tags[SUM_O], tags[SUM_C]
    min_b, max_b = spec.min_branches, spec.max_branches
    inside, after, closers = comp.inside, comp.after, comp.closers
    # the placement a parsed block records: None where the spec writes its summary
    mark_after, mark_inside = comp.mark_after, comp.mark_inside
    top: list = []  # top-level nodes
    state = SEQ
    gaps: list = []  # of the open block
    paths: list = []
    summary = ""
    placed_after = False  # the open block's summary follows its </Parallel>
    top_k = -1  # part index of the open <Parallel>
    last_k = 0

    def fail(code, msg, k, tag):
        return _Failure("malformed", code, msg, k, tag, top_k, top, last_k)

    def close(k: int) -> int:
        """The open block is complete; `k` is the first part after it. Returns the main-chain state."""
        nonlocal top_k, last_k
        place = mark_after if placed_after else mark_inside
        top.append(Block(tuple(paths), summary, tuple(gaps) if any(gaps) else (), place))
        top_k, last_k = -1, k
        return SEQ

    n = len(parts)
    i = 1
    while i < n:
        tag = parts[i]
        c = codes[tag]
        piece = parts[i - 1]
        if state == R1_BR:
            if piece and piece.strip(GAP_CHARS):
                msg = f"non-whitespace text before {tag} inside a block"
                return fail("text_between_tags", msg, i - 1, tag)
            gaps.append(piece)
            nb = len(paths)
            if c == PATH_O:
                if nb >= max_b:
                    return fail("too_many_branches", f"more than max_branches={max_b} Paths", i, tag)
                if i + 2 < n and parts[i + 2] == path_c:  # fast path: the whole Path at once
                    body = parts[i + 1]
                    paths.append(Branch(PATH, (body,) if body else ()))
                    i += 4
                    continue
                state = IN_PATH
            elif (c == SUM_O and inside) or (c == P_C and after):
                if nb < min_b:
                    return fail("too_few_branches", f"{nb} Path(s) before {tag}, need >= {min_b}", i, tag)
                placed_after = c == P_C
                if placed_after:
                    state = _R1_AFTER
                elif i + 2 < n and parts[i + 2] == sum_c:
                    summary = parts[i + 1]
                    state = _R1_END
                    i += 4
                    continue
                else:
                    state = IN_SUM
            else:
                exp = tags[PATH_O] if nb < min_b else f"{tags[PATH_O]} or {closers}"
                hint = ""
                if c == SUM_O or c == P_C:
                    hint = f" (summary_accept={spec.summary_accept})"
                return fail("unexpected_tag", f"expected {exp}, found {tag}{hint}", i, tag)
        elif state == SEQ:
            if c != P_O:
                return fail("unexpected_tag", f"unexpected {tag} in the main chain", i, tag)
            if piece:
                top.append(piece)
            top_k = last_k = i
            gaps = []
            paths = []
            state = R1_BR
        elif state == IN_PATH:
            if c != PATH_C:
                return fail("unexpected_tag", f"expected {path_c} inside a Path, found {tag}", i, tag)
            paths.append(Branch(PATH, (piece,) if piece else ()))
            state = R1_BR
        elif state == _R1_AFTER:  # between </Parallel> and its <Summary>
            if piece and piece.strip(GAP_CHARS):
                msg = f"text after {tags[P_C]} where the block's {sum_o} must come"
                return fail("missing_summary", msg, i - 1, tag)
            gaps.append(piece)
            if c != SUM_O:
                return fail("missing_summary", f"expected {sum_o} after {tags[P_C]}, found {tag}", i, tag)
            if i + 2 < n and parts[i + 2] == sum_c:
                summary = parts[i + 1]
                state = close(i + 3)
                i += 4
                continue
            state = IN_SUM
        elif state == IN_SUM:
            if c != SUM_C:
                return fail("unexpected_tag", f"expected {sum_c} inside Summary, found {tag}", i, tag)
            summary = piece
            state = close(i + 1) if placed_after else _R1_END
        else:  # _R1_END
            if piece and piece.strip(GAP_CHARS):
                msg = f"non-whitespace text before {tag} inside a block"
                return fail("text_between_tags", msg, i - 1, tag)
            gaps.append(piece)
            if c != P_C:
                return fail("unexpected_tag", f"expected {tags[P_C]} after Summary, found {tag}", i, tag)
            state = close(i + 1)
        i += 2
    return _end(parts, comp, state, top, top_k, last_k)


def _scan_parason(parts: list[str], comp: _Compiled):
    """Parason state machine; Thread bodies nest blocks up to ``max_depth``.

    One loop on purpose (a helper call per tag would cost more than the tag's whole step); the
    common cases -- a whole outline entry, a Thread without blocks -- are taken two tags at a time.
    The optional ``<Conclusion>`` (an alias) closes the block inside, or follows its ``</Parallel>``.
    """
    SEQ, PA_OPEN, OUTL, THREADS = _SEQ, _PA_OPEN, _OUTL, _THREADS
    P_O, P_C, OUT_O, OUT_C = _P_O, _P_C, _OUT_O, _OUT_C
    SUB_O, SUB_C, TRI_O, TRI_C, THR_O, THR_C = _SUB_O, _SUB_C, _TRI_O, _TRI_C, _THR_O, _THR_C
    OLN_O, OLN_C, CON_O, CON_C = _OLN_O, _OLN_C, _CON_O, _CON_C
    codes, tags, spec = comp.codes, comp.tags, comp.spec
    thr_c = tags[THR_C]
    con_c = tags.get(CON_C)
    min_b, max_b, max_depth = spec.min_branches, spec.max_branches, spec.max_depth
    con_inside, con_after, entry_tags = comp.inside, comp.after, comp.entry_tags
    mark_after, mark_inside = comp.mark_after, comp.mark_inside
    top: list = []  # top-level nodes
    nodes = top  # current node sequence (top level or Thread body)
    state = SEQ
    # the open block: inter-tag gaps, outline entries (kind, outline), finished Thread bodies
    gaps: list = []
    entries: list = []
    bodies: list = []
    stack: list = []  # (gaps, entries, bodies, nodes) of the enclosing blocks
    depth = 0
    entry = 0  # code of the open outline entry's opening tag
    conclusion = None  # the open block's inside conclusion
    pending = None  # a closed block whose after-conclusion is open
    pending_gap = ""
    closed_k = -1  # part index of the last closed top-level block's <Parallel>
    top_k = -1  # part index of the open top-level <Parallel>
    last_k = 0

    def fail(code, msg, k, tag):
        return _Failure("malformed", code, msg, k, tag, top_k, top, last_k)

    def with_conclusion(b: Block, text: str, gap: str) -> Block:
        g = (*(b.gaps or ("",) * (2 * len(b.branches) + 3)), gap)
        return Block(b.branches, text, g if any(g) else (), mark_after)

    n = len(parts)
    i = 1
    while i < n:
        tag = parts[i]
        c = codes[tag]
        piece = parts[i - 1]
        if state >= PA_OPEN:  # structural states: only whitespace may precede this tag
            if piece and piece.strip(GAP_CHARS):
                msg = f"non-whitespace text before {tag} inside a block"
                return fail("text_between_tags", msg, i - 1, tag)
            gaps.append(piece)
            if state == THREADS:
                ne = len(entries)
                nt = len(bodies)
                if c == THR_O:
                    if nt >= ne:
                        return fail("extra_thread", f"Thread {nt + 1} but only {ne} outline entries", i, tag)
                    if i + 2 < n and parts[i + 2] == thr_c:  # fast path: a Thread without blocks
                        body = parts[i + 1]
                        bodies.append((body,) if body else ())
                        i += 4
                        continue
                    nodes = []  # the Thread body; the parent sequence is restored at </Parallel>
                    state = SEQ
                elif c == P_C or (c == CON_O and con_inside):
                    if nt < ne:
                        return fail("missing_thread", f"{tag} after {nt} of {ne} Threads", i, tag)
                    if c == CON_O:  # the conclusion closes the block from inside
                        state = _IN_SUM
                        i += 2
                        continue
                    node = Block(
                        tuple([Branch(k, b, o) for (k, o), b in zip(entries, bodies)]),
                        conclusion,
                        tuple(gaps) if any(gaps) else (),
                        None if conclusion is None else mark_inside,
                    )
                    conclusion = None
                    depth -= 1
                    state = SEQ
                    if depth:
                        gaps, entries, bodies, nodes = stack.pop()
                        nodes.append(node)
                    else:
                        nodes = top
                        top.append(node)
                        closed_k = top_k
                        top_k = -1
                        last_k = i + 1
                else:
                    exp = tags[THR_O] if nt < ne else tags[P_C]
                    if nt >= ne and con_inside:
                        exp = f"{tags[CON_O]} or {exp}"
                    return fail("unexpected_tag", f"expected {exp}, found {tag}", i, tag)
            elif state == OUTL:
                ne = len(entries)
                if c == SUB_O or c == TRI_O or c == OLN_O:
                    if ne >= max_b:
                        msg = f"more than max_branches={max_b} outline entries"
                        return fail("too_many_branches", msg, i, tag)
                    if i + 2 < n and codes[parts[i + 2]] == c + 1:  # fast path: the whole entry
                        entries.append((_ENTRY_KIND[c], parts[i + 1]))
                        i += 4
                        continue
                    entry = c
                    state = _IN_ENTRY
                elif c == OUT_C:
                    if ne < min_b:
                        return fail("too_few_branches", f"{ne} outline entries, need >= {min_b}", i, tag)
                    state = THREADS
                else:
                    exp = f"{entry_tags} or {tags[OUT_C]}"
                    return fail("unexpected_tag", f"expected {exp}, found {tag}", i, tag)
            elif state == _CON_END:
                if c != P_C:
                    return fail("unexpected_tag", f"expected {tags[P_C]} after {con_c}, found {tag}", i, tag)
                gaps.pop()  # appended again when THREADS takes the same tag and closes the block
                state = THREADS
                continue
            else:  # _PA_OPEN
                if c != OUT_O:
                    return fail("unexpected_tag", f"expected {tags[OUT_O]}, found {tag}", i, tag)
                state = OUTL
        elif state == SEQ:
            if c == P_O:
                if piece:
                    nodes.append(piece)
                depth += 1
                if depth > max_depth:
                    return fail("too_deep", f"{tag} at nesting depth {depth} > max_depth {max_depth}", i, tag)
                if depth == 1:
                    top_k = last_k = i
                else:
                    stack.append((gaps, entries, bodies, nodes))
                gaps = []
                entries = []
                bodies = []
                state = PA_OPEN
            elif c == THR_C and depth:
                if piece:
                    nodes.append(piece)
                bodies.append(tuple(nodes))
                state = THREADS
            elif (c == CON_O and con_after and nodes and type(nodes[-1]) is Block and nodes[-1].summary is None
                  and not piece.strip(GAP_CHARS)):  # right after a block's </Parallel>: its conclusion
                if i + 2 < n and parts[i + 2] == con_c:  # fast path: the whole conclusion
                    nodes[-1] = with_conclusion(nodes[-1], parts[i + 1], piece)
                    if not depth:
                        last_k = i + 3
                    i += 4
                    continue
                pending, pending_gap = nodes.pop(), piece
                if not depth:
                    top_k = closed_k
                state = _IN_SUM
            else:
                where = "in a Thread" if depth else "in the main chain"
                hint = f" (a conclusion follows {tags[P_C]} directly)" if c == CON_O and con_after else ""
                return fail("unexpected_tag", f"unexpected {tag} {where}{hint}", i, tag)
        elif state == _IN_SUM:  # inside a <Conclusion>
            if c != CON_C:
                return fail("unexpected_tag", f"expected {con_c} inside Conclusion, found {tag}", i, tag)
            if pending is not None:  # after the block
                nodes.append(with_conclusion(pending, piece, pending_gap))
                pending = None
                state = SEQ
                if not depth:
                    top_k = -1
                    last_k = i + 1
            else:
                conclusion = piece
                state = _CON_END
        else:  # _IN_ENTRY
            if c != entry + 1:
                if c == SUB_C or c == TRI_C or c == OLN_C:
                    return fail("mismatched_close", f"{tag} closes {tags[entry]}", i, tag)
                return fail("unexpected_tag", f"expected {tags[entry + 1]}, found {tag}", i, tag)
            entries.append((_ENTRY_KIND[entry], piece))
            state = OUTL
        i += 2
    return _end(parts, comp, state, top, top_k, last_k)
