"""SFT examples from trajectory files: the real Parallel-GSM8K parquet, a user's JSONL with bad rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from parallax.formats import get_spec, is_written, parse
from parallax.trainingdata.trajectories import load_trajectories

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/parallel_r1/gsm8k_parallel_sft_sample.parquet"
GOOD = ("Q. <Parallel>\n<Path>6*7=42</Path>\n<Path>7*6=42</Path>\n</Parallel>\n<Summary>both 42</Summary>\n"
        "Final Answer: 42")


@pytest.mark.skipif(not SAMPLE.is_file(), reason="the shared real sample is not on this machine")
def test_the_real_parquet_trains_170_of_171_rows():
    examples, report = load_trajectories(str(SAMPLE), "parallel_r1", "parallel_r1")
    assert (report.rows, report.kept) == (171, 170)
    assert report.bad == [{"line": report.bad[0]["line"], "code": "malformed",
                           "message": report.bad[0]["message"]}] and "missing_summary" in report.bad[0]["message"]
    assert report.wrong_answer == 0  # every teacher's final answer is the reference
    ex = examples[0]
    assert ex.prompt.startswith("Solve the following problem step by step.")  # the chat list's user turn
    text = ex.traces["parallel_r1"]
    r = parse(text, "parallel_r1")
    assert r.ok and is_written(r.tree, False)  # as the executor writes it: after, no gaps
    assert "</Path><Path>" in text and "</Parallel><Summary>" in text
    assert report.normalized == 170  # every real row had newlines between the structural tags


def test_bad_rows_are_counted_by_line(tmp_path):
    rows = [
        {"prompt": "p1", "output": GOOD, "answer": "42"},  # 1 ok
        {"prompt": "p2", "output": GOOD},  # 2 no answer
        {"prompt": "p3", "output": "<Parallel><Path>a</Path></Parallel><Summary>s</Summary> Final Answer: 1",
         "answer": "1"},  # 3 one path
        {"prompt": "p4", "output": "I think so.", "answer": "3"},  # 4 no final answer
        {"output": GOOD, "answer": "42"},  # 5 no prompt
        {"prompt": "p6", "output": GOOD.replace("42", "41"), "answer": "42"},  # 6 kept, wrong answer
    ]
    path = tmp_path / "t.jsonl"
    lines = [json.dumps(r) for r in rows]
    lines.insert(3, "{not json")  # line 4 unreadable; the rows above shift
    path.write_text("\n".join(lines) + "\n")
    examples, report = load_trajectories(str(path), "parallel_r1", "parallel_r1")
    assert [e.line for e in examples] == [1, 7]
    assert [(b["line"], b["code"]) for b in report.bad] == [
        (2, "no_answer"), (3, "malformed"), (4, "unreadable"), (5, "no_final_answer"), (6, "no_prompt")]
    assert (report.rows, report.kept, report.wrong_answer) == (7, 2, 1)
    assert "line 3: malformed: too_few_branches" in report.summary()


def test_inside_placement_run_rewrites_the_public_convention(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"question": "6*7?", "trace": GOOD, "answer": "42"}) + "\n")
    spec = get_spec("parallel_r1", summary_placement="inside")
    (ex,), _ = load_trajectories(str(path), spec, "parallel_r1")
    assert ex.traces["parallel_r1"] == ("Q. <Parallel><Path>6*7=42</Path><Path>7*6=42</Path><Summary>both 42"
                                        "</Summary></Parallel>\nFinal Answer: 42")
    assert "6*7?" in ex.prompt and "<Summary>" in ex.prompt  # a bare question gets the parallel prompt


def test_release_aliases_are_not_trained_on_unless_typed(tmp_path):
    release = ("<Parallel><Outlines><Outline>1: a</Outline><Outline>2: b</Outline></Outlines>"
               "<Thread>1: a\nx</Thread><Thread>2: b\ny</Thread></Parallel> #### 3")
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt": "p", "text": release, "answer": "3"}) + "\n")
    _, report = load_trajectories(str(path), "parason", "parason")
    assert report.by_code() == {"not_writable": 1}
    (ex,), _ = load_trajectories(str(path), get_spec("parason", outline_kind="trial"), "parason")
    assert ex.traces["parason"].startswith("<Parallel><Outlines><Trial>1: a</Trial><Trial>2: b</Trial>")


def test_a_missing_file_names_itself(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_trajectories(str(tmp_path / "nope.jsonl"), "parallel_r1", "parallel_r1")


def test_rows_past_the_context_are_too_long(tmp_path, lm):
    _, tok = lm
    path = tmp_path / "t.jsonl"
    rows = [{"prompt": "p", "output": GOOD, "answer": "42"}, {"prompt": "p " * 400, "output": GOOD, "answer": "42"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    n_good = len(tok("p" + load_trajectories(str(path), "parallel_r1", "parallel_r1")[0][0].traces["parallel_r1"],
                     add_special_tokens=False)["input_ids"]) + 1
    examples, report = load_trajectories(str(path), "parallel_r1", "parallel_r1", tokenizer=tok, max_tokens=n_good)
    assert [e.line for e in examples] == [1]  # exactly at the limit fits
    assert [(b["line"], b["code"]) for b in report.bad] == [(2, "too_long")]
    assert f"> the model's {n_good}" in report.bad[0]["message"]
    _, report = load_trajectories(str(path), "parallel_r1", "parallel_r1", tokenizer=tok, max_tokens=n_good - 1)
    assert report.kept == 0 and report.by_code() == {"too_long": 2}


def test_rl_prompts_from_a_verl_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from parallax.trainingdata.trajectories import load_prompts

    rows = [{"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "What is 6*7?"}],
             "reward_model": {"ground_truth": "42"}},
            {"prompt": [{"role": "user", "content": "2+2?"}], "reward_model": {"ground_truth": ""}}]
    path = tmp_path / "rl.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    prompts, report = load_prompts(str(path), "parallel_r1")
    assert [(p.prompt, p.answer, p.line) for p in prompts] == [("What is 6*7?", "42", 1)]  # no chat template
    assert report.bad == [{"line": 2, "code": "no_answer", "message": report.bad[0]["message"]}]


@pytest.mark.skipif(not SAMPLE.is_file(), reason="the shared real sample is not on this machine")
def test_the_paper_prompt_is_the_real_datas_prompt():
    import pyarrow.parquet as pq

    from parallax.trainingdata.prompts import build_prompt

    for row in pq.read_table(SAMPLE).to_pylist():
        real = row["prompt"][0]["content"]
        assert build_prompt(real.split("Problem: ", 1)[1], "paper", "parallel_r1") == real
    inside = build_prompt("1+1?", "paper", get_spec("parallel_r1", summary_placement="inside"))
    assert "Immediately after" not in inside and "After the last path, write a concise summary" in inside


def test_parason_threads_get_the_header_the_executor_forces(tmp_path):
    from parallax.formats import thread_header

    plain = ("<Parallel><Outlines><Subtask>3*4</Subtask><Subtask>5*6</Subtask></Outlines>"
             "<Thread>12</Thread><Thread>30</Thread></Parallel> 12+30=42 #### 42")
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt": "p", "text": plain, "answer": "42"}) + "\n")
    (ex,), report = load_trajectories(str(path), "parason", "parason")
    text = ex.traces["parason"]
    assert f"<Thread>{thread_header('3*4')}12</Thread>" in text and report.normalized == 1
    from parallax.layouts.sft_records import teacher_record  # the structured SFT layout accepts it

    class Tok:  # one token per character, offsets included
        eos_token_id = 0

        def __call__(self, s, add_special_tokens=False, return_offsets_mapping=False):
            return {"input_ids": [1] * len(s), "offset_mapping": [(i, i + 1) for i in range(len(s))]}

    ids, rec = teacher_record([5], text, "parason", Tok(), mode="sequential")
    assert len(ids) == len(text) + 1 and not all(rec.sampled)  # the forced header is marked unsampled


class _Counting:
    """A tokenizer that records the length of every text it is asked to tokenize."""

    def __init__(self, tok):
        self.tok, self.texts = tok, []

    def __call__(self, text, **kw):
        self.texts.append(len(text))
        return self.tok(text, **kw)

    def get_vocab(self):
        return self.tok.get_vocab()


def test_a_huge_row_is_too_long_before_it_is_parsed_or_tokenized(tmp_path, lm):
    """A 10 MB line was tokenized in full (10,002,584 tokens, 72 s) before it was refused."""
    from parallax.trainingdata.trajectories import load_prompts, max_token_chars

    tok = _Counting(lm[1])
    huge = "7 + " * 2_500_000  # 10 MB
    rows = [{"prompt": "p", "output": GOOD, "answer": "42"}, {"prompt": huge, "output": GOOD, "answer": "42"},
            {"prompt": "p", "output": GOOD + huge, "answer": "42"}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples, report = load_trajectories(str(path), "parallel_r1", "parallel_r1", tokenizer=tok, max_tokens=1024)
    assert [e.line for e in examples] == [1] and [(b["line"], b["code"]) for b in report.bad] == [
        (2, "too_long"), (3, "too_long")]
    assert max(tok.texts) < 1000  # only the short row reached the tokenizer
    assert re.fullmatch(r"\d+ characters \(prompt \+ trajectory\): at least (\d+) tokens > the model's 1024, "
                        r"unparsed, untokenized", report.bad[0]["message"]), report.bad[0]["message"]
    assert int(report.bad[0]["message"].split()[0]) // max_token_chars(lm[1]) >= 1024
    prompts, report = load_prompts(str(path), "parallel_r1", tokenizer=tok, max_tokens=1024)
    assert [p.line for p in prompts] == [1, 3] and report.by_code() == {"too_long": 1}
    assert max(tok.texts) < 1000


def test_the_character_bound_never_refuses_a_row_that_fits(lm):
    """The bound is the vocabulary's longest token string: no text that tokenizes within the limit has
    more characters than max_tokens x that length."""
    from parallax.trainingdata.trajectories import max_token_chars

    tok = lm[1]
    longest = max(tok.get_vocab(), key=len)
    text = tok.convert_tokens_to_string([longest] * 50)
    assert len(text) <= 50 * max_token_chars(tok)


@pytest.mark.parametrize("key", ["uid", "index"])
def test_a_repeated_uid_is_reported_by_line(tmp_path, key):
    from parallax.trainingdata.trajectories import load_prompts

    rows = [{key: "a", "prompt": "p1", "output": GOOD, "answer": "42"},
            {key: "b", "prompt": "p2", "output": GOOD, "answer": "42"},
            {key: "a", "prompt": "p3", "output": GOOD, "answer": "42"},
            {"prompt": "p4", "output": GOOD, "answer": "42"}, {"prompt": "p5", "output": GOOD, "answer": "42"}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for examples, report in (load_trajectories(str(path), "parallel_r1", "parallel_r1"),
                             load_prompts(str(path), "parallel_r1")):
        assert [e.line for e in examples] == [1, 2, 4, 5]  # rows with no uid of their own are not repeats
        assert report.bad == [{"line": 3, "code": "duplicate_uid", "message": "uid 'a' is line 1's too"}]
