"""Rows and fields of the ecosystem's files: JSONL, JSON, parquet (verl's schema), rollout dumps."""

from __future__ import annotations

import json

import pytest

from parallax.trainingdata.fields import FieldError, field, find_field, text_of
from parallax.trainingdata.rows import read_rows


def test_dotted_paths_index_dicts_and_lists():
    row = {"reward_model": {"ground_truth": "196"}, "prompt": [{"role": "user", "content": "q"}], "a.b": 1}
    assert field(row, "reward_model.ground_truth") == "196"
    assert field(row, "prompt.0.content") == field(row, "prompt.-1.content") == "q"
    assert field(row, "a.b") == 1  # a key with a dot is found whole
    with pytest.raises(FieldError, match=r"no field 'reward_model\.score'.*fields: \['a\.b', 'prompt'"):
        field(row, "reward_model.score")
    with pytest.raises(FieldError):
        field(row, "prompt.3.content")
    assert find_field(row, ("text", "nope.x", "reward_model.ground_truth")) == "reward_model.ground_truth"
    assert find_field({"text": None, "output": "o"}, ("text", "output")) == "output"  # null is absent


def test_chat_lists_read_as_their_last_message():
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    assert text_of(chat) == "2+2?"
    assert text_of(chat + [{"role": "assistant", "content": "4"}]) == "4"
    assert text_of({"role": "user", "content": "x"}) == "x"
    assert text_of("plain") == "plain"
    assert text_of([1, 2]) is None and text_of(3) is None and text_of([]) is None


def test_jsonl_rows_keep_their_line_numbers_and_errors(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"text": "a"}\n\nnot json\n[1]\n\xff\n{"text": "b"}\n')
    rows = list(read_rows(p))
    assert [(r.line, r.error) for r in rows] == [(1, None), (3, "bad_json"), (4, "not_object"), (5, "bad_utf8"),
                                                 (6, None)]
    assert [r.data["text"] for r in rows if r.data] == ["a", "b"]
    assert [r.line for r in read_rows(p, keep_empty=True)] == [1, 2, 3, 4, 5, 6]
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        list(read_rows(tmp_path / "nope.jsonl"))


def test_json_lists_and_data_objects(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps([{"text": "a"}, 5]))
    (tmp_path / "b.json").write_text(json.dumps({"data": [{"text": "b"}]}))
    assert [(r.line, r.error) for r in read_rows(tmp_path / "a.json")] == [(1, None), (2, "not_object")]
    assert [r.data for r in read_rows(tmp_path / "b.json")] == [{"text": "b"}]


def test_the_real_verl_parquet_reads_as_plain_rows(sft_sample):
    rows = list(read_rows(sft_sample))
    assert len(rows) == 171 and all(r.error is None for r in rows)
    first = rows[0].data
    assert isinstance(first["prompt"], list) and first["prompt"][-1]["role"] == "user"
    assert "Summary" in text_of(field(first, "prompt"))  # the paper's instruction text
    assert field(first, "reward_model.ground_truth") == "196"
    assert find_field(first, ("text", "output")) == "output" and "</Parallel>" in first["output"]


def test_a_json_document_that_cannot_be_read_is_named(tmp_path):
    """A .json file is one document: too deep, not UTF-8 or not JSON is an error naming the file
    (a JSONL file gets one bad row per line instead)."""
    from parallax.trainingdata.rows import read_rows

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=f"{deep}: not readable JSON \\(nested too deeply\\)"):
        list(read_rows(deep))
    raw = tmp_path / "latin1.json"
    raw.write_bytes(b'[{"text": "caf\xe9"}]')
    with pytest.raises(ValueError, match=f"{raw}: not UTF-8 at byte 14"):
        list(read_rows(raw))
    cut = tmp_path / "cut.json"
    cut.write_text('[{"text": "a"')
    with pytest.raises(ValueError, match=f"{cut}: not valid JSON"):
        list(read_rows(cut))


def test_the_fields_example_runs():
    import doctest

    from parallax.trainingdata import fields

    result = doctest.testmod(fields)
    assert result.attempted >= 2 and result.failed == 0
