"""Parallel-GSM8K builder end to end: a local tiny model, and a local HTTP endpoint with canned replies."""

from __future__ import annotations

import json

import pytest
from canned_server import CannedServer

from parallax import formats
from parallax.evaluation.builder import build_parallel_gsm8k, read_records, strip_thinking
from parallax.evaluation.teachers import EngineTeacher, HTTPTeacher
from parallax.trainingdata.loaders import load_benchmark


def _trace(ans: str, kind: str) -> str:
    """Canned teacher outputs of each kind (valid/correct combinations)."""
    block = "Two ways. <Parallel><Path>way one</Path><Path>way two</Path><Summary>agree</Summary></Parallel>\n"
    return {"kept": f"{block}So \\boxed{{{ans}}}", "wrong": f"{block}So \\boxed{{{ans}1}}",
            "malformed": f"<Parallel><Path>a</Path> \\boxed{{{ans}}}", "serial": f"Just compute. \\boxed{{{ans}}}",
            "think": f"<think>hmm</think>\n{block}Thus \\boxed{{{ans}}}"}[kind]


KINDS = ["kept", "kept", "wrong", "malformed", "serial", "think"]


@pytest.fixture(scope="module")
def gsm(real_data):
    return load_benchmark("gsm8k_train", limit=6)


def _server(gsm):
    by_question = {p.question: _trace(p.answer, k) for p, k in zip(gsm, KINDS)}

    def reply(prompt: str) -> str:
        question = prompt.split("Problem: ", 1)[1].rsplit("\n\nSolution:", 1)[0]
        return by_question[question]

    return CannedServer(reply)


def test_http_teacher_build_resumes_and_counts(gsm, tmp_path):
    with _server(gsm) as srv:
        teacher = HTTPTeacher(srv.url, "canned", retries=0)
        first = build_parallel_gsm8k(teacher, tmp_path, problems=gsm[:3], shard_size=2, progress=False)
        assert (first.problems, first.format_valid, first.kept) == (3, 3, 2)
        calls = srv.requests
        stats = build_parallel_gsm8k(teacher, tmp_path, problems=gsm, shard_size=2, progress=False)
        assert srv.requests - calls == 3  # only the three new problems reached the teacher
    # valid with a block: kept, kept, wrong, think -> 4/6; correct: kept, kept, serial, think (the
    # malformed trace's answer is not after a closed block, so the accuracy reward rejects it);
    # kept = valid and correct: 3.
    assert (stats.problems, stats.samples, stats.format_valid, stats.correct, stats.kept) == (6, 6, 4, 4, 3)
    assert stats.format_valid_rate == pytest.approx(4 / 6)
    recs = read_records(tmp_path / "records.jsonl")
    assert [r["uid"] for r in recs] == [p.uid for p in gsm]
    kept = [json.loads(x) for x in (tmp_path / "parallel_gsm8k.jsonl").read_text().splitlines()]
    assert [k["uid"] for k in kept] == [gsm[0].uid, gsm[1].uid, gsm[5].uid]
    assert all(formats.text_stats(k["trace"], "parallel_r1")["num_blocks"] == 1 for k in kept)
    assert "<think>" not in kept[2]["trace"]
    assert json.loads((tmp_path / "stats.json").read_text())["format_valid_rate"] == pytest.approx(4 / 6)


def test_torn_last_line_is_redone(gsm, tmp_path):
    with _server(gsm) as srv:
        teacher = HTTPTeacher(srv.url, "canned", retries=0)
        build_parallel_gsm8k(teacher, tmp_path, problems=gsm[:2], progress=False)
        path = tmp_path / "records.jsonl"
        lines = path.read_text().splitlines()
        path.write_text(lines[0] + "\n" + lines[1][:20])  # crash mid-write of the 2nd record
        calls = srv.requests
        stats = build_parallel_gsm8k(teacher, tmp_path, problems=gsm[:2], progress=False)
        assert srv.requests - calls == 1 and stats.problems == 2 and stats.kept == 2


def test_ray_sharded_build_matches_serial(ray_cluster, gsm, tmp_path):
    # On the session's cluster (the builder attaches to a running one): a test never shuts it down.
    with _server(gsm) as srv:
        teacher = HTTPTeacher(srv.url, "canned", retries=0)
        stats = build_parallel_gsm8k(teacher, tmp_path, problems=gsm, shard_size=2, workers=2, progress=False)
    assert (stats.format_valid, stats.kept, stats.correct) == (4, 3, 4)
    assert sorted(r["uid"] for r in read_records(tmp_path / "records.jsonl")) == sorted(p.uid for p in gsm)


def test_local_tiny_model_teacher(gsm, tiny_model, tmp_path):
    teacher = EngineTeacher(tiny_model, max_new_tokens=12)
    stats = build_parallel_gsm8k(teacher, tmp_path, problems=gsm[:3], n=2, progress=False)
    recs = read_records(tmp_path / "records.jsonl")
    traces = [s["trace"] for r in recs for s in r["samples"]]
    assert stats.samples == len(traces) == 6
    # format-valid rate recomputed independently from the stored traces
    valid = sum(bool(formats.text_stats(t, "parallel_r1")["valid"]) and bool(
        formats.text_stats(t, "parallel_r1")["num_blocks"]) for t in traces)
    assert stats.format_valid == valid and 0.0 <= stats.format_valid_rate <= 1.0
    kept_lines = (tmp_path / "parallel_gsm8k.jsonl").read_text().splitlines()
    assert len(kept_lines) == stats.kept
    again = build_parallel_gsm8k(teacher, tmp_path, problems=gsm[:3], n=2, progress=False)
    assert again == stats and len((tmp_path / "records.jsonl").read_text().splitlines()) == 3


def test_strip_thinking_and_bad_endpoint():
    assert strip_thinking("<think>a</think>\n b ") == "b"
    assert strip_thinking("plain") == "plain"
    with pytest.raises(RuntimeError, match="unreachable"):
        HTTPTeacher("http://127.0.0.1:9", "m", retries=0, timeout_s=2).complete(["x"])


def test_cli_builds_from_another_benchmark_with_a_local_teacher(real_data, tiny_model, tmp_path, capsys):
    """`--benchmark dapo_math_17k --offset 1 --limit 2`: Table 1's second row, through the CLI."""
    from parallax.evaluation.cli import main

    out = tmp_path / "dapo"
    rc = main(["build-gsm8k", "--model-path", tiny_model, "--benchmark", "dapo_math_17k", "--offset", "1",
               "--limit", "2", "--max-tokens", "6", "--threads", "1", "--out", str(out)])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    dapo = load_benchmark("dapo_math_17k", limit=3)
    assert sorted(r["uid"] for r in read_records(out / "records.jsonl")) == sorted(p.uid for p in dapo[1:3])
    stats = json.loads((out / "stats.json").read_text())
    assert stats["benchmark"] == printed["benchmark"] == "dapo_math_17k" and stats["problems"] == 2
    assert stats["style"] == "parallel" and tiny_model in stats["teacher"]


def test_cli_teacher_errors_name_the_flag(tmp_path, capsys):
    from parallax.evaluation.cli import main

    assert main(["build-gsm8k", "--model-path", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--model-path" in err and "no such directory" in err
    assert main(["build-gsm8k", "--out", str(tmp_path / "o")]) == 2
    assert "give one teacher" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # refused before anything is written
