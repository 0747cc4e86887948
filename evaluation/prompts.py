"""Prompt templates: the zero-shot parallel-thinking prompt (one per format) and a plain baseline.

Styles (:data:`PROMPT_STYLES`):

* ``parallel`` -- explains the parallel format of ``fmt`` (tag spellings come from the
  :mod:`formats` spec, never typed here) and asks for the final answer in ``\\boxed{}``; the
  teacher prompt of the Parallel-GSM8K builder and the evaluation prompt of parallel models;
* ``plain`` -- step-by-step reasoning, answer in ``\\boxed{}``: the GRPO baseline's prompt;
* ``raw`` -- the question unchanged (toy-world prompts ``"Q: ...\\nA:"`` are already what the
  tiny model was trained on).

``chat=True`` in :func:`build_prompt` returns a single user message list for chat endpoints;
the engine path feeds the string as it is (base models, as in both papers).
"""

from __future__ import annotations

from formats.spec import resolve_spec as get_spec  # a format name or a FormatSpec

__all__ = ["PROMPT_STYLES", "build_prompt", "system_instructions"]

PROMPT_STYLES: tuple[str, ...] = ("parallel", "plain", "raw")

_PLAIN = (
    "Solve the following math problem. Reason step by step, then give the final answer "
    "as \\boxed{{ANSWER}} on the last line.\n\nProblem: {question}\n\nSolution:"
)


def _parallel_r1_rules(fmt: str) -> str:
    s = get_spec(fmt)
    return (
        "Think step by step. When you reach a step where several independent lines of reasoning help "
        "(different methods, different cases, or a check of a result), stop the main reasoning and open a "
        f"parallel block: write {s.parallel_open}, then each line of reasoning inside its own "
        f"{s.path_open}...{s.path_close} (at least {s.min_branches}, at most {s.max_branches}; a path must "
        f"not depend on another path), then {summary_rule(s)} "
        "Then continue the main reasoning. You may open several parallel blocks, but never one inside "
        "another. Write no tags other than these."
    )


def summary_rule(s) -> str:
    """Where the prompt asks for the summary: the spec's `summary_placement` (the public Parallel-R1
    prompt's "Immediately after each </Parallel>" by default)."""
    combine = f"a concise summary of what the paths found, enclosed in {s.summary_open} and {s.summary_close}"
    if s.summary_placement == "after":
        return f"close the block with {s.parallel_close}. Immediately after each {s.parallel_close}, write {combine}."
    return f"write {combine}, and close the block with {s.parallel_close}."


def _parason_rules(fmt: str) -> str:
    s = get_spec(fmt)
    return (
        "Think step by step. When part of the work can run in parallel, open a parallel region with "
        f"{s.parallel_open}. First write an outline inside {s.outlines_open}...{s.outlines_close}: one "
        f"entry per branch, {s.subtask_open}goal{s.subtask_close} for an independent sub-problem whose "
        f"result is needed (all subtasks are combined), or {s.trial_open}hypothesis{s.trial_close} for "
        "one of several competing attempts (any successful one is enough; failed attempts are kept as "
        f"evidence). Use {s.min_branches} to {s.max_branches} entries of one kind. Then write one "
        f"{s.thread_open}...{s.thread_close} per entry, in the same order, each carrying out its entry "
        f"on its own; a thread may open a nested region. Close the region with {s.parallel_close} and "
        "continue the main reasoning using the threads' results."
    )


def system_instructions(fmt: str) -> str:
    """The format rules of the parallel prompt for ``fmt`` (``parallel_r1`` or ``parason``)."""
    spec = get_spec(fmt)
    return _parason_rules(fmt) if spec.is_parason else _parallel_r1_rules(fmt)


def build_prompt(question: str, style: str = "parallel", fmt: str = "parallel_r1",
                 chat: bool = False) -> str | list[dict[str, str]]:
    """The prompt for ``question`` in ``style`` (see module docstring) and format ``fmt``.

    >>> build_prompt("Q: 1+1\\nA:", "raw")
    'Q: 1+1\\nA:'
    >>> "<Path>" in build_prompt("What is 2+3?", "parallel", "parallel_r1")
    True
    """
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt style {style!r}; valid: {PROMPT_STYLES}")
    if style == "raw":
        text = question
    elif style == "plain":
        text = _PLAIN.format(question=question)
    else:
        text = (
            f"{system_instructions(fmt)} Finally, give the final answer as \\boxed{{ANSWER}} on the last "
            f"line, after the last parallel block.\n\nProblem: {question}\n\nSolution:"
        )
    return [{"role": "user", "content": text}] if chat else text
