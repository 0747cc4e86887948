"""Where checkpoints are kept: the run directory, another local directory, or an fsspec URI.

`trainer.checkpoint_dir` names it. Empty: `<run_dir>/checkpoints`. A local path: that directory,
written like the default (atomic rename, manifest last; orchestrator/checkpoint.py). A URI
(`s3://bucket/run`, `gs://...`, `file:///mnt/store`, any filesystem fsspec knows):
* with `cluster.shared_fs=false` (nodes that share no disk: cloud VMs, pods) each learner rank writes its
  own files there itself, and the driver adds only its small files (tokenizer, `trainer_state.json`), the
  manifest (from the sizes and sha256 the ranks report) and `latest`: no checkpoint byte passes through
  the driver or its disk (`RunCheckpoints.save`);
* with a shared filesystem, checkpoints are first written and verified in `<run_dir>/checkpoints` as
  usual, then mirrored to the URI.
Either way every file arrives before `manifest.json`, and `latest` after it, so a copy without its
manifest is an unfinished upload and never resumed from. Old checkpoints are pruned in both places
(`keep_checkpoints`).

`resume=auto` looks in both: it takes the newest step that verifies, fetching it from the URI when
the local copy is missing or damaged (a driver that lost its disk, a run moved to another machine),
and verifies what it fetched. Nothing is read from a URI without being checked against its manifest.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

MANIFEST = "manifest.json"


def is_uri(where: str) -> bool:
    return "://" in where


class Mirror:
    """The checkpoints of one run at an fsspec URI: upload, list, fetch, prune."""

    def __init__(self, uri: str):
        from urllib.parse import urlsplit

        import fsspec

        host = urlsplit(uri).netloc
        if uri.startswith("file:") and host not in ("", "localhost"):  # file://HOST/PATH: never a relative path
            raise ValueError(f"trainer.checkpoint_dir={uri!r}: ambiguous, {host!r} stands where a file URI's host "
                             f"goes; an absolute path is file:///PATH, a relative one is given without file://")
        self.uri = uri.rstrip("/")
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.uri)
        except (ImportError, ValueError) as e:  # unknown protocol, or its package is not installed
            raise ValueError(f"trainer.checkpoint_dir={uri!r}: {e}") from None
        self.root = self.root.rstrip("/")

    def _path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    def step_uri(self, name: str) -> str:
        """Step `name`'s directory at the URI, as a URI (what a learner rank uploads to)."""
        return f"{self.uri}/{name}"

    def clear(self, name: str) -> None:
        """Remove step `name` at the URI: a cut-short upload of a step about to be written again."""
        if self.fs.exists(self._path(name)):
            self.fs.rm(self._path(name), recursive=True)

    def finish(self, name: str, manifest: dict) -> None:
        """Step `name` is complete at the URI (every file there): its manifest, then `latest` naming it."""
        self.fs.pipe_file(self._path(name, MANIFEST), json.dumps(manifest, indent=1).encode())
        self.fs.pipe_file(self._path("latest"), name.encode())

    def upload(self, step_dir: Path) -> None:
        """A verified local checkpoint to the URI: its files, then its manifest, then `latest`."""
        dest = self._path(step_dir.name)
        self.clear(step_dir.name)
        files = sorted(p for p in step_dir.rglob("*") if p.is_file() and p.name != MANIFEST)
        for p in files:
            rel = p.relative_to(step_dir).as_posix()
            self.fs.makedirs(f"{dest}/{rel}".rpartition("/")[0], exist_ok=True)
            self.fs.put_file(str(p), f"{dest}/{rel}")
        self.fs.put_file(str(step_dir / MANIFEST), f"{dest}/{MANIFEST}")  # last: the copy is complete
        self.fs.pipe_file(self._path("latest"), step_dir.name.encode())

    def steps(self) -> list[str]:
        """`step_*` names at the URI whose manifest arrived, newest first."""
        if not self.fs.exists(self.root):
            return []
        names = [p.rstrip("/").rpartition("/")[2] for p in self.fs.ls(self.root, detail=False)]
        done = [n for n in names if n.startswith("step_") and not n.endswith(".tmp")
                and self.fs.exists(self._path(n, MANIFEST))]
        return sorted(done, reverse=True)

    def fetch(self, name: str, local_root: Path) -> Path:
        """Copy step `name` from the URI into `local_root/name` (replacing what is there); unverified."""
        dest = local_root / name
        tmp = local_root / f"{name}.fetch"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        src = self._path(name)
        for path in self.fs.find(src):
            rel = path[len(src):].lstrip("/")
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(path, str(tmp / rel))
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
        return dest

    def prune(self, keep: int) -> list[str]:
        """Delete all but the newest `keep` complete checkpoints at the URI (0: keep all)."""
        if not keep:
            return []
        old = self.steps()[keep:]
        for name in old:
            self.fs.rm(self._path(name), recursive=True)
        return old


def cannot_write(where: Path) -> str | None:
    """Why nothing can be written in `where` (created if missing), or None: tried, not guessed from
    permissions (root passes every access check, an immutable or /proc directory refuses anyway)."""
    import tempfile

    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where, prefix=".parallax-write-check-"):
            return None
    except OSError as e:
        return f"cannot write in {where} ({e.strerror or e})"


def checkpoint_root(checkpoint_dir: str, run_dir: Path) -> Path:
    """The local directory checkpoints are written in: the configured local path, else the run dir's."""
    if checkpoint_dir and not is_uri(checkpoint_dir):
        return Path(checkpoint_dir).expanduser()
    return run_dir / "checkpoints"


def mirror_for(checkpoint_dir: str) -> Mirror | None:
    return Mirror(checkpoint_dir) if checkpoint_dir and is_uri(checkpoint_dir) else None
