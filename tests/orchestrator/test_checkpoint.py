"""Atomic checkpoints and `trainer.keep_checkpoints`: old ones go, the newest and `latest` stay."""

from __future__ import annotations

import json

import pytest

from orchestrator.checkpoint import latest_checkpoint, prune_checkpoints, save_checkpoint


def _write(tmp):
    (tmp / "weights.bin").write_bytes(b"w" * 16)


def test_keep_deletes_all_but_the_newest_n(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (2, 4, 6, 8):
        save_checkpoint(root, step, _write, {"global_step": step}, keep=2)
    assert sorted(d.name for d in root.glob("step_*")) == ["step_000006", "step_000008"]
    assert latest_checkpoint(root).name == "step_000008"
    assert json.loads((root / "step_000008" / "trainer_state.json").read_text()) == {"global_step": 8}


def test_keep_zero_keeps_every_checkpoint(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        save_checkpoint(root, step, _write, {"global_step": step})
    assert len(list(root.glob("step_*"))) == 3


def test_prune_never_deletes_latest_nor_incomplete_dirs(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        save_checkpoint(root, step, _write, {"global_step": step})
    (root / "latest").write_text("step_000001")  # a resume from an older checkpoint points back
    (root / "step_000009").mkdir()  # a crashed write: no trainer_state.json, not a checkpoint
    gone = prune_checkpoints(root, keep=1)
    assert sorted(d.name for d in gone) == ["step_000002"]
    assert sorted(d.name for d in root.glob("step_*")) == ["step_000001", "step_000003", "step_000009"]


def test_a_failed_write_keeps_the_previous_checkpoint(tmp_path):
    root = tmp_path / "checkpoints"
    save_checkpoint(root, 1, _write, {"global_step": 1}, keep=1)

    def broken(tmp):
        raise OSError("No space left on device")

    with pytest.raises(OSError, match="No space"):
        save_checkpoint(root, 2, broken, {"global_step": 2}, keep=1)
    assert latest_checkpoint(root).name == "step_000001"
    assert (root / "step_000001" / "weights.bin").exists()
