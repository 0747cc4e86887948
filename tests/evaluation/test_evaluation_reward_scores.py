"""``python -m rewards`` end to end."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from parallax.evaluation.cli import main
from parallax.evaluation.reward_scores import parse_kv, read_groups

ROOT = Path(__file__).resolve().parents[2]
PAR = "<Parallel><Path>6*7</Path><Path>7*6</Path><Summary>42</Summary></Parallel> #### 42"


def _write(tmp_path, rows):
    f = tmp_path / "s.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def test_cli_score_groups_and_params(tmp_path):
    f = _write(
        tmp_path,
        [
            {"group": "a", "text": PAR, "answer": "42"},
            {"group": "b", "text": "\\boxed{\\frac{1}{2}}", "answer": "0.5"},
            {"group": "a", "text": "#### 42", "answer": "42"},
            {"group": "a", "text": "#### 7", "answer": "42"},
        ],
    )
    out = io.StringIO()
    assert main(["score", str(f), "--reward", "s2", "--step", "9", "parallel_correct=2.0"], out=out) == 0
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [x["line"] for x in lines] == [1, 2, 3, 4]  # input order kept
    # step 9 is a tiered step: 2.0 (param) for parallel+correct, 1.0 correct, -1.0 wrong
    assert [x["reward"] for x in lines] == [2.0, 1.0, 1.0, -1.0]
    assert lines[1]["pred"] == "\\frac{1}{2}" and lines[1]["correct"] is True
    assert lines[0]["components"]["parallel"] == 1.0 and lines[0]["components"]["s2_tiered"] == 1.0


def test_cli_errors(tmp_path, capsys):
    f = _write(
        tmp_path,
        [{"group": "a", "text": "#### 1", "answer": "1"}, {"group": "a", "text": "x", "answer": "2"}],
    )
    assert main(["score", str(f), "--reward", "accuracy"], out=io.StringIO()) == 2
    assert "two different answers" in capsys.readouterr().err
    assert main(["score", str(f), "--reward", "nope"], out=io.StringIO()) == 2
    with pytest.raises(ValueError):
        parse_kv(["alpha"])
    with pytest.raises(ValueError, match="line 1"):
        read_groups(["{not json"])


def test_python_dash_m_rewards_list():
    r = subprocess.run(
        [sys.executable, "-m", "rewards", "list"],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    names = [json.loads(x)["reward"] for x in r.stdout.splitlines()]
    assert "pa_grpo" in names and "s2" in names
