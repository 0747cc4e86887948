"""The CLIs read the ecosystem's files as they are: verl's dataset parquet, verl's rollout dump, dotted fields."""

from __future__ import annotations

import io
import json

import pytest

PAR = "<Parallel><Path>2+2=4</Path><Path>4</Path><Summary>both give 4</Summary></Parallel>"


def _verl_parquet(path, rows):
    """A parquet file in verl's dataset schema (prompt chat list, reward_model struct, output)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def _row(i, output, gold):
    return {"data_source": "gsm8k", "prompt": [{"role": "user", "content": f"Q{i}"}], "ability": "math",
            "reward_model": {"ground_truth": gold, "style": "rule"}, "extra_info": {"index": i}, "output": output}


def test_rewards_score_reads_a_verl_parquet_without_flags(tmp_path):
    from parallax.evaluation.cli import main

    p = tmp_path / "train.parquet"
    _verl_parquet(p, [_row(0, f"{PAR} #### 4", "4"), _row(1, f"{PAR} #### 5", "4"), _row(2, "Answer: 7", "7")])
    out = io.StringIO()
    assert main(["score", str(p), "--reward", "accuracy"], out=out) == 0
    res = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [(r["line"], r["correct"], r["pred"]) for r in res] == [(1, True, "4"), (2, False, "5"), (3, True, "7")]


def test_rewards_score_groups_a_verl_rollout_dump_by_prompt(tmp_path):
    """verl's rollout_data_dir dump: input, output, gts, score, step; the n samples of a prompt are a group."""
    from parallax.evaluation.cli import main

    dump = tmp_path / "3.jsonl"
    rows = [{"input": "Q: 2+2", "output": f"{PAR} #### 4", "gts": "4", "score": 1.0, "step": 3},
            {"input": "Q: 2+2", "output": "#### 4", "gts": "4", "score": 1.0, "step": 3},
            {"input": "Q: 3+3", "output": f"{PAR} #### 6", "gts": "6", "score": 1.0, "step": 3},
            {"input": "Q: 3+3", "output": "#### 5", "gts": "6", "score": 0.0, "step": 3}]
    dump.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = io.StringIO()
    assert main(["score", str(dump), "--reward", "parallel_acc"], out=out) == 0
    res = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [r["group"] for r in res] == ["Q: 2+2", "Q: 2+2", "Q: 3+3", "Q: 3+3"]
    assert [r["correct"] for r in res] == [True, True, True, False]
    assert [r["reward"] for r in res] == [1.0, 0.0, 1.0, 0.0]  # R_parallel x R_acc: the serial answer scores 0


def test_dotted_field_flags_and_clear_errors(tmp_path, capsys):
    from parallax.evaluation.cli import main

    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps({"resp": {"final": "#### 3"}, "meta": {"gold": 3}}) + "\n" + json.dumps({"resp": 1}) + "\n")
    out = io.StringIO()
    assert main(["score", str(p), "--reward", "accuracy", "--text-field", "resp.final",
                 "--answer-field", "meta.gold"], out=out) == 2  # line 2 has no resp.final
    assert "line 2: no field 'resp.final'" in capsys.readouterr().err
    p.write_text(json.dumps({"resp": {"final": "#### 3"}, "meta": {"gold": 3}}) + "\n")
    assert main(["score", str(p), "--reward", "accuracy", "--text-field", "resp.final",
                 "--answer-field", "meta.gold"], out=out) == 0
    assert json.loads(out.getvalue().splitlines()[-1])["correct"] is True


def test_formats_stats_reads_the_real_parquet(sft_sample):
    from parallax.evaluation.format_stats import stats_command

    out = io.StringIO()
    assert stats_command(str(sft_sample), "parallel_r1", None, out=out) == 0  # text: the `output` column
    res = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [r["line"] for r in res] == list(range(1, 172))
    assert all(r["status"] != "bad_line" for r in res)  # every row's text was found and parsed
    # the public convention (summary after </Parallel>) parses: 170 of 171; the other row has text
    # between </Parallel> and its <Summary>
    assert sum(r["valid"] for r in res) == 170
    assert [r["error"]["code"] for r in res if not r["valid"]] == ["missing_summary"]
    out = io.StringIO()
    assert stats_command(str(sft_sample), "parallel_r1", None, out=out, text_field="prompt") == 0  # a chat list
    assert all(json.loads(x)["total_tokens"] > 50 for x in out.getvalue().splitlines())


def test_evaluation_reads_a_verl_rollout_dump(tmp_path):
    from parallax.evaluation.cli import read_outputs

    dump = tmp_path / "7.jsonl"
    dump.write_text("".join(json.dumps({"input": q, "output": f"#### {a}", "gts": g, "score": 0.0, "step": 7}) + "\n"
                            for q, a, g in [("Q1", 1, "1"), ("Q1", 2, "1"), ("Q2", 5, "5")]))
    samples = read_outputs(dump)
    assert [(s["uid"], s["answer"], s["text"]) for s in samples] == [("Q1", "1", "#### 1"), ("Q1", "1", "#### 2"),
                                                                     ("Q2", "5", "#### 5")]
    with pytest.raises(ValueError, match=r"7\.jsonl:1: no field 'nope'"):
        read_outputs(dump, text_field="nope")
