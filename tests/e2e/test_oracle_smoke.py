"""bench/bench_oracle.py's smoke test, on the suite's shared smoke run (tests/e2e/conftest.py): TRL's
GRPOTrainer trains 2 steps from the run's SFT checkpoint on the run's own RL prompts, then the SFT, Parallax
and TRL models are evaluated by one evaluator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("smoke_run")]
ROOT = Path(__file__).resolve().parents[2]


def test_bench_oracle_on_the_smoke_run(smoke_run, tmp_path):
    assert smoke_run.returncode == 0, smoke_run.stderr[-3000:]
    cmd = [sys.executable, "bench/bench_oracle.py", str(smoke_run.run_dir), "--steps", "2", "--out", str(tmp_path)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["bench"] == "oracle" and result["steps"] == 2 and result["prompts"] == 8  # smoke: 8 prompts x 4
    assert len(result["trl_reward"]) == 2 and all(0 <= r <= 1 for r in result["trl_reward"])
    assert len(result["parallax_reward"]) == 2
    assert set(result["heldout"]) == {"sft", "parallax", "trl"}
    assert all(0 <= h["mean@k"] <= h["pass@k"] <= 1 for h in result["heldout"].values())
    assert (tmp_path / "trl" / "model" / "config.json").is_file()
    assert "training accuracy" in out.stdout
