"""Stale JIT-build locks: a process killed while torch builds an extension (DeepSpeed's CPU comm op,
~60 s on first start) leaves `<TORCH_EXTENSIONS_DIR>/<build>/<op>/lock` behind, and every later build
of that op waits on it forever, silently (torch's FileBaton has no timeout and no owner).

`clear_stale_build_locks` runs in a learner before DeepSpeed starts: it waits while a lock is young
(another process may be building right now), and removes one older than `STALE_S` (no build takes
that long), saying which and why.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

STALE_S = 300.0  # a build takes ~60 s here, a few minutes on a loaded machine


def extensions_dir() -> Path:
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")


def build_locks(root: Path | None = None) -> list[Path]:
    root = root or extensions_dir()
    return sorted(root.glob("*/*/lock")) if root.is_dir() else []


def clear_stale_build_locks(root: Path | None = None, stale_s: float = STALE_S, poll_s: float = 1.0,
                            log: Callable[[str], None] = print) -> list[Path]:
    """Wait for young locks to go (a build in progress); remove those older than `stale_s`. Returns the
    removed ones. Bounded: a lock is gone or removed within `stale_s` of its creation."""
    removed = []
    while locks := build_locks(root):
        ages = {}
        for lock in locks:
            try:
                ages[lock] = time.time() - lock.stat().st_mtime
            except FileNotFoundError:  # the build finished meanwhile
                continue
        stale = [lk for lk, age in ages.items() if age >= stale_s]
        for lock in stale:
            try:
                lock.unlink()
            except FileNotFoundError:
                continue
            removed.append(lock)
            log(f"removed a stale torch extension build lock {lock} ({ages[lock]:.0f} s old: the process that "
                "took it died mid-build); the op is rebuilt now")
        if len(stale) == len(ages):
            continue
        time.sleep(poll_s)  # a young lock: another process is building; it goes when the build ends
    return removed
