"""A disk that cannot hold the run's checkpoints: said before Ray starts, and a save that does not fit ends
the run in one paragraph (exit 2, no traceback) with the checkpoint before it verified and `latest` on it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path):
    """A 24 MiB tmpfs: one checkpoint of the tiny model (16.6 MB with Adam's state) fits, two do not."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(where)], capture_output=True,
                             text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_is_said_at_start_and_the_run_ends_in_one_paragraph(small_disk, attach, tmp_path):
    from orchestrator.checkpoint import verify_checkpoint

    ckpts = small_disk / "checkpoints"
    cmd = [sys.executable, "-m", "orchestrator", "+experiment=smoke", "curriculum.stages.sft.steps=2",
           "curriculum.stages.rl.steps=1", "trainer.save_every=1", "trainer.keep_checkpoints=1",
           "trainer.eval_after_stage=false", "logging.progress_bar=false", "logging.wandb_mode=disabled",
           "data.n_train=64",
           f"trainer.checkpoint_dir={ckpts}", f"hydra.run.dir={tmp_path / 'run'}", attach]
    out = subprocess.run(cmd, cwd=ROOT, check=False, capture_output=True, text=True, timeout=900)
    assert out.returncode == 2, out.stderr[-3000:]
    # before Ray: the estimate (2 checkpoints at once of ~16 MiB) against the 24 MiB there
    said = out.stdout.index(f"warning: {ckpts} has 24 MiB free, and this run's checkpoints need about 32 MiB")
    assert said < out.stdout.index("step    0")
    assert "Traceback" not in out.stderr + out.stdout, out.stderr[-3000:]
    err = out.stderr[out.stderr.index("parallax: disk full: "):]
    assert err.startswith("parallax: disk full: no space left on device writing checkpoint step_000002")
    assert f"{ckpts / 'step_000001'}, verifies, and {ckpts / 'latest'} names it" in err and "resume=auto" in err
    assert (ckpts / "latest").read_text() == "step_000001"
    verify_checkpoint(ckpts / "step_000001")
    assert sorted(p.name for p in ckpts.iterdir()) == ["latest", "step_000001"]  # the partial write is gone
