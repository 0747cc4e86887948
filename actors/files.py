"""Directories through Ray's object store, for clusters without a shared filesystem
(`cluster.shared_fs=false`): the model every actor loads, and the checkpoint files learners write.

A tree is `{relative path: bytes}`. The model goes into the object store once; each actor writes
it into a node-local cache named by its digest (complete, or not there: written aside, then renamed).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path


def read_tree(root: str | Path) -> dict[str, bytes]:
    """Every file under `root`, by path relative to it."""
    root = Path(root)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write_tree(root: str | Path, files: dict[str, bytes]) -> Path:
    root = Path(root)
    for rel, data in files.items():
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"refusing a path outside the tree: {rel!r}")
        out = root / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
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
