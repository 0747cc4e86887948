"""Kill the driver with SIGKILL mid-run, or stop it with SIGTERM as a scheduler does; resume, and get the
same metrics as an uninterrupted run (one unbroken run, shared)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
ARGS = ["+experiment=smoke", "curriculum.stages.sft.steps=4", "curriculum.stages.rl.steps=6", "trainer.save_every=2",
        "trainer.eval_after_stage=false", "logging.progress_bar=false", "logging.wandb_mode=disabled",
        "data.n_train=128"]
KEYS = ("sft/loss", "reward/mean", "actor/pg_loss", "actor/grad_norm", "response/length")
# A resumed step's metrics as the unbroken run's, to this relative tolerance. Here the two agree to the bit
# (also with the cores loaded); one CI run had the first resumed step's actor/grad_norm 2.0e-5 off (0.1286902
# against 0.1286928) with its reward, loss and length equal, which 1e-5 failed. What resume can lose moves
# far more: other prompts or seeds change the reward and length outright, and Adam's moments not restored
# moved the next step's grad_norm by 1.9e-3 (and 3.6e-3, 9.4e-3 after it; measured by resuming with them off).
RESUMED_REL = 1e-4


def _cmd(run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *ARGS, f"hydra.run.dir={run_dir}", *extra]


def _metrics(run_dir: Path) -> dict[int, dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows]
    assert len(steps) == len(set(steps)), "a step was logged twice"
    return {r["step"]: r for r in rows}


def _latest_step(run_dir: Path) -> int:
    marker = run_dir / "checkpoints" / "latest"
    return int(marker.read_text().strip().split("_")[1]) if marker.exists() else -1


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, attach):
    """One unbroken run, its checkpoints at a URI (trainer.checkpoint_dir, keep 2) with no shared filesystem
    (cluster.shared_fs=false: the learner ranks upload their own files there, the driver writes the manifest):
    the reference the SIGKILLed run must end equal to (neither changes a metric), and the run whose
    checkpoints the URI test then damages. Returns its directory and its metrics as they were at the end."""
    root = tmp_path_factory.mktemp("resume")
    # on the session's cluster: the SIGKILLed run below starts its own (its driver is the one killed)
    uri_args = [f"trainer.checkpoint_dir=file://{root}/store/run", "trainer.keep_checkpoints=2",
                "cluster.shared_fs=false", attach]
    run = root / "run"
    out = subprocess.run(_cmd(run, *uri_args), cwd=ROOT, check=False, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return run, root / "store" / "run", uri_args, _metrics(run)


def test_sigkill_then_resume_matches_uninterrupted(uninterrupted, tmp_path, attach):
    killed = tmp_path / "killed"
    proc = subprocess.Popen(_cmd(killed), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 600
    while _latest_step(killed) < 6 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    kill_step = _latest_step(killed)
    assert 6 <= kill_step < 10

    # the resumed run joins the session's cluster (the killed one went with its driver's process group)
    out = subprocess.run(_cmd(killed, "resume=auto", attach), cwd=ROOT, check=False, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"at step {kill_step}" in out.stdout

    a, b = uninterrupted[3], _metrics(killed)
    assert sorted(a) == sorted(b) == list(range(10))
    for step in range(kill_step, 10):
        for key in KEYS:
            if key in a[step]:
                assert b[step][key] == pytest.approx(a[step][key], rel=RESUMED_REL, abs=1e-6), (step, key)
    assert json.loads((killed / "summary.json").read_text())["steps"] == 10


def test_checkpoints_at_a_uri_survive_the_loss_of_the_run_directory(uninterrupted):
    """trainer.checkpoint_dir=URI, cluster.shared_fs=false: the ranks wrote every checkpoint there themselves
    and nothing of it passed through the driver (its peak RSS grew by less than a tenth of a checkpoint), and
    each verifies against the manifest the driver wrote from the ranks' sha256. With the run directory gone
    and the newest checkpoint at the URI damaged, resume=auto passes over it, the ranks fetch the one before
    from the URI themselves, and the run ends as an unbroken one does."""
    from orchestrator.checkpoint import verify_checkpoint

    run, store, args, unbroken = uninterrupted
    assert sorted(p.name for p in store.glob("step_*")) == ["step_000008", "step_000010"]  # kept 2
    assert (store / "latest").read_text() == "step_000010"
    assert not list((run / "checkpoints").iterdir())  # nothing written on the driver's disk
    saves = json.loads((run / "summary.json").read_text())["checkpoints"]
    assert [s["step"] for s in saves] == [2, 4, 6, 8, 10]
    for s in saves:
        assert s["where"] == f"file://{store}/step_{s['step']:06d}" and s["bytes"] > 5e6, s
        assert s["driver_peak_rss_growth"] < s["bytes"] / 10, s
    assert verify_checkpoint(store / "step_000008")["step"] == 8  # every file hashed again, here
    shutil.rmtree(run / "checkpoints")
    shutil.rmtree(store / "step_000010" / "model")
    again = subprocess.run(_cmd(run, *args, "resume=auto"), cwd=ROOT, check=False, capture_output=True, text=True,
                           timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"passing over step_000010 at file://{store}: " in again.stdout and "model/" in again.stdout
    assert f"resumed from file://{store}/step_000008 at step 8" in again.stdout
    assert json.loads((run / "summary.json").read_text())["steps"] == 10
    resumed = _metrics(run)
    for step in (8, 9):  # trained again from step_000008: as the unbroken run trained them
        for key in KEYS:
            if key in unbroken[step]:
                assert resumed[step][key] == pytest.approx(unbroken[step][key], rel=RESUMED_REL, abs=1e-6), (step, key)
    assert (store / "step_000010" / "model").is_dir()  # the step trained again, uploaded whole


def _logged(run_dir: Path) -> int:
    """Steps in metrics.jsonl so far (a line being written is not counted)."""
    try:
        return sum(1 for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.endswith("}"))
    except FileNotFoundError:
        return 0


def test_sigterm_mid_rl_saves_the_step_in_flight_and_resume_matches(uninterrupted, attach, tmp_path):
    """Preemption (Slurm, Kubernetes): SIGTERM to the driver mid-RL. It finishes the step in flight, writes
    and verifies a checkpoint of it, prints how to resume and exits 75 within the grace period; the command
    it printed continues the run exactly: every step logged once, the metrics and the table of an
    unbroken run. No periodic saves (trainer.save_every=0, which changes no metric), so the checkpoint of
    the steps the signal let finish can only be the one it wrote. On the session's cluster, as a job on a
    cluster is (cluster/slurm.sh)."""
    from orchestrator.checkpoint import verify_checkpoint
    from orchestrator.stops import EXIT_PREEMPTED, GRACE_S

    run = tmp_path / "preempted"
    args = [a for a in ARGS if not a.startswith("trainer.save_every=")]
    cmd = [sys.executable, "-m", "orchestrator", *args, "trainer.save_every=0", f"hydra.run.dir={run}", attach]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600
    while _logged(run) < 5 and time.time() < deadline and proc.poll() is None:  # 4 SFT steps, then RL step 0
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before the signal"
    proc.send_signal(signal.SIGTERM)  # RL step 1 in flight, or about to start
    sent, seen = time.monotonic(), _logged(run)
    _, err = proc.communicate(timeout=2 * GRACE_S)
    took = time.monotonic() - sent
    assert proc.returncode == EXIT_PREEMPTED, err[-3000:]
    assert took < GRACE_S and "Traceback" not in err, (took, err[-3000:])

    logged = sorted(_metrics(run))
    saved = _latest_step(run)
    assert seen <= saved <= seen + 1 and logged == list(range(saved)), (seen, saved, logged)  # none lost
    ckpt = run / "checkpoints" / f"step_{saved:06d}"
    verify_checkpoint(ckpt)
    assert f"parallax: stopped by SIGTERM, {saved} steps done: checkpoint {ckpt} written and verified" in err
    resume = err.split("To continue: ", 1)[1].split("\n", 1)[0]
    assert resume.startswith("python -m orchestrator ") and resume.endswith(f"hydra.run.dir={run} resume=auto")

    again = subprocess.run([sys.executable, *resume.split()[1:]], cwd=ROOT, check=False, capture_output=True,
                           text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"at step {saved}" in again.stdout
    a, b = uninterrupted[3], _metrics(run)  # _metrics: each step once
    assert sorted(a) == sorted(b) == list(range(10))
    for step in range(10):
        for key in KEYS:
            if key in a[step]:
                assert b[step][key] == pytest.approx(a[step][key], rel=RESUMED_REL, abs=1e-6), (step, key)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 10 and summary["stages"] == json.loads((uninterrupted[0] / "summary.json")
                                                                        .read_text())["stages"]
