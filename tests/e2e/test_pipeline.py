"""The pipelined driver on the toy run: with trainer.max_staleness=1 the next step's samples generate
while the learners update, from the weights one version back (actor/staleness 1), the prompts of
every step stay those of the synchronous loop, and the first RL step -- nothing ran ahead of it yet --
is the synchronous one's exactly. Off-policy correction (TIS), PPO mini-batches and DAPO dynamic
sampling run alongside, and every step keeps prompts x n samples."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
BASE = ["+experiment=smoke", "curriculum.stages.sft.steps=3", "curriculum.stages.rl.steps=4", "data.n_train=64",
        "trainer.eval_after_stage=false", "logging.progress_bar=false", "logging.wandb_mode=disabled",
        "trainer.prompts_per_step=4", "rollout.n=2", "rollout.max_new_tokens=24", "logging.print_every=0",
        "logging.table_every=1", "logging.table_rows=4", "learner.recompute_old_logprobs=true"]


def _run(run: Path, *extra: str) -> dict[int, dict]:
    out = subprocess.run([sys.executable, "-m", "orchestrator", *BASE, *extra, f"hydra.run.dir={run}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return _metrics(run)


def _metrics(run: Path) -> dict[int, dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "reward/mean" in r}


def _prompts(run: Path, step: int) -> list[str]:
    return [json.loads(x)["prompt"] for x in (run / "samples" / f"step_{step}.jsonl").read_text().splitlines()]


def test_staleness_one_overlaps_and_keeps_the_data_order(tmp_path, attach):
    """Through bench/ab_pipeline.py (this is its smoke test too): the same runs, synchronous and
    staleness 1, as the benchmark makes them, then its JSON line and the runs it kept."""
    cmd = [sys.executable, str(ROOT / "bench" / "ab_pipeline.py"), "--staleness", "0", "1", "--out", str(tmp_path),
           "--", *BASE, attach, "learner.rollout_is=token", "learner.ppo_mini_batches=2"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    bench = json.loads(out.stdout.strip().splitlines()[-1])
    assert bench["bench"] == "ab_pipeline" and set(bench["loadavg"]) == {"start", "end"}
    rows = {r["staleness"]: r for r in bench["rows"]}
    assert sorted(rows) == [0, 1] and rows[0]["rl_steps"] == rows[1]["rl_steps"] == 4
    assert rows[0]["staleness_mean"] == 0 and rows[1]["staleness_mean"] == 3 / 4  # steps 2-4 one version behind
    assert rows[0]["samples_exact"] and rows[1]["samples_exact"] and rows[1]["wall_s"] > 0
    assert rows[0]["acc_sft"] is None and rows[0]["gain"] is None  # no evaluation asked for: no accuracy

    sync, piped = _metrics(tmp_path / "s0"), _metrics(tmp_path / "s1")
    assert sorted(sync) == sorted(piped) == [3, 4, 5, 6]
    assert all(r["actor/staleness"] == 0 for r in sync.values())
    assert piped[3]["actor/staleness"] == 0 and all(piped[s]["actor/staleness"] == 1 for s in (4, 5, 6))
    for key in ("reward/mean", "response/length", "rollout/samples"):  # the first RL step: the same samples
        assert piped[3][key] == sync[3][key], key
    for step in (3, 4, 5, 6):  # the pipeline draws each step's prompts in the synchronous order
        assert _prompts(tmp_path / "s1", step) == _prompts(tmp_path / "s0", step)
        assert piped[step]["rollout/samples"] == 8
    assert all(0 < piped[s]["actor/is_ratio"] < 2 for s in piped)  # TIS ran on the learner


def test_dynamic_sampling_refills_and_keeps_the_batch_size(tmp_path, attach):
    rows = _run(tmp_path / "dyn", attach, "curriculum.stages.rl.steps=2", "trainer.dynamic_sampling=true",
                "trainer.dynamic_sampling_rounds=1", "reward.name=accuracy")
    for r in rows.values():
        assert r["rollout/samples"] == 8 and r["rollout/dynamic_rounds"] <= 1
        # short of informative groups only after trying the refill it was allowed
        assert r["rollout/dynamic_short"] == 0 or r["rollout/dynamic_rounds"] == 1
        assert r["rollout/dynamic_short"] <= r["rollout/filtered"]
