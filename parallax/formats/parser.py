"""Parser: text -> :class:`~parallax.formats.tree.Tree`, strict or lenient; renderer: tree -> text.

One split of the text at the format's tag strings drives an explicit state machine with a stack
(:mod:`parallax.formats.scan`; no recursion, no per-character Python loop).  The parser never raises on any
``str`` input, runs in time linear in the input length and bounds nesting depth by
``spec.max_depth`` (deeper ``<Parallel>`` is an error, not a deeper stack).  The renderer lives in
:mod:`parallax.formats.render`, unit counting in :mod:`parallax.formats.units`.

Content alphabet rule (shared with the grammars in :mod:`parallax.formats.grammar`)
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

from parallax.formats.render import render
from parallax.formats.scan import GAP_CHARS, _Compiled, _compiled, scan
from parallax.formats.spec import FormatSpec, resolve_spec
from parallax.formats.tree import Block, Tree

# _WS_TABLE, _words, part_words and _compiled stay importable from here for existing callers
from parallax.formats.units import _WS_TABLE, _encode_len, _token_starts, _words, part_words, split_tags  # noqa: F401

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


@dataclass(frozen=True, slots=True)
class ParseError:
    """What went wrong and where.

    ``code``: short machine-readable reason (``unexpected_tag``, ``mismatched_close``,
    ``text_between_tags``, ``too_few_branches``, ``too_many_branches``, ``missing_thread``,
    ``extra_thread``, ``too_deep``, ``truncated_in_branch``, ``unclosed_block``, ``not_a_string``).
    ``char_offset``: character index in the input (``len(text)`` for end-of-input problems).
    ``token_offset``: index of the token containing ``char_offset`` -- in tokens of the tokenizer
    passed to :func:`parse`, else in the default units of :mod:`parallax.formats.metrics` (whitespace
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

    A successful result also remembers the parsed text, its tag-split pieces and (from the C
    accelerator) their default-unit counts, so that :func:`parallax.formats.metrics.compute_metrics`
    given the result does not scan the text again.
    """

    status: str
    tree: Tree | None
    error: ParseError | None
    prefix_end: int
    _text: str | None = field(default=None, repr=False, compare=False)
    _parts: list | None = field(default=None, repr=False, compare=False)
    _words: list | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


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
        return ParseResult("malformed", Tree(()) if not strict else None, err, 0)
    parts, words, out = scan(text, comp)
    if type(out) is Tree:
        return ParseResult("ok", out, None, len(text), text, parts, words)
    pos = _offset(parts, out.k)
    if tokenizer is None:
        tok = sum((part_words(text, parts) if words is None else words)[: out.k])  # units before part k
    else:
        tok = _token_offset(text, pos, comp, tokenizer)
    err = ParseError(out.code, out.msg, pos, tok, out.tag)
    # the longest valid prefix ends at the open top-level <Parallel>, else at the problem
    prefix_end = _offset(parts, out.top_k) if out.top_k >= 0 else pos
    tree = None
    if not strict:
        nodes = list(out.top)
        top_last = _offset(parts, out.last_k)
        if prefix_end > top_last:
            nodes.append(text[top_last:prefix_end])
        tree = Tree(tuple(nodes))
    return ParseResult(out.status, tree, err, prefix_end)


def _offset(parts: list[str], k: int) -> int:
    """Character offset of part ``k``."""
    return sum(map(len, parts[:k]))


def _default_token_offset(text: str, pos: int, comp: _Compiled) -> int:
    """Index of the default unit containing char ``pos`` (number of units starting before it)."""
    head = text[:pos]
    parts, words = split_tags(head, comp.tag_tuple, comp.split)
    return sum(words if words is not None else part_words(head, parts))


def _token_offset(text: str, pos: int, comp: _Compiled, tokenizer) -> int:
    """Index of the ``tokenizer`` token containing char ``pos`` (default units if it fails)."""
    try:
        starts = _token_starts(tokenizer, text)
        if starts is not None:
            # the token containing pos is the last one starting at or before it
            i = bisect_left(starts, pos + 1) - 1
            return max(i, 0) if pos < len(text) else len(starts)
        return _encode_len(tokenizer, text[:pos])
    except Exception:  # noqa: BLE001 -- a tokenizer failure must not make parse() raise
        return _default_token_offset(text, pos, comp)


@lru_cache(maxsize=64)
def _tag_pairs(spec: FormatSpec) -> tuple[re.Pattern[str], dict[str, str]]:
    """One regex over every tag of `spec`, and each opening tag's closer (tags come as (open, close) pairs)."""
    tags = spec.parse_tags
    pattern = re.compile("|".join(re.escape(t) for t in sorted(tags, key=len, reverse=True)))
    return pattern, {tags[i]: tags[i + 1] for i in range(0, len(tags), 2)}


def answer_text(text: str, spec: FormatSpec | str = "parason", result: ParseResult | None = None) -> str:
    """The main-chain text after the last block of any text, well formed or not: where a final answer is read.

    Well-formed text: :func:`final_segment`. Otherwise the text after the last ``</Parallel>`` (all of
    it when there is none), keeping only what lies outside every tag pair opened there: text after an
    opener whose closer never comes (an unclosed block, path, thread or summary) is inside it and never
    counts; a stray closer is skipped. So a correct answer after a malformed block counts, one inside a
    path never does (Parallel-R1's accuracy and S1 rewards score the final answer whatever the format).

    >>> answer_text("<Parallel><Path>a</Path></Parallel> Final Answer: 4", "parallel_r1")  # one path: invalid
    ' Final Answer: 4'
    >>> answer_text("<Parallel><Path>a</Path><Path>#### 4", "parallel_r1")  # inside an unclosed path
    ''
    >>> answer_text("</Parallel><Summary>4</Summary> so 5", "parallel_r1")  # a summary is not the answer
    ' so 5'
    """
    spec = resolve_spec(spec)
    res = result if result is not None else parse(text, spec)  # `result`: the caller's parse of `text`
    if res.ok:
        return final_segment(res.tree, spec) or ""
    start = text.rfind(spec.parallel_close)
    region = text if start < 0 else text[start + len(spec.parallel_close):]
    pattern, closer = _tag_pairs(spec)
    out, stack, at = [], [], 0
    for m in pattern.finditer(region):
        if not stack:
            out.append(region[at:m.start()])
        tag = m.group(0)
        if tag in closer:
            stack.append(closer[tag])
        elif tag in stack:  # a closer: pop to its opener (skipping unclosed ones inside it)
            del stack[len(stack) - 1 - stack[::-1].index(tag):]
        at = m.end()
    if not stack:
        out.append(region[at:])
    return "".join(out)


def final_segment(tree: Tree | str, spec: FormatSpec | str = "parason") -> str | None:
    """Main-chain text after the last top-level parallel block closes (where answers live).

    ``""`` when the trajectory ends with a block; the whole text when it has no block.  Accepts
    a :class:`Tree` or a text (parsed strictly with ``spec``; ``None`` if it is invalid).
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
