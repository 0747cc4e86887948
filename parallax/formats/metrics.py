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
  ``<Outlines>`` tags, Summary or Conclusion wherever it sits, gaps) are ``main_tokens``.
  Untyped ``<Outline>`` branches (the release's alias) are ``outline_tokens``, or count as
  subtask / trial tokens when ``FormatSpec.outline_kind`` says so.  ``X_share = X_tokens / total``
  (0.0 for an empty text), and the five shares add up to 1.

Differences from the public code (the Parason release's reward manager, ThreadWeaver's parser),
kept on purpose:

* **wrapper tags of the branches off the critical path do not count**: a ``<Thread>``/``</Thread>``
  (``<Path>``/``</Path>``) pair is part of its branch, which runs concurrently; the public code counts
  every wrapper tag as sequential, so each extra branch adds 2 to its T;
* **nesting is recursive**: a nested block inside a thread is reduced to its own critical path before
  its thread is compared with its siblings; the public code flattens one level.

Worked example (default units)::

    First. <Parallel><Outlines><Subtask>3*4</Subtask><Subtask>5*6</Subtask></Outlines>
    <Thread>3*4=12</Thread><Thread>5*6=30</Thread></Parallel> 12+30=42 #### 42

total = 1 + 1 + 1 + 3 + 3 + 1 + 3 + 3 + 1 + 3 = 20; T = 20 - (3 + 3) + 3 = 17;
speedup = 20/17; eta = 3/20; first_parallel_token = 1, first_parallel_pos = 0.05;
subtask_share = (3 + 3 + 3 + 3)/20 = 0.6.
"""

from __future__ import annotations

from dataclasses import dataclass

from parallax.formats.parser import ParseResult, _default_token_offset, parse
from parallax.formats.render import render
from parallax.formats.scan import _compiled
from parallax.formats.spec import FormatSpec, resolve_spec
from parallax.formats.tree import Tree
from parallax.formats.units import (
    _default_count,
    _encode_counter,
    _encode_len,
    _offset_counter,
    _token_starts,
    part_words,
)
from parallax.formats.walk import _walk_parts, _Walker

__all__ = ["METRIC_FIELDS", "Metrics", "compute_metrics", "text_stats"]
# also importable from here, for existing callers: _token_starts, _encode_len


@dataclass(slots=True)
class Metrics:
    """Tree metrics; see the module docstring for exact definitions."""

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
    outline_tokens: int = 0
    outline_share: float = 0.0

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in METRIC_FIELDS}


METRIC_FIELDS = tuple(Metrics.__dataclass_fields__)


def compute_metrics(
    tree: Tree | ParseResult,
    spec: FormatSpec | str = "parason",
    tokenizer=None,
    *,
    text: str | None = None,
    _generic: bool = False,
) -> Metrics:
    """Metrics of a valid tree, or of a successful :class:`ParseResult` (fastest: the unit counts
    of the parser's pieces are reused).

    ``text`` must be the tree's exact rendering when given (as after ``parse(text)``); it saves a
    render.  Without a tokenizer a tree is measured through its rendering: it is parsed again and
    the parser's tree is walked (a tree the spec's parser rejects, e.g. one over the branch or
    depth limits, is walked as is).  ``_generic=True`` selects the reference walker (tests).
    """
    spec = resolve_spec(spec)
    res = None
    if isinstance(tree, ParseResult):
        if not tree.ok:
            raise ValueError(f"cannot compute metrics of a failed parse ({tree.status})")
        res = tree
        tree = res.tree
        if text is None:
            text = res._text
    if tokenizer is not None:
        if text is None:
            text = render(tree, spec)
        starts = _token_starts(tokenizer, text)
        count = _offset_counter(starts) if starts is not None else _encode_counter(tokenizer)
        return _metrics(*_Walker(spec, count).run(tree.nodes))
    if not _generic:
        if res is None or res._parts is None:
            res = parse(render(tree, spec) if text is None else text, spec)
        if res.ok:
            wc = res._words
            if wc is None:  # pure-Python path: count the pieces now
                wc = part_words(res._text, res._parts)
            return _metrics(*_walk_parts(res.tree.nodes, wc, spec))
    return _metrics(*_Walker(spec, _default_count).run(tree.nodes))  # reference, or a tree the parser rejects


def _metrics(total, crit, blocks, branches, depth, first, sub, trial, path, outline) -> Metrics:
    t = total or 1  # empty text: every ratio is 0 (speedup 1)
    return Metrics(
        total_tokens=total,
        critical_path_tokens=crit,
        speedup=total / crit if crit else 1.0,
        eta=(total - crit) / t,
        has_parallel=blocks > 0,
        num_blocks=blocks,
        num_branches=branches,
        depth=depth,
        first_parallel_token=first,
        first_parallel_pos=None if first is None else first / t,
        main_tokens=total - sub - trial - path - outline,
        subtask_tokens=sub,
        trial_tokens=trial,
        path_tokens=path,
        subtask_share=sub / t,
        trial_share=trial / t,
        path_share=path / t,
        outline_tokens=outline,
        outline_share=outline / t,
    )


def text_stats(text, spec: FormatSpec | str = "parason", tokenizer=None) -> dict:
    """Parse + metrics of one text as a flat JSON-able dict; never raises on bad input.

    Keys: every :class:`Metrics` field, ``valid`` (bool), ``status`` and ``error`` (``None`` or
    :meth:`ParseError.to_dict`).  For an invalid text only ``total_tokens`` and ``has_parallel``
    (whether the ``<Parallel>`` tag occurs) are filled; the other metric fields are ``None``.
    """
    spec = resolve_spec(spec)
    return parsed_stats(parse(text, spec, tokenizer=tokenizer), text, spec, tokenizer)


def parsed_stats(res: ParseResult, text, spec: FormatSpec | str = "parason", tokenizer=None) -> dict:
    """`text_stats` of a text already parsed into `res` (strict or lenient: the two agree on the status, and
    on the tree of a valid text), so a reader that parsed it for its own needs does not parse it again."""
    spec = resolve_spec(spec)
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
