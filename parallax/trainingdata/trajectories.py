"""Cold-start SFT examples from a trajectories file: the builder's output, verl's SFT parquet, a JSONL.

`load_trajectories(path, spec, trace)` reads every row (`parallax.trainingdata.rows.read_rows`: JSONL, JSON or parquet)
and returns the examples an SFT stage trains on -- `prompt`, `answer`, `traces[trace]` -- and a
`LoadReport` that accounts for every row: kept, or bad with its line number and why. A bad row is
never silently dropped and never a crash:

* ``no_prompt`` / ``no_text`` / ``no_answer``: the field is missing, empty, or not text;
* ``malformed``: the trajectory does not parse in `spec` (the parser's code and message);
* ``no_final_answer``: nothing the verifier can read after the last block (`parallax.formats.answer_text`);
* ``not_writable``: a Parason ``<Conclusion>`` or an untyped ``<Outline>`` entry with
  ``outline_kind="outline"``: the executor never writes them, so a model cannot learn them from SFT;
* ``too_long``: prompt + trajectory (+ EOS) over `max_tokens` (the model's context), in tokens of
  the run's tokenizer; an RL prompt with no room left for `max_tokens` minus its response budget;
  A row whose characters alone prove it too long (more than `max_tokens` times the longest token
  string in the vocabulary) is refused before it is parsed or tokenized;
* ``duplicate_uid``: the row's `uid` (or `index`) is one an earlier row already has (that line named);
* ``unreadable``: the row itself (bad JSON, not an object).

Fields (dotted paths, `parallax.trainingdata.fields`): the prompt is `prompt_field` or the first of `PROMPT_FIELDS`; a
chat-message list is rendered with the tokenizer's chat template when it has one, else it is the
content of its last user message; a bare question (`question`, `problem`) gets Parallel-R1's
prompt (`parallax.trainingdata.prompts.build_prompt`, style ``paper``); a string prompt is the user turn. The
trajectory is `text_field` or the first of `SFT_TEXT_FIELDS` (the builder writes `trace`, verl's SFT sets
`output`); the answer `answer_field` or the first of `parallax.trainingdata.fields.ANSWER_FIELDS`
(`reward_model.ground_truth` in verl).

What is trained on is the text as the executor writes it (`formats`: ``is_written``): the summary
where ``spec.summary_placement`` puts it, typed outline entries, and no whitespace between a block's
structural tags (the executor forces those tags back to back). A row rewritten so is counted in
``normalized``; the words are the teacher's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from parallax.trainingdata.fields import ANSWER_FIELDS, TEXT_FIELDS, FieldError, find_field, text_of
from parallax.trainingdata.fields import field as get_field
from parallax.trainingdata.rows import read_rows

__all__ = ["PROMPT_FIELDS", "SFT_TEXT_FIELDS", "FileExample", "FilePrompt", "LoadReport", "load_prompts",
           "load_trajectories", "writable_tree"]

PROMPT_FIELDS = ("prompt", "question", "problem", "input")
SFT_TEXT_FIELDS = ("trace", *TEXT_FIELDS)
_QUESTION_FIELDS = ("question", "problem")


@dataclass(frozen=True)
class FileExample:
    """One SFT example from a file (the fields `layouts` SFT batches read, as a toy `Problem`'s)."""

    uid: str
    prompt: str
    answer: str
    traces: dict = field(hash=False)
    line: int = 0
    family: str = "file"
    difficulty: int = 0


@dataclass(frozen=True)
class FilePrompt:
    """One RL prompt from a file: the text the model reads and the reference answer."""

    uid: str
    prompt: str
    answer: str
    line: int = 0


@dataclass
class LoadReport:
    """Every row of a trajectories file, accounted for."""

    path: str
    rows: int = 0
    kept: int = 0
    normalized: int = 0  # kept rows rewritten to the executor's form (placement, gaps, outline kinds)
    wrong_answer: int = 0  # kept rows whose final answer is not the reference (trained on as they are)
    bad: list = field(default_factory=list)  # {"line", "code", "message"}

    def by_code(self) -> dict[str, int]:
        return dict(Counter(b["code"] for b in self.bad))

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "rows": self.rows, "kept": self.kept, "normalized": self.normalized,
                "wrong_answer": self.wrong_answer, "bad": len(self.bad), "by_code": self.by_code(),
                "bad_rows": self.bad}

    def summary(self, show: int = 5) -> str:
        head = (f"{self.path}: {self.rows} rows, {self.kept} kept, {len(self.bad)} bad {self.by_code()}, "
                f"{self.normalized} rewritten to the executor's form, {self.wrong_answer} with a wrong final answer")
        lines = [f"  line {b['line']}: {b['code']}: {b['message']}" for b in self.bad[:show]]
        more = [f"  ... and {len(self.bad) - show} more"] if len(self.bad) > show else []
        return "\n".join([head, *lines, *more])


def max_token_chars(tokenizer) -> int:
    """The most characters one token of `tokenizer` can stand for: its longest vocabulary string (a
    byte-level BPE string has one character per byte, and a byte is at most one character of text), so
    a text of more than `max_tokens * max_token_chars` characters has more than `max_tokens` tokens."""
    return max((len(t) for t in tokenizer.get_vocab()), default=1) or 1


class _Uids:
    """The explicit uids (`uid`, else `index`) seen so far: a repeat is reported with its first line."""

    def __init__(self) -> None:
        self.first: dict[str, int] = {}

    def repeat(self, obj: dict, line: int) -> str | None:
        uid = obj.get("uid", obj.get("index"))
        if uid is None:
            return None
        first = self.first.setdefault(str(uid), line)
        return None if first == line else f"uid {str(uid)!r} is line {first}'s too"


def writable_tree(tree, spec):
    """`tree` as the executor writes it in `spec`: placements cleared, gaps dropped, `<Outline>`
    entries given `spec.outline_kind`, every Parason thread opening with its header (the executor
    forces it; `parallax.formats.with_thread_headers`). ValueError for what it never writes (a `<Conclusion>`,
    an untyped entry)."""
    from parallax.formats import OUTLINE, Block, Branch, Tree, with_thread_headers

    def nodes(seq):
        return tuple(block(n) if isinstance(n, Block) else n for n in seq)

    def block(b):
        if spec.is_parason and b.summary is not None:
            raise ValueError(f"a {spec.conclusion_open} (the release's alias) is never written by the executor")
        branches = []
        for br in b.branches:
            kind = br.kind
            if kind == OUTLINE:
                if spec.outline_kind == OUTLINE:
                    raise ValueError(f"an untyped {spec.outline_open} entry "
                                     "(set outline_kind=subtask|trial to train on it)")
                kind = spec.outline_kind
            branches.append(Branch(kind, nodes(br.body) if spec.is_parason else br.body, br.outline))
        return replace(b, branches=tuple(branches), gaps=(), placement=None)

    out = Tree(nodes(tree.nodes))
    return with_thread_headers(out) if spec.is_parason else out


def _prompt(obj: dict, prompt_field: str | None, spec, tokenizer) -> str | None:
    from parallax.trainingdata.prompts import build_prompt, render_prompt

    path = prompt_field or find_field(obj, PROMPT_FIELDS)
    if path is None:
        return None
    value = get_field(obj, path)
    if path in _QUESTION_FIELDS and isinstance(value, str) and prompt_field is None:
        value = build_prompt(value, "paper", spec)  # a bare question: the paper's prompt
    if isinstance(value, list) and not all(isinstance(m, dict) and "content" in m for m in value):
        return None
    if not isinstance(value, (str, list)):
        return text_of(value)
    return render_prompt(tokenizer, value)


def load_trajectories(path: str, spec, trace: str, *, prompt_field: str | None = None,
                      text_field: str | None = None, answer_field: str | None = None,
                      tokenizer=None, max_tokens: int | None = None) -> tuple[list[FileExample], LoadReport]:
    """The SFT examples of `path` (trajectory under `traces[trace]`) and the report of every row.

    `spec`: a format name or FormatSpec. OSError (a missing file) propagates: nothing was read.
    """
    from parallax.formats import answer_text, parse, render
    from parallax.formats.spec import resolve_spec
    from rewards.extract import extract_answer
    from rewards.verify import fast_verdict

    spec = resolve_spec(spec)
    report = LoadReport(str(path))
    out: list[FileExample] = []

    def bad(line: int, code: str, message: str) -> None:
        report.bad.append({"line": line, "code": code, "message": message})

    uids = _Uids()
    char_limit = max_tokens * max_token_chars(tokenizer) if max_tokens is not None and tokenizer is not None else None
    for row in read_rows(path, keep_empty=False):
        report.rows += 1
        n = row.line
        if row.error is not None:
            bad(n, "unreadable", row.message)
            continue
        obj = row.data
        if isinstance(obj, dict) and (dup := uids.repeat(obj, n)):
            bad(n, "duplicate_uid", dup)
            continue
        try:
            prompt = _prompt(obj, prompt_field, spec, tokenizer)
            tpath = text_field or find_field(obj, SFT_TEXT_FIELDS)
            text = text_of(get_field(obj, tpath)) if tpath else None
            apath = answer_field or find_field(obj, ANSWER_FIELDS)
            answer = get_field(obj, apath) if apath else None
        except FieldError as e:
            bad(n, "no_field", str(e))
            continue
        if not prompt:
            bad(n, "no_prompt", f"no prompt (fields {PROMPT_FIELDS} or --prompt-field)")
            continue
        if not text:
            bad(n, "no_text", f"no trajectory text (fields {SFT_TEXT_FIELDS} or the text field)")
            continue
        if answer is None or str(answer).strip() == "":
            bad(n, "no_answer", f"no reference answer (fields {ANSWER_FIELDS} or the answer field)")
            continue
        if char_limit is not None and len(prompt) + len(text) > char_limit:  # before parsing and tokenizing
            chars = len(prompt) + len(text)
            bad(n, "too_long", f"{chars} characters (prompt + trajectory): at least "
                f"{-(-chars // (char_limit // max_tokens))} tokens > the model's {max_tokens}, unparsed, untokenized")
            continue
        res = parse(text, spec)
        if not res.ok:
            e = res.error
            bad(n, "malformed", f"{e.code} at char {e.char_offset}: {e.message}")
            continue
        pred = extract_answer(answer_text(text, spec, res))
        if pred is None:
            bad(n, "no_final_answer", "no final answer after the last block")
            continue
        try:
            tree = writable_tree(res.tree, spec)
        except ValueError as e:
            bad(n, "not_writable", str(e))
            continue
        written = render(tree, spec)
        if max_tokens is not None and tokenizer is not None:
            length = len(tokenizer(prompt + written, add_special_tokens=False)["input_ids"]) + 1
            if length > max_tokens:
                bad(n, "too_long", f"{length} tokens (prompt + trajectory + EOS) > the model's {max_tokens}")
                continue
        report.normalized += written != text
        report.wrong_answer += fast_verdict(pred, str(answer)) is False
        uid = str(obj.get("uid", obj.get("index", f"line{n}")))
        out.append(FileExample(uid=f"{uid}-{n}", prompt=prompt, answer=str(answer), traces={trace: written}, line=n))
        report.kept += 1
    return out, report


def load_prompts(path: str, spec, *, prompt_field: str | None = None, answer_field: str | None = None,
                 tokenizer=None, max_tokens: int | None = None) -> tuple[list[FilePrompt], LoadReport]:
    """RL prompts of `path` (verl's dataset parquet, a JSONL of questions and answers) and the report
    of every row: the prompt as `load_trajectories` reads it (a chat list through the chat template, a
    bare question with Parallel-R1's prompt), the answer from `answer_field` or `ANSWER_FIELDS`."""
    from parallax.formats.spec import resolve_spec

    spec = resolve_spec(spec)
    report = LoadReport(str(path))
    out: list[FilePrompt] = []
    uids = _Uids()
    char_limit = max_tokens * max_token_chars(tokenizer) if max_tokens is not None and tokenizer is not None else None
    for row in read_rows(path, keep_empty=False):
        report.rows += 1
        n = row.line
        if row.error is not None:
            report.bad.append({"line": n, "code": "unreadable", "message": row.message})
            continue
        obj = row.data
        if isinstance(obj, dict) and (dup := uids.repeat(obj, n)):
            report.bad.append({"line": n, "code": "duplicate_uid", "message": dup})
            continue
        try:
            prompt = _prompt(obj, prompt_field, spec, tokenizer)
            apath = answer_field or find_field(obj, ANSWER_FIELDS)
            answer = get_field(obj, apath) if apath else None
        except FieldError as e:
            report.bad.append({"line": n, "code": "no_field", "message": str(e)})
            continue
        if not prompt:
            report.bad.append({"line": n, "code": "no_prompt", "message": f"no prompt (fields {PROMPT_FIELDS})"})
            continue
        if answer is None or str(answer).strip() == "":
            report.bad.append({"line": n, "code": "no_answer",
                               "message": f"no reference answer (fields {ANSWER_FIELDS})"})
            continue
        if char_limit is not None and len(prompt) >= char_limit:  # before tokenizing
            report.bad.append({"line": n, "code": "too_long", "message": f"{len(prompt)} prompt characters: at "
                               f"least {-(-len(prompt) // (char_limit // max_tokens))} tokens leave no room in "
                               f"{max_tokens}, untokenized"})
            continue
        if max_tokens is not None and tokenizer is not None:
            length = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
            if length >= max_tokens:
                report.bad.append({"line": n, "code": "too_long",
                                   "message": f"{length} prompt tokens leave no room in {max_tokens}"})
                continue
        uid = str(obj.get("uid", obj.get("index", f"line{n}")))
        out.append(FilePrompt(uid=f"{uid}-{n}", prompt=prompt, answer=str(answer), line=n))
        report.kept += 1
    return out, report
