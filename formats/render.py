"""Renderer: tree -> text, the exact inverse of :func:`formats.parser.parse` on canonical trees."""

from __future__ import annotations

from formats.spec import FormatSpec, resolve_spec
from formats.tree import PATH, SUBTASK, TRIAL, Block, Tree

__all__ = ["render"]


def render(tree: Tree, spec: FormatSpec | str = "parason") -> str:
    """Render a tree back to text (exact inverse of :func:`formats.parse` on canonical trees).

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
