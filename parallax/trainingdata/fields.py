"""Dotted field paths into rows, chat-message lists read as text, and the fields known shapes use.

Fields are dotted paths (`reward_model.ground_truth`, `prompt.0.content`; a number indexes a list).
A chat-message list (`[{"role": ..., "content": ...}, ...]`, as verl's `prompt` column) is read as
the content of its last message: the user turn of a prompt, the assistant turn of a conversation.

Known shapes, found without flags (`TEXT_FIELDS`, `ANSWER_FIELDS`): a plain `{"text", "answer"}`
row; verl's dataset schema (`prompt` chat, `reward_model.ground_truth`, `output` in SFT sets); verl's
rollout dump (`rollout_data_dir`: `input`, `output`, `gts`, `score`, `step`).

    >>> row = {"prompt": [{"role": "user", "content": "1+1?"}], "reward_model": {"ground_truth": "2"}}
    >>> text_of(field(row, "prompt")), field(row, "reward_model.ground_truth")
    ('1+1?', '2')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Where a row's trajectory text is, in order: plain rows, verl's SFT sets and rollout dumps.
TEXT_FIELDS = ("text", "output", "response", "completion")
#: Where a row's reference answer is: plain rows, verl's dataset schema, verl's rollout dump.
ANSWER_FIELDS = ("answer", "ground_truth", "reward_model.ground_truth", "gts", "gold")

_MISSING = object()


class FieldError(KeyError):
    """A field path that a row does not have; the message names the path and the row's fields."""

    def __str__(self) -> str:
        return str(self.args[0])


def _get(row: Any, path: str) -> Any:
    node = row
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, (list, tuple)) and part.lstrip("-").isdigit() and -len(node) <= int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def field(row: dict, path: str) -> Any:
    """The value at dotted `path` (`reward_model.ground_truth`, `prompt.0.content`); `FieldError` if absent.

    A key that itself contains dots (`{"a.b": 1}`) is found whole before the path is split.
    """
    if isinstance(row, dict) and path in row:
        return row[path]
    value = _get(row, path)
    if value is _MISSING:
        fields = sorted(row) if isinstance(row, dict) else type(row).__name__
        raise FieldError(f"no field {path!r} (fields: {fields})")
    return value


def find_field(row: dict, paths: Sequence[str]) -> str | None:
    """The first of `paths` the row has with a non-null value, or None."""
    for p in paths:
        value = row.get(p, _MISSING) if isinstance(row, dict) else _MISSING
        if value is _MISSING:
            value = _get(row, p)
        if value is not _MISSING and value is not None:
            return p
    return None


def text_of(value: Any) -> str | None:
    """`value` as text: a string as it is; a chat message its `content`; a chat-message list the content
    of its last message; anything else None (the caller reports the row).

    >>> text_of([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}])
    'q'
    """
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    if isinstance(value, (list, tuple)) and value and all(isinstance(m, dict) and "content" in m for m in value):
        last = value[-1]["content"]
        return last if isinstance(last, str) else None
    return None
