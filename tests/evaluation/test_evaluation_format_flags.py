"""The CLIs on both summary placements, malformed blocks with correct answers, and the Parason
release's formats, through JSONL and parquet, with the format flags."""

from __future__ import annotations

import io
import json

import pytest

AFTER = "Q <Parallel>\n<Path>2+2=4</Path>\n<Path>4</Path>\n</Parallel>\n<Summary>both 4</Summary>\n\nFinal Answer: 4"
INSIDE = "Q <Parallel><Path>2+2=4</Path><Path>4</Path><Summary>both 4</Summary></Parallel>\nFinal Answer: 4"
BROKEN = "Q <Parallel><Path>2+2=4</Path></Parallel> junk <Summary>x</Summary>\nFinal Answer: 4"  # one path
RELEASE = ("Go <Parallel><Outlines><Outline>1: 2+2</Outline><Outline>2: check</Outline></Outlines>"
           "<Thread>1: 2+2\n4</Thread><Thread>2: check\n4 ok</Thread><Conclusion>4</Conclusion></Parallel> #### 4")
RELEASE_AFTER = RELEASE.replace("<Conclusion>4</Conclusion></Parallel>", "</Parallel>\n<Conclusion>4</Conclusion>")


def _write(tmp_path, rows, kind):
    if kind == "jsonl":
        p = tmp_path / "x.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        p = tmp_path / "x.parquet"
        pq.write_table(pa.Table.from_pylist(rows), p)
    return str(p)


def _rows(texts, gold="4"):
    return [{"prompt": [{"role": "user", "content": f"Q{i}"}], "reward_model": {"ground_truth": gold},
             "output": t} for i, t in enumerate(texts)]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_rewards_score_both_placements_and_a_broken_block(tmp_path, kind):
    from parallax.evaluation.cli import main

    p = _write(tmp_path, _rows([AFTER, INSIDE, BROKEN]), kind)
    out = io.StringIO()
    assert main(["score", p, "--reward", "parallel_acc", "--format", "parallel_r1"], out=out) == 0
    res = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [r["format_valid"] for r in res] == [True, True, False]
    assert [r["correct"] for r in res] == [True, True, True]  # accuracy reads the final answer alone
    assert [r["reward"] for r in res] == [1.0, 1.0, 0.0]  # the format-aware reward keeps its gate
    out = io.StringIO()  # a run that accepts only the inside placement
    assert main(["score", p, "--reward", "parallel_acc", "--summary-placement", "inside",
                 "--summary-accept", "inside"], out=out) == 0
    assert [json.loads(x)["format_valid"] for x in out.getvalue().splitlines()] == [False, True, False]
    out = io.StringIO()
    assert main(["score", p, "--reward", "s1"], out=out) == 0
    assert [json.loads(x)["reward"] for x in out.getvalue().splitlines()] == [1.0, 1.0, 1.0]  # S1: accuracy only


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_formats_stats_release_formats_and_flags(tmp_path, kind, capsys):
    from parallax.evaluation.cli import main

    p = _write(tmp_path, [{"text": RELEASE}, {"text": RELEASE_AFTER}], kind)
    assert main(["stats", p, "--format", "parason"]) == 0
    res = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["valid"] for r in res] == [True, True]
    assert res[0]["outline_share"] > 0 and res[0]["subtask_share"] == res[0]["trial_share"] == 0
    assert main(["stats", p, "--format", "parason", "--outline-kind", "trial"]) == 0
    res = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert res[0]["trial_share"] > 0 and res[0]["outline_share"] == 0
    assert main(["stats", p, "--format", "parason", "--no-aliases"]) == 0
    assert [json.loads(x)["valid"] for x in capsys.readouterr().out.splitlines()] == [False, False]
    # a placement the parser would not read back: refused before any row is read
    assert main(["stats", p, "--format", "parason", "--summary-accept", "inside"]) == 2
    captured = capsys.readouterr()
    assert "must include summary_placement" in captured.err and captured.out == ""


def test_rewards_score_the_release_format(tmp_path):
    from parallax.evaluation.cli import main

    p = _write(tmp_path, _rows([RELEASE, RELEASE_AFTER]), "jsonl")
    out = io.StringIO()
    assert main(["score", p, "--reward", "pa_grpo", "--format", "parason", "beta_sub=0.1"], out=out) == 0
    res = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [r["format_valid"] for r in res] == [True, True] and [r["correct"] for r in res] == [True, True]
    out = io.StringIO()
    assert main(["score", p, "--reward", "pa_grpo", "--format", "parason", "--outline-kind", "subtask",
                 "beta_sub=0.1", "beta_trial=0"], out=out) == 0
    assert all(json.loads(x)["correct"] for x in out.getvalue().splitlines())


def test_evaluation_outputs_both_placements(tmp_path):
    from parallax.evaluation.cli import main

    rows = [{"uid": "a", "text": AFTER, "answer": "4"}, {"uid": "b", "text": INSIDE, "answer": "4"},
            {"uid": "c", "text": BROKEN, "answer": "4"}]
    p = _write(tmp_path, rows, "jsonl")
    out = tmp_path / "eval"
    assert main(["outputs", p, "--format", "parallel_r1", "--out", str(out)]) == 0
    overall = json.loads((out / "metrics.json").read_text())["overall"]
    assert overall["mean@1"] == pytest.approx(1.0)  # every final answer is right, the broken block's too
    assert overall["format_valid"] == pytest.approx(2 / 3)
    assert main(["outputs", p, "--format", "parallel_r1", "--summary-placement", "inside",
                 "--summary-accept", "inside", "--out", str(out)]) == 0
    assert json.loads((out / "metrics.json").read_text())["overall"]["format_valid"] == pytest.approx(1 / 3)
