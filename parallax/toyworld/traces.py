"""Programmatic teachers: render one :class:`Solution` as a serial, a Parallel-R1 and a
Parason trace.

The parallel traces are built as ``formats`` trees and rendered by ``parallax.formats.render`` (the
format module is the contract; nothing here spells a tag).  Examples for ``3*4+5*6``::

    serial      3*4=12 5*6=30 12+30=42 #### 42
    parallel_r1 <Parallel><Path>3*4=12</Path><Path>5*6=30</Path></Parallel><Summary>12+30=42</Summary> #### 42
    parason     <Parallel><Outlines><Subtask>3*4</Subtask><Subtask>5*6</Subtask></Outlines>
                <Thread>3*4\n3*4=12</Thread><Thread>5*6\n5*6=30</Thread></Parallel>12+30=42 #### 42

(the Parason trace is one line but for the ``\n`` ending each thread header).  Trial solutions use
``<Trial>`` outline entries; every branch's work stays in the trace (OR-merge keeps all branches),
the merge states the winner.

Thread headers: every Parason ``<Thread>`` opens with its outline entry and a newline
(``parallax.executors.tracker.thread_header``), the text the parallel executor force-writes there so
that each executed thread knows which entry it serves. Teacher traces carry it so SFT teaches
threads to continue from it (and ``parallax.layouts.structured`` marks it forced, out of the loss).
"""

from __future__ import annotations

from parallax.formats import (
    PARALLEL_R1,
    PARASON,
    PATH,
    SUBTASK,
    TRIAL,
    Block,
    FormatSpec,
    Tree,
    render,
    thread_header,
)
from parallax.formats import Branch as FormatBranch
from parallax.toyworld.problem import Solution

__all__ = [
    "SHAPES",
    "final_line",
    "parallel_r1_tree",
    "parason_tree",
    "render_all",
    "render_parallel_r1",
    "render_parason",
    "render_serial",
]

_PARASON_KIND = {"subtask": SUBTASK, "trial": TRIAL, "mul": SUBTASK, "search": TRIAL}

#: Where a parallel trace forks (``render_all(shape=...)``): ``fork`` at its first token (every
#: branch solves a part); ``midfork`` after solving the first part serially (the block solves the
#: rest and re-checks the first: a block holds at least two branches); ``verify`` after the whole
#: serial solution (the block re-checks every part, the summary restates the merge).  With them
#: the first-``<Parallel>`` position has somewhere to move (Parallel-R1 Figure 3).
SHAPES: tuple[str, ...] = ("fork", "midfork", "verify")


def _shaped(sol: Solution, shape: str) -> tuple[str, tuple]:
    """The serial text written before the block (``""`` or ending in a space) and the block's parts.

    >>> from parallax.toyworld.problem import Part
    >>> s = Solution("subtask", (Part("3*4", "3*4=12"), Part("5*6", "5*6=30")), "12+30=42", 42)
    >>> _shaped(s, "midfork")[0], [p.outline for p in _shaped(s, "midfork")[1]]
    ('3*4=12 ', ['5*6', '3*4'])
    >>> _shaped(s, "verify")[0]
    '3*4=12 5*6=30 12+30=42 '
    """
    if shape == "fork":
        return "", sol.parts
    if shape == "midfork":
        return sol.parts[0].work + " ", sol.parts[1:] + sol.parts[:1]
    if shape == "verify":
        return render_serial(sol, answer_line=False) + " ", sol.parts
    raise ValueError(f"unknown teacher shape {shape!r}; valid: {', '.join(SHAPES)}")


def final_line(answer: int) -> str:
    """The GSM8K-style answer suffix every trace ends with.

    >>> final_line(42)
    ' #### 42'
    """
    return f" #### {answer}"


def _check_text(sol: Solution) -> None:
    # Branch text is free text inside tags; a '<' could forge or break a tag.
    for text in [sol.merge] + [t for p in sol.parts for t in (p.outline, p.work)]:
        if "<" in text or not text:
            raise ValueError(f"solution text must be non-empty and contain no '<': {text!r}")
    if sol.kind not in _PARASON_KIND:
        raise ValueError(f"unknown solution kind {sol.kind!r}; valid: {', '.join(_PARASON_KIND)}")


def render_serial(sol: Solution, answer_line: bool = True) -> str:
    """Same steps as the parallel traces, one after another, no tags.

    >>> from parallax.toyworld.problem import Part
    >>> s = Solution("subtask", (Part("3*4", "3*4=12"), Part("5*6", "5*6=30")), "12+30=42", 42)
    >>> render_serial(s)
    '3*4=12 5*6=30 12+30=42 #### 42'
    """
    _check_text(sol)
    parts = sol.parts[:sol.serial_parts] if sol.serial_parts else sol.parts
    return " ".join([p.work for p in parts] + [sol.merge]) + (final_line(sol.answer) if answer_line else "")


def _lead(prefix: str) -> tuple[str, ...]:
    return (prefix,) if prefix else ()


def parallel_r1_tree(sol: Solution, answer_line: bool = True, shape: str = "fork") -> Tree:
    """One block: a Path per part, the merge as its Summary, then the answer line; ``shape``
    says what serial work comes before the block (:data:`SHAPES`)."""
    _check_text(sol)
    prefix, parts = _shaped(sol, shape)
    paths = tuple(FormatBranch(PATH, (p.work,)) for p in parts)
    tail = (final_line(sol.answer),) if answer_line else ()
    return Tree((*_lead(prefix), Block(paths, summary=sol.merge), *tail))


def parason_tree(sol: Solution, answer_line: bool = True, shape: str = "fork") -> Tree:
    """One block: a Subtask (AND) or Trial (OR) entry and a Thread per part, each thread opening
    with its entry's header; the merge then continues the main chain after the block.  ``shape``
    as :func:`parallel_r1_tree`."""
    _check_text(sol)
    prefix, parts = _shaped(sol, shape)
    kind = _PARASON_KIND[sol.kind]
    threads = tuple(FormatBranch(kind, (thread_header(p.outline) + p.work,), outline=p.outline)
                    for p in parts)
    return Tree((*_lead(prefix), Block(threads), sol.merge + (final_line(sol.answer) if answer_line else "")))


def render_parallel_r1(sol: Solution, spec: FormatSpec = PARALLEL_R1, answer_line: bool = True,
                       shape: str = "fork") -> str:
    """Parallel-R1 trace text.

    >>> from parallax.toyworld.problem import Part
    >>> s = Solution("trial", (Part("x=2", "2*7=14 14%10=4 no"), Part("x=3", "3*7=21 21%10=1 yes")), "x=3", 3)
    >>> render_parallel_r1(s)
    '<Parallel><Path>2*7=14 14%10=4 no</Path><Path>3*7=21 21%10=1 yes</Path></Parallel><Summary>x=3</Summary> #### 3'
    """
    return render(parallel_r1_tree(sol, answer_line, shape), spec)


def render_parason(sol: Solution, spec: FormatSpec = PARASON, answer_line: bool = True, shape: str = "fork") -> str:
    """Parason trace text.

    >>> from parallax.toyworld.problem import Part
    >>> s = Solution("subtask", (Part("3*4", "3*4=12"), Part("5*6", "5*6=30")), "12+30=42", 42)
    >>> render_parason(s)[:64]
    '<Parallel><Outlines><Subtask>3*4</Subtask><Subtask>5*6</Subtask>'
    """
    return render(parason_tree(sol, answer_line, shape), spec)


def render_all(sol: Solution, answer_line: bool = True, r1_spec: FormatSpec = PARALLEL_R1,
               shape: str = "fork") -> dict[str, str]:
    """All three traces, keyed as :data:`parallax.toyworld.problem.TRACE_KINDS`; without the final
    ``#### answer`` line when ``answer_line`` is False (a teacher that forgot it).  The
    Parallel-R1 trace puts its summary where ``r1_spec`` writes it; the parallel traces fork
    where ``shape`` says (:data:`SHAPES`).

    >>> from parallax.toyworld.problem import Part
    >>> s = Solution("subtask", (Part("3*4", "3*4=12"), Part("5*6", "5*6=30")), "12+30=42", 42)
    >>> render_all(s, shape="verify")["parallel_r1"]
    '3*4=12 5*6=30 12+30=42 <Parallel><Path>3*4=12</Path><Path>5*6=30</Path></Parallel>\
<Summary>12+30=42</Summary> #### 42'
    """
    return {
        "serial": render_serial(sol, answer_line),
        "parallel_r1": render_parallel_r1(sol, r1_spec, answer_line=answer_line, shape=shape),
        "parason": render_parason(sol, answer_line=answer_line, shape=shape),
    }
