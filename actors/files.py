"""Directories through Ray's object store, for clusters without a shared filesystem
(`cluster.shared_fs=false`): the model every actor loads, and the checkpoint files learners write.

A tree is `{relative path: bytes}`. The model goes into the object store once; each actor writes
it into a node-local cache named by its digest (complete, or not there: written aside, then renamed).
A checkpoint travels as pieces (`tree_pieces`, `write_piece`): the driver stores one piece at a time and
never holds a rank's files at once (a Qwen3-4B ZeRO-3 checkpoint is ~56 GB). Where `trainer.checkpoint_dir`
is a URI, no bytes pass the driver at all: each rank uploads its own files there (`upload_tree`) and
returns their sizes and sha256, from which the driver writes the manifest.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# A checkpoint piece: what the driver holds at a time while it stores a learner rank's files.
PIECE_BYTES = 16 << 20


def read_tree(root: str | Path) -> dict[str, bytes]:
    """Every file under `root`, by path relative to it."""
    root = Path(root)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _inside(root: Path, rel: str) -> Path:
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise ValueError(f"refusing a path outside the tree: {rel!r}")
    return root / rel


def write_tree(root: str | Path, files: dict[str, bytes]) -> Path:
    root = Path(root)
    for rel, data in files.items():
        out = _inside(root, rel)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    return root


def tree_pieces(root: str | Path, piece_bytes: int = PIECE_BYTES) -> Iterator[tuple[str, int, bytes]]:
    """Every file under `root` as (path relative to it, offset, bytes) pieces of at most `piece_bytes`, each
    file's in order from offset 0 (an empty file is one empty piece)."""
    root = Path(root)
    for p in sorted(root.rglob("*")):
        if p.is_file():
            with p.open("rb") as f:
                offset = 0
                while True:
                    data = f.read(piece_bytes)
                    if data or offset == 0:
                        yield str(p.relative_to(root)), offset, data
                    offset += len(data)
                    if len(data) < piece_bytes:
                        break


def write_piece(root: str | Path, rel: str, offset: int, data: bytes) -> None:
    """One `tree_pieces` piece into the tree at `root` (offset 0 starts the file anew)."""
    out = _inside(Path(root), rel)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("r+b" if offset else "wb") as f:
        f.seek(offset)
        f.write(data)


def upload_tree(root: str | Path, uri: str, piece_bytes: int = PIECE_BYTES) -> dict[str, dict]:
    """Every file under `root` copied to the fsspec URI `uri` (a directory there), a piece at a time, hashed on
    the way: `{relative path: {"size", "sha256"}}`, the entries of a checkpoint manifest."""
    import fsspec

    fs, base = fsspec.core.url_to_fs(uri)
    base = base.rstrip("/")
    root, done = Path(root), {}
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(root).as_posix()
        dest = f"{base}/{rel}"
        fs.makedirs(dest.rpartition("/")[0], exist_ok=True)
        h, size = hashlib.sha256(), 0
        with p.open("rb") as src, fs.open(dest, "wb") as out:
            while chunk := src.read(piece_bytes):
                h.update(chunk)
                out.write(chunk)
                size += len(chunk)
        done[rel] = {"size": size, "sha256": h.hexdigest()}
    return done


def download_tree(uri: str, files: dict[str, dict], root: str | Path, piece_bytes: int = PIECE_BYTES) -> Path:
    """The files `files` names (`upload_tree`'s entries) fetched from the fsspec URI `uri` into `root`, each
    checked against its size and sha256 on the way: ValueError naming the first that differs."""
    import fsspec

    fs, base = fsspec.core.url_to_fs(uri)
    base, root = base.rstrip("/"), Path(root)
    for rel, want in sorted(files.items()):
        out = _inside(root, rel)
        out.parent.mkdir(parents=True, exist_ok=True)
        h, size = hashlib.sha256(), 0
        with fs.open(f"{base}/{rel}", "rb") as src, out.open("wb") as dst:
            while chunk := src.read(piece_bytes):
                h.update(chunk)
                dst.write(chunk)
                size += len(chunk)
        if (size, h.hexdigest()) != (want["size"], want["sha256"]):
            raise ValueError(f"{uri}/{rel}: {size} bytes that differ from the manifest's ({want['size']} bytes, "
                             "sha256) (damaged)")
    return root


def digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    return h.hexdigest()[:16]


def pack_model(path: str | Path) -> dict:
    """A model directory as what the object store carries: its files and their digest."""
    files = read_tree(path)
    if not files:
        raise FileNotFoundError(f"no model files under {path}")
    return {"digest": digest(files), "files": files}


def local_model(pack: dict, cache: str | Path | None = None) -> str:
    """This node's copy of a packed model (written once per node and digest); its path."""
    cache = Path(cache or Path(tempfile.gettempdir()) / "parallax-models")
    dest = cache / pack["digest"]
    if dest.is_dir():
        return str(dest)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{pack['digest']}-", dir=cache))
    write_tree(tmp, pack["files"])
    try:
        os.rename(tmp, dest)
    except OSError:  # another actor on this node finished first: its copy is the same files
        shutil.rmtree(tmp, ignore_errors=True)
    return str(dest)
