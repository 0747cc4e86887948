"""Prompt templates: the zero-shot parallel-thinking prompt (one per format) and a plain baseline.

Styles (:data:`PROMPT_STYLES`):

* ``parallel`` -- explains the parallel format of ``fmt`` (tag spellings come from the
  :mod:`formats` spec, never typed here) and asks for the final answer in ``\\boxed{}``; the
  teacher prompt of the Parallel-GSM8K builder and the evaluation prompt of parallel models;
* ``paper`` -- Parallel-R1's own prompt (the instruction its Parallel-GSM8K data and rollouts use,
  tags from the spec, the summary sentence where ``summary_placement`` puts it), ending with a
  ``Final Answer:`` line; for Parason, ``parallel``;
* ``plain`` -- step-by-step reasoning, answer in ``\\boxed{}``: the GRPO baseline's prompt;
* ``raw`` -- the question unchanged (toy-world prompts ``"Q: ...\\nA:"`` are already what the
  tiny model was trained on).

``chat=True`` in :func:`build_prompt` returns a single user message list for chat endpoints;
the engine path feeds the string as it is (base models, as in both papers).

Few-shot (`data.fewshot`, :func:`fewshot_prompt`): a toy question after `k` solved toy problems, as
earlier turns of the model's chat (serial solutions: the format is not shown). An instruct model then
knows the notation and the ``#### N`` line before any training, and ends its turn after its answer.
"""

from __future__ import annotations

from parallax.formats.spec import resolve_spec as get_spec  # a format name or a FormatSpec

__all__ = ["FEWSHOT_SEED", "PROMPT_STYLES", "build_prompt", "fewshot_prompt", "render_prompt", "system_instructions",
           "toy_shots"]

PROMPT_STYLES: tuple[str, ...] = ("parallel", "paper", "plain", "raw")

# Parallel-R1's prompt (its Parallel-GSM8K `prompt` column), tag spellings from the spec.
_PAPER_R1 = (
    "Solve the following problem step by step.\n"
    "During the reasoning process, whenever you encounter a step that may benefit from multiple perspectives "
    "or independent reasoning, insert a {po} block at that point.\n\n"
    "Within each {po} block:\n\n"
    "Include at least two distinct and independent reasoning paths.\n"
    "Each path must be enclosed within {pa} and {pac} tags.\n"
    "Do not include any ordering information or cross-references between paths, as they are generated "
    "simultaneously and independently.\n"
    "{summary}\n\n"
    "Repeat this process adaptively as needed throughout the reasoning.\n"
    "Do not explicitly mention that you are triggering parallel thinking—just insert the {po} block "
    "naturally within the reasoning chain.\n\n"
    "End your response with a line starting with Final Answer: followed by the final result.\n\n"
    "Problem: {question}"
)


def _paper_r1(question: str, s) -> str:
    what = (f"a concise summary of insights or conclusions drawn from all paths, enclosed in {s.summary_open} "
            f"and {s.summary_close} tags.")
    if s.summary_placement == "after":
        summary = f"Close the block with {s.parallel_close}.\nImmediately after each {s.parallel_close}, write {what}"
    else:
        summary = f"After the last path, write {what}\nClose the block with {s.parallel_close}."
    return _PAPER_R1.format(po=s.parallel_open, pa=s.path_open, pac=s.path_close, summary=summary, question=question)


def render_prompt(tokenizer, prompt) -> str:
    """The text a model reads for `prompt` (a string, or chat messages): through the tokenizer's chat
    template as a user turn when it has one (instruct models: SmolLM2, Qwen3), else the text itself
    (the tiny model, base models fed raw as in both papers)."""
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if isinstance(prompt, str):
        return prompt
    users = [m for m in messages if m.get("role") == "user"]
    return str((users or messages)[-1].get("content", ""))

#: the toy world's draw that few-shot examples come from (`parallax.toyworld.iter_problems`; no split draws it)
FEWSHOT_SEED = 90_001


def toy_shots(question: str, k: int, family: str = "mixed", difficulty=1) -> list[tuple[str, str]]:
    """The `k` solved problems shown before toy `question`: (prompt, serial solution) of the first
    problems of the `FEWSHOT_SEED` draw that are not `question` itself, so that a held-out problem
    never sees its own answer. The same for a question wherever it is asked (training, the
    held-out evaluation, `python -m parallax.evaluation checkpoint`)."""
    from parallax import toyworld

    draw = toyworld.iter_problems(family, 2 * k + 2, FEWSHOT_SEED, toyworld.as_difficulty(difficulty))
    out = [(p.prompt, p.traces["serial"]) for p in draw]
    return [shot for shot in out if shot[0] != question][:k]


def fewshot_prompt(tokenizer, question: str, shots: list[tuple[str, str]]) -> str:
    """`question` after `shots` as earlier user / assistant turns, through the tokenizer's chat template.
    ValueError for a tokenizer without one: raw text would run on past its answer into a next question."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("data.fewshot needs a model with a chat template (the examples are earlier turns "
                         "of the chat); this tokenizer has none")
    messages = [m for q, a in shots for m in ({"role": "user", "content": q}, {"role": "assistant", "content": a})]
    return render_prompt(tokenizer, [*messages, {"role": "user", "content": question}])


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
    elif style == "paper" and not get_spec(fmt).is_parason:
        text = _paper_r1(question, get_spec(fmt))
    else:
        text = (
            f"{system_instructions(fmt)} Finally, give the final answer as \\boxed{{ANSWER}} on the last "
            f"line, after the last parallel block.\n\nProblem: {question}\n\nSolution:"
        )
    return [{"role": "user", "content": text}] if chat else text
