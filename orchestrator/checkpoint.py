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


def save_checkpoint(root: Path, step: int, write: Callable[[Path], None], state: dict[str, Any],
                    keep: int = 0) -> Path:
    """`write(tmp_dir)` fills the directory (model, optimizer); `state` goes to trainer_state.json.

    `keep` > 0 then deletes all but the newest `keep` complete checkpoints; only after `latest`
    names the new one, so a crash at any point leaves at least one complete checkpoint.
    """
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
    if keep:
        prune_checkpoints(root, keep)
    return final


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


def resolve_auto_run_dir(run_dir: Path) -> Path:
    """`resume=auto`: keep `run_dir` if it has a checkpoint, else continue the newest sibling run that has one.

    Hydra gives every launch a fresh timestamped directory; "continue the latest run" means
    writing on into the newest run directory beside it that holds a complete checkpoint.
    """
    if latest_checkpoint(run_dir / "checkpoints"):
        return run_dir
    parent = run_dir.parent
    candidates = [d for d in parent.iterdir() if d.is_dir() and d != run_dir and latest_checkpoint(d / "checkpoints")]
    if not candidates:
        return run_dir
    newest = max(candidates, key=lambda d: (d / "checkpoints" / "latest").stat().st_mtime)
    if run_dir.exists() and not any(run_dir.iterdir()):
        run_dir.rmdir()  # the empty directory Hydra just made for this launch
    return newest


def find_resume_checkpoint(resume: str, run_dir: Path) -> Path | None:
    """never -> None; auto -> the run's latest checkpoint (or None); a path -> that checkpoint (must exist)."""
    if resume == "never":
        return None
    if resume == "auto":
        return latest_checkpoint(run_dir / "checkpoints")
    path = Path(resume)
    if not (path / "trainer_state.json").exists():
        raise FileNotFoundError(f"resume={resume}: no complete checkpoint there (trainer_state.json missing)")
    return path


def truncate_metrics(path: Path, step: int) -> None:
    """Drop logged rows at or after `step`: they are recomputed by the resumed run."""
    if not path.exists():
        return
    keep = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] < step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in keep))
    os.replace(tmp, path)
