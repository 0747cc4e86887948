"""Verified, atomic checkpoints: write everything into a temporary directory, then rename.

A crash mid-write leaves the previous checkpoint intact and a `*.tmp` directory that the
next save removes; `latest` is a small file naming the newest complete checkpoint.

Every checkpoint ends with `manifest.json` (written last, atomically, inside the temporary
directory): the step, the config's hash, and each file's size and sha256. Resume verifies it:
`resume=auto` takes the run's newest checkpoint that verifies, whatever `latest` says, says which
damaged ones it passed over and why (the file, and what is wrong with it), and never looks outside
the run it is pointed at; `resume=PATH` refuses a damaged checkpoint, naming the file.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.storage import Mirror, cannot_write, checkpoint_root, is_uri, mirror_for

MANIFEST = "manifest.json"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed from; the message names the file."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(ckpt: Path, step: int, config_hash: str = "") -> dict[str, Any]:
    """Sizes and sha256 of every file under `ckpt`, the step and the config hash; atomically, last."""
    files = {str(p.relative_to(ckpt)): {"size": p.stat().st_size, "sha256": _sha256(p)}
             for p in sorted(ckpt.rglob("*")) if p.is_file() and p.name not in (MANIFEST, MANIFEST + ".tmp")}
    manifest = {"step": step, "config_hash": config_hash, "files": files}
    tmp = ckpt / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, ckpt / MANIFEST)
    return manifest


def verify_checkpoint(ckpt: Path) -> dict[str, Any]:
    """The checkpoint's manifest once every file matches it; CheckpointError naming the first that does not."""
    mpath = ckpt / MANIFEST
    if not mpath.is_file():
        raise CheckpointError(f"{mpath}: missing (the write was cut short, or an older Parallax wrote it)")
    try:
        manifest = json.loads(mpath.read_text())
        files = manifest["files"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{mpath}: unreadable ({type(e).__name__})") from None
    for rel, want in files.items():
        f = ckpt / rel
        if not f.is_file():
            raise CheckpointError(f"{f}: missing")
        size = f.stat().st_size
        if size != want["size"]:
            raise CheckpointError(f"{f}: {size} bytes, the manifest says {want['size']} (truncated or replaced)")
        if _sha256(f) != want["sha256"]:
            raise CheckpointError(f"{f}: content differs from the manifest's sha256 (damaged)")
    return manifest


def saved_config_hash(ckpt: Path) -> str | None:
    """The config hash the manifest recorded (None: no manifest, or none recorded)."""
    try:
        return json.loads((ckpt / MANIFEST).read_text()).get("config_hash") or None
    except (OSError, json.JSONDecodeError):
        return None


def read_state(ckpt: Path) -> dict[str, Any]:
    """trainer_state.json, or CheckpointError naming it."""
    path = ckpt / "trainer_state.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: unreadable ({type(e).__name__}: {e})") from None


def save_checkpoint(root: Path, step: int, write: Callable[[Path], None], state: dict[str, Any],
                    keep: int = 0, config_hash: str = "") -> Path:
    """`write(tmp_dir)` fills the directory (model, optimizer); `state` goes to trainer_state.json,
    then the manifest (`write_manifest`), then the directory is renamed into place.

    `keep` > 0 then deletes all but the newest `keep` complete checkpoints; only after `latest`
    names the new one, so a crash at any point leaves at least one complete checkpoint.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f"step_{step:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        write(tmp)
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1))
        write_manifest(tmp, step, config_hash)
    except Exception as e:
        shutil.rmtree(tmp, ignore_errors=True)  # free what the failed write took; the previous one stays
        if _out_of_space(e):
            free = shutil.disk_usage(root).free / 2**20
            raise OSError(errno.ENOSPC, f"no space left on device writing checkpoint {final.name} in {root} "
                          f"({free:.0f} MiB free); the previous checkpoint is intact") from e
        raise
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    latest_tmp = root / "latest.tmp"
    latest_tmp.write_text(final.name)
    os.replace(latest_tmp, root / "latest")
    if keep:
        prune_checkpoints(root, keep)
    return final


def _reset_peak_rss() -> int | None:
    """This process's resident bytes now, its peak reset to them (Linux; None elsewhere): what `_peak_rss`
    reports next is the peak since this call."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None
    return _status_bytes("VmRSS")


def _peak_rss() -> int | None:
    return _status_bytes("VmHWM")


def _status_bytes(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _out_of_space(e: BaseException) -> bool:
    """ENOSPC, however it surfaced: an OSError, or torch's C++ stream error ("basic_ios::clear: iostream
    error") from inside a Ray actor."""
    text = str(e)
    return getattr(e, "errno", None) == errno.ENOSPC or "No space left" in text or "iostream error" in text


def prune_checkpoints(root: Path, keep: int) -> list[Path]:
    """Delete complete `step_*` checkpoints older than the newest `keep`; never the one `latest` names."""
    latest = latest_checkpoint(root)
    done = sorted((d for d in root.glob("step_*") if d.is_dir() and not d.name.endswith(".tmp")
                   and (d / "trainer_state.json").exists()), key=lambda d: d.name)
    old = [d for d in done[:-keep] if d != latest]
    for d in old:
        shutil.rmtree(d)
    return old


def latest_checkpoint(root: Path) -> Path | None:
    marker = root / "latest"
    if not marker.exists():
        return None
    path = root / marker.read_text().strip()
    return path if (path / "trainer_state.json").exists() else None


def _step_dirs(root: Path) -> list[Path]:
    """Renamed-into-place `step_*` directories, newest first (a `*.tmp` one never finished)."""
    dirs = [d for d in root.glob("step_*") if d.is_dir() and not d.name.endswith(".tmp")]
    return sorted(dirs, key=lambda d: d.name, reverse=True)


def find_resume_checkpoint(resume: str, run_dir: Path, log: Callable[[str], None] = print,
                           root: Path | None = None, mirror: Mirror | None = None) -> Path | None:
    """never -> None; auto -> this run's newest verified checkpoint (None, said, when it has none);
    a path (or a URI) -> that checkpoint, verified.

    `auto` ignores `latest` (missing, stale or pointing back), passes over damaged checkpoints
    saying why, and fails when every checkpoint there is damaged rather than start over silently.
    `root` is where the run writes checkpoints (default `run_dir/checkpoints`); with a `mirror`
    (orchestrator/storage.py) a step missing or damaged there is fetched from it and verified.
    """
    if resume == "never":
        return None
    root = run_dir / "checkpoints" if root is None else root
    if resume == "auto":
        local = {d.name for d in _step_dirs(root)} if root.is_dir() else set()
        remote = set(mirror.steps()) if mirror is not None else set()
        refused = []
        for name in sorted(local | remote, reverse=True):
            for source in ("local", "mirror"):
                if name not in (local if source == "local" else remote):
                    continue
                d = root / name if source == "local" else mirror.fetch(name, root)
                try:
                    verify_checkpoint(d)
                    read_state(d)
                except CheckpointError as e:
                    refused.append(str(e))
                    where = f" (fetched from {mirror.uri})" if source == "mirror" else ""
                    log(f"resume=auto: passing over {name}{where}: {e}")
                    continue
                if refused:
                    log(f"resume=auto: falling back to {name}, the newest checkpoint that verifies")
                if source == "mirror":
                    log(f"resume=auto: {name} fetched from {mirror.uri} and verified")
                return d
        if refused:
            where = root if mirror is None else f"{root} or {mirror.uri}"
            raise CheckpointError(f"resume=auto: no checkpoint in {where} verifies: " + "; ".join(refused))
        log(f"resume=auto: {run_dir} has no checkpoint yet; starting from the beginning")
        return None
    if is_uri(resume):  # a checkpoint at a URI: fetched into this run's checkpoint directory, then checked
        parent, _, name = resume.rstrip("/").rpartition("/")
        remote = Mirror(parent)
        if name not in remote.steps():
            raise FileNotFoundError(f"resume={resume}: no such checkpoint (or its upload never finished)")
        path = remote.fetch(name, root)
    else:
        path = Path(resume)
    if not path.is_dir():
        raise FileNotFoundError(f"resume={resume}: no such checkpoint directory")
    if (path / MANIFEST).exists() or not (path / "trainer_state.json").exists():
        verify_checkpoint(path)
    else:
        log(f"resume={resume}: no {MANIFEST} (written before checkpoints were verified); loading it unverified")
    read_state(path)
    return path


def truncate_metrics(path: Path, step: int) -> None:
    """Drop logged rows at or after `step`: they are recomputed by the resumed run."""
    if not path.exists():
        return
    keep = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] < step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in keep))
    os.replace(tmp, path)


def plain_config(cfg: Any) -> dict[str, Any]:
    """A typed config (dataclasses) as plain JSON values."""
    import dataclasses

    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))


def config_hash(cfg: Any) -> str:
    """sha256 of the config without where the run lives and how it was started (run_dir, resume): what a
    checkpoint's manifest records, and what a resumed run must match."""
    plain = {k: v for k, v in plain_config(cfg).items() if k not in ("run_dir", "resume")}
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()[:16]


_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
ADAM_BYTES = 12  # per trained parameter: DeepSpeed's fp32 master copy and Adam's two moments


def count_parameters(model_dir: Path) -> int | None:
    """Parameters in a local HF model directory, from its safetensors headers (None: no such files)."""
    total, found = 0, False
    for f in sorted(model_dir.glob("*.safetensors")):
        with open(f, "rb") as fh:
            header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
        for name, t in header.items():
            if name != "__metadata__":
                n = 1
                for d in t["shape"]:
                    n *= d
                total, found = total + n, True
    return total if found else None


def checkpoint_bytes(params: int, dtype: str, lora: bool) -> int:
    """One checkpoint's size: the model twice in its compute dtype (`model/`, and DeepSpeed's module
    states) and, under full fine-tuning, Adam's state (`ADAM_BYTES` a parameter; LoRA's is negligible).
    The tiny model, 830k parameters in float32: 16.6 MB estimated, 16.6 MB written."""
    return params * (2 * _DTYPE_BYTES.get(dtype, 4) + (0 if lora else ADAM_BYTES))


def planned_saves(stage_steps: list[int], start: int, save_every: int) -> int:
    """Checkpoints a run writes after step `start`: at each stage's end and every `save_every` steps
    (`save_every_min` adds more, by the clock)."""
    ends, total = set(), 0
    for steps in stage_steps:
        total += steps
        ends.add(total)
    every = set(range(save_every, total + 1, save_every)) if save_every else set()
    return len({s for s in ends | every if s > start})


class RunCheckpoints:
    """One run's checkpoints: where (`trainer.checkpoint_dir`: the run dir, a local path, or a URI the
    local copies are mirrored to), when (every `save_every` steps, every `save_every_min` minutes, and at
    once when the newest one was deleted under the run), and how many stay (`keep_checkpoints`)."""

    def __init__(self, tcfg: Any, run_dir: Path, shared_fs: bool = True):
        self.tcfg, self.run_dir = tcfg, run_dir
        self.root = checkpoint_root(tcfg.checkpoint_dir, run_dir)
        if why := cannot_write(self.root):  # else the first save fails mid-run, a traceback
            raise ValueError(f"trainer.checkpoint_dir={tcfg.checkpoint_dir or str(self.root)!r}: {why}")
        self.mirror = mirror_for(tcfg.checkpoint_dir)
        self.shared_fs = shared_fs  # the ranks write into the driver's directory (else they stream it their files)
        # the ranks upload their own files to the URI (no shared disk to write a local copy on)
        self.direct = self.mirror is not None and not shared_fs
        self.saved_at = time.monotonic()  # save_every_min counts from here
        self.last: Path | None = None  # the newest checkpoint this run wrote (a vanished one is said)
        # each save's step, place, bytes, seconds and the driver's peak RSS growth meanwhile (summary.json)
        self.saves: list[dict[str, Any]] = []

    @property
    def where(self) -> str | Path:
        return self.mirror.uri if self.mirror else self.root

    def find(self, resume: str, log: Callable[[str], None] = print) -> Path | str | None:
        """The checkpoint to resume from, verified (a damaged one is named, the previous good one taken). In
        `direct` mode, a checkpoint at the URI stays there (its URI: each rank fetches its own files)."""
        if not (self.direct and (resume == "auto" or is_uri(resume))):
            return find_resume_checkpoint(resume, self.run_dir, root=self.root, mirror=self.mirror, log=log)
        if is_uri(resume):
            self.read(resume.rstrip("/"), None)
            return resume.rstrip("/")
        refused = []
        for name in self.mirror.steps():
            where = self.mirror.step_uri(name)
            try:
                self.read(where, None)
            except CheckpointError as e:
                refused.append(str(e))
                log(f"resume=auto: passing over {name} at {self.mirror.uri}: {e}")
                continue
            if refused:
                log(f"resume=auto: falling back to {name}, the newest checkpoint that verifies")
            return where
        if refused:
            raise CheckpointError(f"resume=auto: no checkpoint at {self.mirror.uri} verifies: " + "; ".join(refused))
        log(f"resume=auto: {self.mirror.uri} has no checkpoint yet; starting from the beginning")
        return None

    @property
    def off(self) -> bool:
        """`trainer.save_every=-1`: this run writes no checkpoint at all."""
        return self.tcfg.save_every < 0

    def due(self, step: int) -> bool:
        """Whether to save after `step` steps."""
        if self.off:
            return False
        every, minutes = self.tcfg.save_every, self.tcfg.save_every_min
        return bool(self.lost(step) or (every and step % every == 0)
                    or (minutes and time.monotonic() - self.saved_at >= 60 * minutes))

    def lost(self, step: int) -> bool:
        """Whether the newest checkpoint this run wrote is gone (its directory deleted under the run: it
        was silently made again at the next save). Said either way; trainer.lost_checkpoint decides."""
        if self.last is None or self.last.is_dir():
            return False
        what = f"checkpoint {self.last} is gone: its directory was removed while the run trained"
        if self.tcfg.lost_checkpoint == "stop":
            from orchestrator.stops import RunStopped

            raise RunStopped(f"{what}. trainer.lost_checkpoint=stop ends the run here, at step "
                             f"{step}; with =save it writes a new one at once.")
        print(f"warning: {what}; saving step {step} now (trainer.lost_checkpoint=save)", flush=True)
        return True

    def space_warning(self, model_path: str, cfg: Any, curriculum: Any, resumed: Path | None) -> str | None:
        """Whether the disk the checkpoints go to can hold what this run will keep there (said before Ray
        starts): the checkpoints' size from the model's parameters, its dtype and the optimizer
        (`checkpoint_bytes`), times how many are on disk at once (`keep_checkpoints` + 1 while the
        newest is written; all of them with 0), less those already there. None: it fits, or unknown."""
        params = count_parameters(Path(model_path)) if Path(model_path).is_dir() else None
        if params is None or self.direct or self.off:  # unknown, or nothing lands on this disk
            return None
        per = checkpoint_bytes(params, cfg.model.dtype, cfg.learner.lora.r > 0)
        start = read_state(resumed).get("global_step", 0) if resumed else 0
        future = planned_saves([s.steps for s in curriculum.stages], start, self.tcfg.save_every)
        keep = self.tcfg.keep_checkpoints
        there = len(_step_dirs(self.root)) if self.root.is_dir() else 0
        new = future if not keep else max(0, min(keep + 1, there + future) - there)
        need, free = new * per, shutil.disk_usage(self.root).free
        if need <= free:
            return None
        mib = 2**20
        kept = (f"trainer.keep_checkpoints={keep}: {min(keep + 1, there + future)} on disk at once"
                if keep else f"trainer.keep_checkpoints=0 keeps all {future} still to come"
                + (", and more every trainer.save_every_min" if self.tcfg.save_every_min else ""))
        return (f"{self.root} has {free / mib:.0f} MiB free, and this run's checkpoints need about "
                f"{need / mib:.0f} MiB there ({kept}; {new} new of ~{per / mib:.0f} MiB each: {params:,} "
                f"parameters in {cfg.model.dtype}{'' if cfg.learner.lora.r else ' with Adam state'}). "
                "A save that does not fit stops the run, its previous checkpoint intact. Free space, lower "
                "trainer.keep_checkpoints, or point trainer.checkpoint_dir at a larger disk.")

    def read(self, ckpt: Path | str, config_hash: str | None) -> dict[str, Any]:
        """The trainer state a checkpoint holds; a config that changed since it was written is said (None: not
        compared). At a URI its trainer_state.json is checked against the manifest's sha256."""
        if isinstance(ckpt, str):
            import fsspec

            manifest = self.verify(ckpt)
            with fsspec.open(f"{ckpt}/trainer_state.json", "rb") as f:
                raw = f.read()
            if hashlib.sha256(raw).hexdigest() != manifest["files"].get("trainer_state.json", {}).get("sha256"):
                raise CheckpointError(f"{ckpt}/trainer_state.json: content differs from the manifest's sha256")
            saved, state, name = manifest.get("config_hash"), json.loads(raw), ckpt.rpartition("/")[2]
        else:
            saved, state, name = saved_config_hash(ckpt), read_state(ckpt), ckpt.name
        if config_hash is not None and saved and saved != config_hash:
            print(f"resume: the config differs from the one {name} was written with (overrides changed); "
                  "continuing with the new one")
        return state

    def save(self, step: int, learner: Any, driver_files: Callable[[Path], None], state: dict[str, Any],
             config_hash: str) -> Path | str:
        """One checkpoint: the learner ranks' files (`learner`: an `actors.group.LearnerGroup`), what the
        driver adds (`driver_files(dir)`: the tokenizer), `state` as trainer_state.json, then the manifest.

        Locally (`save_checkpoint`): the ranks write into the new directory (a shared filesystem) or stream their
        files to it; a URI mirror then gets a verified copy. In `direct` mode (a URI, no shared filesystem) the
        ranks upload their files to the URI themselves, and the driver writes its own files, the manifest
        from the ranks' sizes and sha256, and `latest`: the checkpoint's URI is returned."""
        self.saved_at = t = time.monotonic()
        rss = _reset_peak_rss()
        keep = self.tcfg.keep_checkpoints
        if self.direct:
            final, manifest = self._save_direct(step, learner, driver_files, state, config_hash)
        else:
            def write(tmp: Path) -> None:
                learner.save(tmp, self.shared_fs)
                driver_files(tmp)

            final = save_checkpoint(self.root, step, write, state, keep=keep, config_hash=config_hash)
            if self.mirror is not None:
                self.mirror.upload(final)
                self.mirror.prune(keep)
            self.last = final
            manifest = json.loads((final / MANIFEST).read_text())
        peak, size = _peak_rss(), sum(f["size"] for f in manifest["files"].values())
        self.saves.append({"step": step, "where": str(final), "bytes": size, "seconds": round(time.monotonic() - t, 3),
                           "driver_peak_rss_growth": None if rss is None or peak is None else peak - rss})
        return final

    def _save_direct(self, step: int, learner: Any, driver_files: Callable[[Path], None], state: dict[str, Any],
                     config_hash: str) -> tuple[str, dict[str, Any]]:
        import tempfile

        from actors.files import upload_tree

        name, mirror = f"step_{step:06d}", self.mirror
        where = mirror.step_uri(name)
        mirror.clear(name)  # a cut-short upload of this step (a run resumed before it)
        files = learner.save_to(where)
        with tempfile.TemporaryDirectory(prefix="parallax-ckpt-") as d:
            driver_files(Path(d))
            (Path(d) / "trainer_state.json").write_text(json.dumps(state, indent=1))
            for rel, entry in upload_tree(d, where).items():
                if files.setdefault(rel, entry) != entry:
                    raise RuntimeError(f"{where}/{rel}: written by a learner rank and by the driver")
        manifest = {"step": step, "config_hash": config_hash, "files": dict(sorted(files.items()))}
        mirror.finish(name, manifest)
        mirror.prune(self.tcfg.keep_checkpoints)
        return where, manifest

    def verify(self, where: Path | str) -> dict[str, Any]:
        """`verify_checkpoint` of a local checkpoint; at a URI (direct mode), its manifest and every file's
        size there, without reading the files (the ranks hashed them as they wrote them, and each rank checks
        the sha256 of what it fetches to resume)."""
        if isinstance(where, Path):
            return verify_checkpoint(where)
        import fsspec

        fs, path = fsspec.core.url_to_fs(where.rstrip("/"))
        try:
            manifest = json.loads(fs.cat_file(f"{path}/{MANIFEST}"))
            files = manifest["files"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{where}/{MANIFEST}: missing or unreadable ({type(e).__name__})") from None
        for rel, want in files.items():
            try:
                size = fs.size(f"{path}/{rel}")
            except FileNotFoundError:
                raise CheckpointError(f"{where}/{rel}: missing") from None
            if size != want["size"]:
                raise CheckpointError(f"{where}/{rel}: {size} bytes, the manifest says {want['size']} (truncated "
                                      "or replaced)")
        return manifest
