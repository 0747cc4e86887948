"""Rows of the ecosystem's data files, and the fields inside them, for every CLI and loader.

Files: JSONL (one object per line), JSON (a list of objects, or ``{"data": [...]}``) and parquet
(verl's dataset files; read with pyarrow). Each row comes back with its 1-based line (JSONL) or
row number, and a row that cannot be read is a `Row` with `error` set, never skipped: the caller
reports it with its number.

Fields are dotted paths (`reward_model.ground_truth`, `prompt.0.content`; a number indexes a list).
A chat-message list (`[{"role": ..., "content": ...}, ...]`, as verl's `prompt` column) is read as
the content of its last message: the user turn of a prompt, the assistant turn of a conversation.

Known shapes, found without flags (`TEXT_FIELDS`, `ANSWER_FIELDS`): a plain `{"text", "answer"}`
row; verl's dataset schema (`prompt` chat, `reward_model.ground_truth`, `output` in SFT sets); verl's
rollout dump (`rollout_data_dir`: `input`, `output`, `gts`, `score`, `step`).

It imports no package of the project, and pyarrow only to read a parquet file: it is the bottom layer.

    >>> row = {"prompt": [{"role": "user", "content": "1+1?"}], "reward_model": {"ground_truth": "2"}}
    >>> text_of(field(row, "prompt")), field(row, "reward_model.ground_truth")
    ('1+1?', '2')
"""

from datafiles.fields import ANSWER_FIELDS, TEXT_FIELDS, FieldError, field, find_field, text_of
from datafiles.rows import Row, parse_line, read_rows

__all__ = ["ANSWER_FIELDS", "TEXT_FIELDS", "FieldError", "Row", "field", "find_field", "parse_line", "read_rows",
           "text_of"]
