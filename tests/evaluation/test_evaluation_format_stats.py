"""``python -m parallax.evaluation stats``: one JSON object per input line, bad lines reported, never a crash."""

import io
import json
import subprocess
import sys

from parallax.evaluation.cli import main
from parallax.evaluation.format_stats import stats_command

GOOD_P = (
    "First. <Parallel><Outlines><Subtask>3*4</Subtask><Subtask>5*6</Subtask></Outlines>"
    "<Thread>3*4=12</Thread><Thread>5*6=30</Thread></Parallel> 12+30=42 #### 42"
)
GOOD_R1 = "a <Parallel><Path>x</Path><Path>y z</Path><Summary>s</Summary></Parallel> #### 3"


def _write(tmp_path, lines):
    p = tmp_path / "in.jsonl"
    p.write_bytes(b"\n".join(x if isinstance(x, bytes) else x.encode() for x in lines) + b"\n")
    return str(p)


def _run(path, fmt, tok=None):
    buf = io.StringIO()
    assert stats_command(path, fmt, tok, out=buf) == 0
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_stats_lines(tmp_path):
    path = _write(
        tmp_path,
        [
            json.dumps({"text": GOOD_P, "id": "a1"}),
            "not json",
            json.dumps({"x": 1}),
            "",
            "[1, 2]",
            json.dumps({"text": 5}),
            json.dumps({"text": GOOD_P[:60]}),
            b"\xff\xfe bad utf8",
            json.dumps({"text": "\ud800 lone surrogate <Parallel>"}),
            json.dumps({"text": ""}),
        ],
    )
    rows = _run(path, "parason")
    assert [r["line"] for r in rows] == list(range(1, 11))
    r = rows[0]
    assert r["id"] == "a1" and r["valid"] is True and r["error"] is None
    assert (r["total_tokens"], r["critical_path_tokens"], r["first_parallel_token"]) == (20, 17, 1)
    assert r["subtask_share"] == 0.6 and r["speedup"] == 20 / 17
    for i, code in (
        (1, "bad_json"),
        (2, "no_text"),
        (3, "empty_line"),
        (4, "no_text"),
        (5, "no_text"),
        (7, "bad_utf8"),
    ):
        assert (
            rows[i]["valid"] is False and rows[i]["status"] == "bad_line" and rows[i]["error"]["code"] == code
        )
    assert rows[6]["status"] == "truncated_in_branch" and rows[6]["error"]["char_offset"] == 60
    assert rows[8]["status"] == "unclosed_block"
    assert rows[9]["valid"] is True and rows[9]["total_tokens"] == 0
    keys = set(rows[0])
    assert all(set(r) - {"id"} == keys - {"id"} for r in rows)


def test_stats_r1_and_tokenizer(tmp_path, tiny_model_path):
    from transformers import AutoTokenizer

    path = _write(tmp_path, [json.dumps({"text": GOOD_R1})])
    (r,) = _run(path, "parallel_r1")
    assert (r["total_tokens"], r["critical_path_tokens"], r["path_tokens"]) == (15, 12, 7)
    (r,) = _run(path, "parallel_r1", tiny_model_path)  # the toy world's tokenizer: a tag is one token
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    assert r["valid"] and r["total_tokens"] == len(tok.encode(GOOD_R1, add_special_tokens=False)) != 15


def test_module_entry_point(tmp_path):
    path = _write(tmp_path, [json.dumps({"text": GOOD_R1}), "{"])
    out = subprocess.run(
        [sys.executable, "-m", "parallax.evaluation", "stats", path, "--format", "parallel_r1"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = [json.loads(x) for x in out.stdout.splitlines()]
    assert len(rows) == 2 and rows[0]["valid"] and rows[1]["error"]["code"] == "bad_json"


def test_missing_file_and_bad_args(tmp_path, capsys):
    assert main(["stats", str(tmp_path / "nope.jsonl"), "--format", "parason"]) == 2
    assert (
        main(
            [
                "stats",
                str(tmp_path / "nope.jsonl"),
                "--format",
                "parason",
                "--tokenizer",
                str(tmp_path / "no"),
            ]
        )
        == 2
    )
    import pytest

    with pytest.raises(SystemExit):
        main(["stats", "x.jsonl", "--format", "other"])
