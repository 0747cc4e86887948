"""Renderer: tree -> text, the exact inverse of :func:`parallax.formats.parser.parse` on canonical trees."""

from __future__ import annotations

from parallax.formats.spec import FormatSpec, resolve_spec
from parallax.formats.tree import OUTLINE, PATH, SUBTASK, TRIAL, Block, Tree, gap_count

__all__ = ["render"]


def render(tree: Tree, spec: FormatSpec | str = "parason") -> str:
    """Render a tree back to text (exact inverse of :func:`parallax.formats.parse` on canonical trees).

    The renderer does not validate branch counts or depth (parse the result to check), but
    raises ``ValueError`` for a block whose ``gaps`` has the wrong length or a non-``str`` node.
    A summary goes where ``block.placement`` says, else where the spec writes it
    (``spec.summary_placement``); a Parason ``summary`` is written as a ``<Conclusion>``.
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
    ng = gap_count(b, parason)
    gaps = b.gaps or ("",) * ng
    if len(gaps) != ng:
        raise ValueError(f"block with {n} branches needs {ng} gaps in {spec.name}, got {len(gaps)}")
    if parason:
        summary_open, summary_close = spec.conclusion_open, spec.conclusion_close
    else:
        summary_open, summary_close = spec.summary_open, spec.summary_close
    after = (b.placement or spec.summary_placement) == "after"
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
            elif br.kind == OUTLINE:
                o, c = spec.outline_open, spec.outline_close
            else:
                raise ValueError(f"Parason branch kind must be {SUBTASK!r}, {TRIAL!r} or {OUTLINE!r}, got {br.kind!r}")
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
        last = 2 * n + 3  # the gap after the summary slot, if there is a summary
    else:
        for i, br in enumerate(b.branches):
            if br.kind != PATH:
                raise ValueError(f"Parallel-R1 branch kind must be {PATH!r}, got {br.kind!r}")
            parts.append(spec.path_open)
            _render_nodes(br.body, spec, parts)
            parts.append(spec.path_close)
            parts.append(gaps[1 + i])
        last = n + 1
    if b.summary is None and not parason:
        raise ValueError("a Parallel-R1 block needs a summary (a string, possibly empty)")
    if b.summary is None:
        parts.append(spec.parallel_close)
        return
    summary = (summary_open, b.summary, summary_close)
    if after:
        parts += (spec.parallel_close, gaps[last], *summary)
    else:
        parts += (*summary, gaps[last], spec.parallel_close)
