"""Atomic checkpoints: write everything into a temporary directory, then rename.

A crash mid-write leaves the previous checkpoint intact and a `*.tmp` directory that the
next save removes; `latest` is a small file naming the newest complete checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def save_checkpoint(root: Path, step: int, write: Callable[[Path], None], state: dict[str, Any]) -> Path:
    """`write(tmp_dir)` fills the directory (model, optimizer); `state` goes to trainer_state.json."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f"step_{step:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write(tmp)
    (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    latest_tmp = root / "latest.tmp"
    latest_tmp.write_text(final.name)
    os.replace(latest_tmp, root / "latest")
    return final


def latest_checkpoint(root: Path) -> Path | None:
    marker = root / "latest"
    if not marker.exists():
        return None
    path = root / marker.read_text().strip()
    return path if (path / "trainer_state.json").exists() else None
