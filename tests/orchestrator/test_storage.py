"""trainer.checkpoint_dir as an fsspec URI (orchestrator/storage.py): each verified checkpoint is copied
there, manifest after its files; resume=auto fetches from it what the run's own directory lost or
damaged, verifies it, and names what it passed over. fsspec's local filesystem (file://) stands in for
an object store: the same calls (put_file, ls, find, get_file, rm) run."""

from __future__ import annotations

import shutil

import pytest

from orchestrator.checkpoint import CheckpointError, find_resume_checkpoint, save_checkpoint
from orchestrator.storage import Mirror, checkpoint_root, mirror_for


def _model(tmp):
    (tmp / "model").mkdir()
    (tmp / "model" / "model.safetensors").write_bytes(bytes(range(256)) * 512)
    (tmp / "training_state").mkdir()
    (tmp / "training_state" / "shard.pt").write_bytes(b"\x02" * 70_000)


def _run(tmp_path, keep=0, steps=(2, 4, 6)):
    run, uri = tmp_path / "run", f"file://{tmp_path}/store/run"
    mirror = Mirror(uri)
    for s in steps:
        final = save_checkpoint(run / "checkpoints", s, _model, {"global_step": s}, keep=keep)
        mirror.upload(final)
        mirror.prune(keep)
    return run, mirror


def test_every_checkpoint_reaches_the_uri_with_its_manifest_and_latest(tmp_path):
    run, mirror = _run(tmp_path, keep=2)
    assert mirror.steps() == ["step_000006", "step_000004"]  # pruned there too
    store = tmp_path / "store" / "run"
    assert (store / "latest").read_text() == "step_000006"
    for name in ("model/model.safetensors", "training_state/shard.pt", "trainer_state.json", "manifest.json"):
        assert (store / "step_000006" / name).read_bytes() == (run / "checkpoints" / "step_000006" / name).read_bytes()


def test_an_upload_without_its_manifest_is_never_a_checkpoint(tmp_path):
    run, mirror = _run(tmp_path, steps=(2,))
    cut = tmp_path / "store" / "run" / "step_000004"  # files arrived, the manifest did not
    shutil.copytree(run / "checkpoints" / "step_000002", cut)
    (cut / "manifest.json").unlink()
    assert mirror.steps() == ["step_000002"]


def test_auto_fetches_from_the_uri_what_the_run_directory_lost(tmp_path):
    run, mirror = _run(tmp_path)
    shutil.rmtree(run / "checkpoints")  # the driver's disk is gone
    said = []
    got = find_resume_checkpoint("auto", run, log=said.append, mirror=mirror)
    assert got == run / "checkpoints" / "step_000006" and (got / "manifest.json").is_file()
    assert any("step_000006 fetched from file://" in s for s in said)


def test_auto_passes_over_a_damaged_copy_at_the_uri_and_falls_back(tmp_path):
    run, mirror = _run(tmp_path)
    shutil.rmtree(run / "checkpoints" / "step_000006")
    shard = tmp_path / "store" / "run" / "step_000006" / "training_state" / "shard.pt"
    shard.write_bytes(b"\x00" * 10)  # truncated at the store
    said = []
    got = find_resume_checkpoint("auto", run, log=said.append, mirror=mirror)
    assert got.name == "step_000004"
    assert any("passing over step_000006 (fetched from file://" in s and "shard.pt" in s for s in said)
    # a damaged local copy is replaced by the store's good one
    (run / "checkpoints" / "step_000004" / "model" / "model.safetensors").write_bytes(b"x")
    got = find_resume_checkpoint("auto", run, log=said.append, mirror=mirror)
    assert got.name == "step_000004" and (got / "model" / "model.safetensors").stat().st_size == 256 * 512


def test_auto_fails_when_nothing_anywhere_verifies_and_resume_takes_a_uri(tmp_path):
    run, mirror = _run(tmp_path, steps=(2,))
    shutil.rmtree(run / "checkpoints")
    uri = f"file://{tmp_path}/store/run/step_000002"
    got = find_resume_checkpoint(uri, tmp_path / "elsewhere", log=lambda s: None)
    assert got == tmp_path / "elsewhere" / "checkpoints" / "step_000002"
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        find_resume_checkpoint(f"file://{tmp_path}/store/run/step_000009", run, log=lambda s: None)
    (tmp_path / "store" / "run" / "step_000002" / "trainer_state.json").write_text("{")
    shutil.rmtree(run / "checkpoints", ignore_errors=True)
    with pytest.raises(CheckpointError, match="no checkpoint in .* or file://.* verifies"):
        find_resume_checkpoint("auto", run, log=lambda s: None, mirror=mirror)


def test_where_checkpoints_go(tmp_path):
    assert checkpoint_root("", tmp_path) == tmp_path / "checkpoints"
    assert checkpoint_root(str(tmp_path / "ckpt"), tmp_path) == tmp_path / "ckpt"
    assert checkpoint_root("s3://bucket/run", tmp_path) == tmp_path / "checkpoints"  # written here first
    assert mirror_for("") is None and mirror_for(str(tmp_path)) is None
    with pytest.raises(ValueError, match="trainer.checkpoint_dir='nosuchfs://x'"):
        mirror_for("nosuchfs://x")


@pytest.mark.parametrize("uri", ["file://relative/path", "file://runs/ckpt/"])
def test_a_file_uri_with_a_host_is_refused_before_anything_is_written(refused, tmp_path, monkeypatch, uri):
    """By URI rules `file://relative/path` names host "relative": it was taken as <cwd>/relative/path."""
    monkeypatch.chdir(tmp_path)
    err = refused("+experiment=smoke", f"trainer.checkpoint_dir={uri}")
    assert f"setup error: trainer.checkpoint_dir={uri!r}: ambiguous" in err, err[-2000:]
    assert not (tmp_path / uri.split("://")[1].split("/")[0]).exists()


def test_file_uris_that_name_no_host_are_accepted(tmp_path):
    for uri in (f"file://{tmp_path}/a", f"file://localhost{tmp_path}/b"):
        assert Mirror(uri).root.endswith(uri.split(str(tmp_path))[1])


def test_an_unwritable_checkpoint_dir_is_a_setup_error(refused):
    """It was accepted, and the first save failed mid-run with a traceback."""
    err = refused("+experiment=smoke", "trainer.checkpoint_dir=/proc/parallax_ckpt")
    assert "setup error: trainer.checkpoint_dir='/proc/parallax_ckpt': cannot write in /proc/parallax_ckpt" in err, err
