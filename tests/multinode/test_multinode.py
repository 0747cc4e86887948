"""Training on a multi-node Ray cluster simulated on this machine: a head and 2 nodes with distinct
resources (tests/multinode/sim_cluster.py). The rollout actor goes to one node and the 2 learners to
another (`*.resources`); with `cluster.shared_fs=false` each node loads its own copy of the model,
weights reach the engine over the sync group (a TCPStore across nodes), and checkpoints come back to
the driver through the object store, verified."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.multinode]


@pytest.fixture(scope="module")
def cluster_address():
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests/multinode/sim_cluster.py")], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line, "the simulated cluster did not start"
        yield json.loads(line)["address"]
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def _run(run_dir: Path, address: str, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "orchestrator", "+experiment=smoke", "curriculum.stages.sft.steps=4",
           "curriculum.stages.rl.steps=3", "data.n_train=64", "trainer.eval_after_stage=false",
           "logging.progress_bar=false", "logging.wandb_mode=disabled", "trainer.prompts_per_step=4",
           "rollout.n=2", "rollout.max_new_tokens=24", f"cluster.address={address}", "cluster.shared_fs=false",
           "+rollout.resources.rollout_node=0.5", "+learner.resources.learner_node=0.25",
           "+reward.resources.head_node=0.5", "learner.num_actors=2", f"hydra.run.dir={run_dir}", *extra]
    return subprocess.run(cmd, check=False, cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_rollout_and_learners_on_different_nodes_train_without_a_shared_filesystem(cluster_address, tmp_path):
    from orchestrator.checkpoint import verify_checkpoint

    run = tmp_path / "run"
    out = _run(run, cluster_address)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    where = summary["placement"]
    assert where["rollout_0"]["node"] != where["learner_0"]["node"]
    assert where["learner_0"]["node"] == where["learner_1"]["node"] != where["reward_0"]["node"]
    assert len({w["node"] for w in where.values()}) == 3
    cache = str(Path(tempfile.gettempdir()) / "parallax-models")
    for name in ("rollout_0", "learner_0", "learner_1"):  # each loaded the node's copy, not the run dir's
        assert where[name]["model_path"].startswith(cache), where[name]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "reward/mean" in r]
    assert len(rl) == 3 and all(r["rollout/samples"] == 8 for r in rl)
    assert all(r["sync/bytes"] > 0 for r in rl)  # the collective sync across nodes
    ckpt = run / "checkpoints" / "step_000007"
    verify_checkpoint(ckpt)  # stored by the driver from the files the learners handed over
    assert (ckpt / "model" / "config.json").exists()
    shards = sorted(p.name for p in (ckpt / "training_state" / "state").iterdir())
    assert "zero_pp_rank_1_mp_rank_00_optim_states.pt" in shards, shards  # rank 1's own file, from its node
    # and a run resumed on the same cluster from the SFT checkpoint loads it back through the object store;
    # its own checkpoint goes to a URI, each learner uploading its files from its node (issue 50 item 3)
    store = tmp_path / "store"
    again = _run(tmp_path / "again", cluster_address, f"resume={run / 'checkpoints' / 'step_000004'}",
                 f"trainer.checkpoint_dir=file://{store}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "at step 4" in again.stdout
    assert json.loads((tmp_path / "again" / "summary.json").read_text())["steps"] == 7
    verify_checkpoint(store / "step_000007")  # the manifest the driver wrote from both ranks' sha256
    shards = sorted(p.name for p in (store / "step_000007" / "training_state" / "state").iterdir())
    assert {"zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"} <= set(shards)
    assert not list((tmp_path / "again" / "checkpoints").iterdir())
