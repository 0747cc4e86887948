"""What clusters do to a run, below the end-to-end runs (tests/e2e/test_resume.py, test_disk_full.py): the stop
signals' watchdog in a real process, the resume command, and the checkpoints' footprint that a short disk
is told from."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.checkpoint import checkpoint_bytes, count_parameters, planned_saves
from orchestrator.stops import EXIT_PREEMPTED, resume_command

ROOT = Path(__file__).resolve().parents[2]

# A driver whose step in flight never ends: the signal's watchdog must end it within the grace period.
STUCK = """
import sys, time
from orchestrator.stops import StopSignals
stops = StopSignals(float(sys.argv[1]))
stops.overdue = lambda: "Its newest checkpoint is step_000004."
stops.install()
print("ready", flush=True)
while True:
    time.sleep(0.1)  # a step that outlives any grace period (a hung collective, a long generation)
"""


def test_a_step_that_cannot_finish_is_abandoned_within_the_grace_period():
    """SIGUSR1 (Slurm's `--signal`; SIGTERM, handled alike, is tests/e2e/test_resume.py's)."""
    sig = signal.SIGUSR1
    proc = subprocess.Popen([sys.executable, "-c", STUCK, "3"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert proc.returncode == EXIT_PREEMPTED and 0.9 < took < 3.0, (took, err)  # grace 3 s, less 2 s margin
    name = signal.Signals(sig).name
    assert f"parallax: {name} received: finishing the step in flight" in err
    assert f"parallax: {name}: exiting now" in err and "did not end within the grace period (3 s)" in err
    assert err.rstrip().endswith("Its newest checkpoint is step_000004.") and "Traceback" not in err


def test_the_resume_command_is_the_starting_one_with_resume_auto(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["orchestrator", "+experiment=smoke", "resume=never", "hydra.run.dir=old",
                                      "trainer.eval_budgets=[8, 16]"])
    assert resume_command("/runs/a b") == ("python -m orchestrator +experiment=smoke 'trainer.eval_budgets=[8, 16]' "
                                           "'hydra.run.dir=/runs/a b' resume=auto")


@pytest.mark.parametrize("stages, start, every, want", [
    ([80, 2], 0, 0, 2),  # the smoke run: each stage's end
    ([4, 6], 0, 2, 5),  # 2, 4, 6, 8, 10 (4 and 10 are also the stages' ends)
    ([4, 6], 6, 2, 2),  # resumed at 6: 8, 10
    ([4, 6], 10, 2, 0),  # done
    ([5, 5], 0, 3, 5),  # 3, 5, 6, 9 and 10
])
def test_planned_saves(stages, start, every, want):
    assert planned_saves(stages, start, every) == want


def test_the_footprint_matches_what_a_checkpoint_of_the_tiny_model_holds(tmp_path):
    """828,544 parameters in float32 (the tiny model): model/ 3.32 MB, DeepSpeed's module states 3.33 MB and
    its optimizer states 9.95 MB as written by a run (16.60 MB); the estimate is 16.57 MB."""
    import torch
    from safetensors.torch import save_file

    save_file({"a": torch.zeros(1000, 800), "b": torch.zeros(28_544)}, str(tmp_path / "model.safetensors"))
    params = count_parameters(tmp_path)
    assert params == 828_544 and count_parameters(tmp_path / "missing") is None
    assert checkpoint_bytes(params, "float32", lora=False) == pytest.approx(16.60e6, rel=0.01)
    assert checkpoint_bytes(params, "bfloat16", lora=False) == params * 16
    assert checkpoint_bytes(params, "bfloat16", lora=True) == params * 4  # Adam's state of the adapters: small


def test_a_pods_prestop_hook_stops_its_driver_and_waits_for_it(tmp_path):
    """`python -m orchestrator.stops` (cluster/rayjob.yaml's preStop): the driver under the given process
    gets SIGTERM and is waited for; here a stand-in `python -m orchestrator` that takes 1 s to save."""
    from orchestrator.stops import stop_drivers

    pkg = tmp_path / "orchestrator"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1), sys.exit(75)))\n"
        "print('ready', flush=True)\n"
        "while True:\n    time.sleep(0.1)\n")
    import os

    proc = subprocess.Popen([sys.executable, "-m", "orchestrator"], cwd=tmp_path, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert proc.stdout.readline() == "ready\n"
    t0 = time.monotonic()
    left = stop_drivers(10, root=os.getpid())
    assert left == [] and 0.9 < time.monotonic() - t0 < 5 and proc.wait(timeout=5) == 75
