"""Atomic checkpoints and `trainer.keep_checkpoints`: old ones go, the newest and `latest` stay."""

from __future__ import annotations

import json
import shutil

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

    with pytest.raises(OSError, match="(?i)no space left"):
        save_checkpoint(root, 2, broken, {"global_step": 2}, keep=1)
    assert latest_checkpoint(root).name == "step_000001"
    assert (root / "step_000001" / "weights.bin").exists()


# ---- verified checkpoints and resume=auto (the probes) ----------------------------------
from orchestrator.checkpoint import (
    CheckpointError,
    find_resume_checkpoint,
    read_state,
    verify_checkpoint,
)


def _model(tmp):
    (tmp / "model").mkdir()
    (tmp / "model" / "model.safetensors").write_bytes(bytes(range(256)) * 1024)  # 256 KiB
    (tmp / "training_state").mkdir()
    (tmp / "training_state" / "mp_rank_00_model_states.pt").write_bytes(b"\x01" * 300_000)


def _run(tmp_path, steps=(2, 4, 6), name="run"):
    run = tmp_path / name
    for s in steps:
        save_checkpoint(run / "checkpoints", s, _model, {"global_step": s}, config_hash="abc")
    return run


def test_every_checkpoint_has_a_manifest_that_verifies(tmp_path):
    run = _run(tmp_path, steps=(3,))
    m = verify_checkpoint(run / "checkpoints" / "step_000003")
    assert m["step"] == 3 and m["config_hash"] == "abc"
    assert set(m["files"]) == {"model/model.safetensors", "training_state/mp_rank_00_model_states.pt",
                               "trainer_state.json"}
    assert m["files"]["model/model.safetensors"]["size"] == 256 * 1024


@pytest.mark.parametrize("damage,what", [
    ("zeros", "content differs"), ("ff", "content differs"), ("truncate", "bytes, the manifest says"),
    ("delete", "missing")])
def test_damage_is_named_and_auto_falls_back_to_the_previous_good_one(tmp_path, damage, what):
    run = _run(tmp_path)
    target = run / "checkpoints" / "step_000006" / "training_state" / "mp_rank_00_model_states.pt"
    data = bytearray(target.read_bytes())
    if damage == "zeros":  # the probe: 256 KiB of zeros written into the model states
        data[1000:1000 + 256 * 1024] = bytes(256 * 1024)
        target.write_bytes(bytes(data[:len(target.read_bytes())]))
    elif damage == "ff":
        data[:4096] = b"\xff" * 4096
        target.write_bytes(bytes(data))
    elif damage == "truncate":
        target.write_bytes(bytes(data[:1000]))
    else:
        target.unlink()
    with pytest.raises(CheckpointError, match=what) as e:
        verify_checkpoint(target.parents[1])
    assert str(target) in str(e.value)
    said = []
    got = find_resume_checkpoint("auto", run, log=said.append)
    assert got.name == "step_000004"
    assert any("passing over step_000006" in s and "mp_rank_00_model_states.pt" in s for s in said)
    assert any("falling back to step_000004" in s for s in said)
    with pytest.raises(CheckpointError, match="mp_rank_00_model_states.pt"):  # a path given: refused
        find_resume_checkpoint(str(target.parents[1]), run, log=said.append)


def test_a_truncated_trainer_state_is_named(tmp_path):
    run = _run(tmp_path, steps=(2,))
    state = run / "checkpoints" / "step_000002" / "trainer_state.json"
    state.write_text(state.read_text()[:5])
    with pytest.raises(CheckpointError, match="trainer_state.json"):
        verify_checkpoint(state.parent)
    # the manifest's own check caught it; without it, reading the state names the file too
    with pytest.raises(CheckpointError, match=f"{state}: unreadable"):
        read_state(state.parent)


@pytest.mark.parametrize("latest", ["missing", "stale", "older", "garbage"])
def test_auto_takes_the_newest_verified_step_whatever_latest_says(tmp_path, latest):
    run = _run(tmp_path)
    marker = run / "checkpoints" / "latest"
    if latest == "missing":
        marker.unlink()
    elif latest == "stale":
        marker.write_text("step_000099")
    elif latest == "older":
        marker.write_text("step_000002")
    else:
        marker.write_bytes(b"\x00\xff")
    assert find_resume_checkpoint("auto", run, log=lambda s: None).name == "step_000006"


def test_auto_never_continues_another_run_and_says_when_there_is_nothing(tmp_path):
    _run(tmp_path, name="sibling")  # a complete run beside this one
    mine = tmp_path / "mine"
    (mine / "checkpoints" / "step_000002.tmp").mkdir(parents=True)  # a crash before the first latest
    said = []
    assert find_resume_checkpoint("auto", mine, log=said.append) is None
    assert said and "has no checkpoint yet" in said[0]
    assert sorted(p.name for p in (tmp_path / "sibling" / "checkpoints").glob("step_*")) == \
        ["step_000002", "step_000004", "step_000006"]  # untouched


def test_auto_fails_when_every_checkpoint_is_damaged(tmp_path):
    run = _run(tmp_path, steps=(2,))
    (run / "checkpoints" / "step_000002" / "model" / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match="no checkpoint in .* verifies"):
        find_resume_checkpoint("auto", run, log=lambda s: None)


def test_the_cli_refuses_a_damaged_run_before_ray_starts(refused, tmp_path):
    run = _run(tmp_path, steps=(2,))
    (run / "checkpoints" / "step_000002" / "model" / "model.safetensors").write_bytes(b"\x00")
    err = refused("+experiment=smoke", f"hydra.run.dir={run}", "resume=auto")
    assert "setup error: resume=auto: no checkpoint" in err and "model.safetensors" in err
    assert not (run / "metrics.jsonl").exists()  # nothing ran, nothing written


def test_a_full_disk_says_so_and_frees_the_partial_write(tmp_path):
    """torch's save on a full disk raises "basic_ios::clear: iostream error" (through Ray, wrapped):
    the user reads "no space left", the partial directory is gone, the previous checkpoint verifies."""
    root = tmp_path / "checkpoints"
    save_checkpoint(root, 1, _write, {"global_step": 1})

    def full(tmp):
        (tmp / "half.bin").write_bytes(b"x" * 1000)
        raise RuntimeError("ray.exceptions.RayTaskError(RuntimeError): basic_ios::clear: iostream error")

    with pytest.raises(OSError, match="no space left on device writing checkpoint step_000002") as e:
        save_checkpoint(root, 2, full, {"global_step": 2})
    assert e.value.errno == 28 and "previous checkpoint is intact" in str(e.value)
    assert not (root / "step_000002.tmp").exists() and latest_checkpoint(root).name == "step_000001"
    verify_checkpoint(root / "step_000001")


def test_a_lost_rollout_actor_names_the_knob_that_restarts_it():
    """A rollout or reward actor past its restarts: cluster.max_restarts governs, not only
    trainer.max_failures (the message named that one alone)."""
    from actors.faults import ActorLost
    from orchestrator.stops import lost_actor_paragraph
    from parallax.contract.config import ParallaxConfig

    cfg = ParallaxConfig()
    text = lost_actor_paragraph(ActorLost("rollout", 1, "it did not restart"), cfg, 0, "/runs/x/checkpoints")
    assert text.startswith("rollout actor 1 was lost: it did not restart. The run stops. ")
    assert f"cluster.max_restarts={cfg.cluster.max_restarts} times" in text and "trainer.max_failures" in text
    assert text.endswith("To continue from the newest checkpoint (/runs/x/checkpoints), run the same command with "
                         "resume=auto.") and "\n" not in text


@pytest.mark.parametrize("policy", ["save", "stop"])
def test_a_vanished_checkpoint_directory_is_said_and_handled(tmp_path, capsys, policy):
    """The checkpoint dir deleted mid-run was made again silently at the next save (steps lost unsaid)."""
    from orchestrator.checkpoint import RunCheckpoints
    from orchestrator.stops import RunStopped
    from parallax.contract.config import TrainerConfig

    run = _run(tmp_path, steps=(2,))
    ckpts = RunCheckpoints(TrainerConfig(lost_checkpoint=policy, save_every=4, save_every_min=0), run)
    assert ckpts.root == run / "checkpoints"
    ckpts.last = run / "checkpoints" / "step_000002"
    assert ckpts.lost(5) is False and [s for s in range(1, 9) if ckpts.due(s)] == [4, 8]  # there: nothing to say
    shutil.rmtree(run / "checkpoints")
    if policy == "stop":
        with pytest.raises(RunStopped, match=r"checkpoint .*step_000002 is gone.*ends the run here, at step 5"):
            ckpts.due(5)
    else:
        assert ckpts.due(5) is True  # the loop saves at once
        assert "step_000002 is gone" in capsys.readouterr().out


def test_save_every_minus_one_lets_no_save_fall_due(tmp_path):
    """trainer.save_every=-1: no save falls due, not by the clock either (and `step % -1` is 0 for every step).
    That a stage's end saves nothing either, the paper experiment at mini scale shows (tests/e2e/test_paper_mini.py).
    Below -1 the config check refuses it."""
    from orchestrator.checkpoint import RunCheckpoints
    from parallax.contract.config import ParallaxConfig, TrainerConfig
    from parallax.contract.ranges import check_ranges

    ckpts = RunCheckpoints(TrainerConfig(save_every=-1, save_every_min=1e-9), _run(tmp_path, steps=(2,)))
    assert ckpts.off and not any(ckpts.due(s) for s in range(1, 9))
    assert not RunCheckpoints(TrainerConfig(save_every=0), tmp_path / "b").off
    cfg = ParallaxConfig()
    cfg.trainer.save_every = -2
    with pytest.raises(ValueError, match="trainer.save_every"):
        check_ranges(cfg)


def test_a_stop_signal_under_save_every_minus_one_writes_nothing_and_says_so(tmp_path):
    """The driver's answer to SIGTERM (Trainer.stop_here) with no checkpoints asked for: nothing is written, the
    watchdog is told the driver is done saving, and the message says the run cannot be continued (instead of
    a resume command that would start it over)."""
    import time
    from types import SimpleNamespace

    from orchestrator.checkpoint import RunCheckpoints
    from orchestrator.stops import Preempted, StopSignals
    from orchestrator.trainer import Trainer
    from parallax.contract.config import TrainerConfig

    run = tmp_path / "run"
    trainer = Trainer.__new__(Trainer)  # the driver's state stop_here reads, no actors
    trainer.curriculum, trainer.newest = SimpleNamespace(global_step=5), None
    trainer.ckpts = RunCheckpoints(TrainerConfig(save_every=-1), run)
    trainer.stops = StopSignals(60.0, inert=True)
    trainer.stops.requested, trainer.stops.at = "SIGTERM", time.monotonic()
    with pytest.raises(Preempted, match=r"^SIGTERM, 5 steps done, .* no checkpoint written \(trainer.save_every=-1\)"):
        trainer.stop_here()
    assert trainer.stops.saved and not list(run.glob("checkpoints/step_*"))
