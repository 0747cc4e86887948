"""A visible run that exposes nothing, checked on one run while it trains (2 DeepSpeed learners, the
collective weight sync, the dashboard on): the suite's shared smoke run (tests/e2e/conftest.py).

* the Prometheus endpoint the Ray dashboard reads serves the run's step metrics, W&B gets tables of
  sampled trajectories, and the progress bar shows stage, reward and #Parallel;
* every listening socket of the run's process tree is on the loopback: none on a wildcard address
  (0.0.0.0, ::) and none on the machine's own address (a local run, `cluster.loopback`)."""

from __future__ import annotations

import json
import math
import re

import pytest
from listeners import loopback  # tests/e2e is on sys.path

# one worker for both modules that read the shared smoke run (tests/e2e/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("smoke_run")]
WANTED = ("timing_update", "timing_generate", "timing_sync", "throughput_tokens_per_s", "reward_mean",
          "parallel_ratio", "rollout_samples")


def test_metrics_endpoint_tables_and_progress_bar(smoke_run):
    run, out, err = smoke_run.run_dir, smoke_run.stdout, smoke_run.stderr
    assert smoke_run.returncode == 0, err[-3000:]
    # nothing beyond the loopback; and the listing saw the run: Ray's servers and the learners
    assert "ray::LearnerWorker" in smoke_run.names, sorted(smoke_run.names)
    assert {"gcs_server", "raylet"} <= set(smoke_run.sockets.values()), sorted(smoke_run.names)
    exposed = {f"{ip}:{p} ({name})" for (ip, p), name in smoke_run.sockets.items() if not loopback(ip)}
    assert not exposed, f"listening beyond the loopback: {sorted(exposed)}"
    assert f"127.0.0.1:{smoke_run.port}/metrics" in out
    seen = smoke_run.scraped
    missing = [k for k in WANTED if k not in seen]
    assert not missing, f"not scraped: {missing}; got {sorted(seen)}"
    assert all(math.isfinite(v) for v in seen.values())
    assert seen["rollout_samples"] == 32.0  # smoke: 8 prompts x 4 samples
    # tables: RL steps 80, 82, 84 (stage steps 0, 2, 4; after 80 SFT steps), 3 rows each, in the jsonl and
    # in W&B's files
    tables = sorted(p.name for p in (run / "samples").iterdir())
    assert tables == ["step_80.jsonl", "step_82.jsonl", "step_84.jsonl"], tables
    rows = [json.loads(x) for x in (run / "samples" / "step_82.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and len({r["prompt"] for r in rows}) == 3  # spread over prompts
    assert {"prompt", "completion", "reward", "valid", "critical_path", "policy_version"} <= set(rows[0])
    assert all(r["policy_version"] >= 1 for r in rows)  # sampled after SFT's weights were pushed
    assert list(run.glob("wandb/offline-run-*/files/media/table/samples_*.table.json"))
    assert re.search(r"stage=rl reward=[-\d.]+ #Parallel=[\d.]+", err), err[-2000:]


def test_colocated_engines_slept_through_every_update_and_sampled_the_policy(smoke_run):
    """`rollout.colocate` at sleep level 2: every engine drops its weights for each update (SFT's and RL's)
    and gets them back only from the weight sync. Had an engine sampled anything but the policy's
    weights, the learner's logprobs of its samples would differ from the engine's: each RL step's ratio
    before its update is 1 (ppo_kl ~ 0), as on engines that never sleep."""
    assert smoke_run.returncode == 0, smoke_run.stderr[-3000:]
    rows = [json.loads(line) for line in (smoke_run.run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "reward/mean" in r]
    sft = [r for r in rows if "sft/loss" in r]
    assert len(rl) == 6 and all("timing/sleep" in r and "timing/wake_and_sync" in r for r in rl)
    assert all(abs(r["actor/ppo_kl"]) < 1e-4 for r in rl), [r["actor/ppo_kl"] for r in rl]
    # SFT: asleep from its first step to the stage's end (no push between: trainer.eval_every=0)
    assert "timing/sleep" in sft[0] and sum("timing/sleep" in r for r in sft) == 1, len(sft)


def test_every_stage_row_carries_the_latency_and_each_strata_fork_share(smoke_run):
    """summary.json's stage rows: eval/critical_path_tokens over every held-out sample (a serial one's is its
    length) and, per family x difficulty stratum, mean@k, #Parallel and the critical path."""
    assert smoke_run.returncode == 0, smoke_run.stderr[-3000:]
    stages = json.loads((smoke_run.run_dir / "summary.json").read_text())["stages"]
    assert [s["stage"] for s in stages] == ["init", "sft", "rl"]
    for row in stages:
        strata = {k.split("/")[2] for k in row if k.startswith("eval/heldout/")}
        assert strata == {"subtask_d1", "trial_d1"}, sorted(row)
        crit = [row[f"eval/heldout/{s}/critical_path_tokens"] for s in sorted(strata)]
        # the mean over all samples lies between the strata's means
        assert min(crit) <= row["eval/critical_path_tokens"] <= max(crit)
        assert 0 <= row["eval/heldout/subtask_d1/parallel_ratio"] <= 1
    assert stages[1]["eval/heldout/trial_d1/parallel_ratio"] > 0.5  # SFT taught the fork
