"""`python -m parallax.evaluation` end to end: a JSONL of outputs, and a real (tiny) checkpoint through the engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parallax.evaluation.cli import main, read_outputs

PR = "<Parallel><Path>6*7=42</Path><Path>7*6=42</Path><Summary>42</Summary></Parallel> #### 42"
PNG = b"\x89PNG\r\n\x1a\n"


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_outputs_cli_writes_json_markdown_plots(tmp_path, capsys):
    rows = []
    for i in range(1, 16):
        rows.append({"uid": f"aime24/{i}", "benchmark": "aime24", "problem_number": i, "answer": "42",
                     "texts": [PR, "#### 42" if i % 3 else "#### 1", "#### 7"]})
    _write(tmp_path / "outs.jsonl", rows)
    out = tmp_path / "eval"
    assert main([str(tmp_path / "outs.jsonl"), "--budgets", "5,12", "--out", str(out), "--label", "m"]) == 0
    res = json.loads((out / "metrics.json").read_text())
    b = res["benchmarks"]["aime24"]
    assert res["k"] == 3 and b["n_problems"] == 15
    # per problem: PR correct (T=10), "#### 42" correct in 10 of 15 problems (T=2), "#### 7" wrong
    assert b["mean@3"] == pytest.approx((15 + 10) / 45)
    assert b["budget_acc"] == pytest.approx({"5": 10 / 45, "12": 25 / 45})
    assert list(b["strata"]) == ["easy", "medium", "hard"]
    md = (out / "report.md").read_text()
    assert "| m | 33.3 | 55.6 | 100.0 | 55.6 |" in md  # #Parallel, Mean@3, Pass@3, Avg.
    assert "B=12" in md and "easy" in md
    for name in ("budget_curve", "accuracy", "strata_tokens"):
        assert (out / f"{name}.png").read_bytes()[:8] == PNG
    assert "Parallax evaluation" in capsys.readouterr().out


def test_outputs_cli_errors(tmp_path, capsys):
    assert main(["outputs", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    _write(tmp_path / "bad.jsonl", [{"text": "x", "answer": "1"}])
    with pytest.raises(ValueError, match="uid"):
        read_outputs(tmp_path / "bad.jsonl")


def test_checkpoint_cli_on_tiny_model(tiny_model, tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "eval"
    argv = ["checkpoint", tiny_model, "--benchmarks", "toyworld", "--toy-n", "4", "--toy-difficulty", "1,2",
            "--k", "2", "--max-new-tokens", "12", "--budgets", "4,8,64", "--style", "raw", "--out", str(out),
            "--format", "parason"]
    assert main(argv) == 0
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 8 and all(s["response_tokens"] <= 12 for s in samples)
    res = json.loads((out / "metrics.json").read_text())
    toy = res["benchmarks"]["toyworld"]
    assert toy["n_problems"] == 4 and res["k"] == 2
    assert set(toy["strata"]) <= {"difficulty_1", "difficulty_2"} and toy["strata"]
    tok = AutoTokenizer.from_pretrained(tiny_model)
    # token unit is the checkpoint's tokenizer (total tokens of each text, averaged)
    want = sum(len(tok(s["text"], add_special_tokens=False)["input_ids"]) for s in samples) / 8
    assert toy["total_tokens"] == pytest.approx(want)
    assert 0.0 <= toy["budget_acc"]["4"] <= toy["budget_acc"]["64"] <= toy["mean@2"] + 1e-12
    assert (out / "budget_curve.png").read_bytes()[:8] == PNG


def test_a_runs_checkpoint_is_read_from_its_model_dir(tiny_model, tmp_path):
    from parallax.evaluation.cli import model_dir

    step = tmp_path / "checkpoints" / "step_000030"
    step.mkdir(parents=True)
    (step / "model").symlink_to(tiny_model)
    assert model_dir(step) == step / "model" and model_dir(tiny_model) == Path(tiny_model)
    with pytest.raises(ValueError, match="neither a model directory"):
        model_dir(tmp_path)
    assert main(["checkpoint", str(tmp_path / "nothing")]) != 0  # a clear error, not a tokenizer traceback


@pytest.mark.slow  # wandb start-up ~5-8 s
def test_wandb_offline_logging(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    _write(tmp_path / "o.jsonl", [{"uid": "a", "text": "#### 1", "answer": "1"}])
    out = tmp_path / "eval"
    assert main(["outputs", str(tmp_path / "o.jsonl"), "--out", str(out), "--wandb", "--budgets", "4"]) == 0
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(p.suffix == ".wandb" for p in runs[0].iterdir())
