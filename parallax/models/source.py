"""Where a run's model comes from: a packaged model, a local directory or a hub name, prepared for the tags.

`prepared_for_run(package=..., path=..., out=..., tags=...)` is the one call a run makes: the source is
materialised (`parallax.models.packaged`) or found (a directory; a hub name through the hub cache), then made
runnable with every tag one token (`parallax.models.prepare`). Errors name the config key they come from.
"""

from __future__ import annotations

from pathlib import Path

from parallax.models.packaged import materialize
from parallax.models.prepare import PreparedModel, prepare_model_dir

__all__ = ["local_model", "prepared_for_run"]


def prepared_for_run(*, package: str | None, path: str | None, out: Path, tags) -> PreparedModel:
    """The prepared model of `model.package` (preferred) or `model.path`, copied to `out` only if it must change."""
    if package:
        src, key = materialize(package), "model.package"
    elif path:
        src, key = local_model(path), "model.path"
    else:
        raise ValueError("model.package and model.path are both unset: no real model to prepare")
    return prepare_model_dir(src, out, tags, key=key)


def local_model(path: str) -> Path:
    """A local model directory, or a hub name fetched into the hub cache; ValueError naming model.path."""
    p = Path(path).expanduser()
    if p.is_dir():
        return p
    if p.is_absolute() or path.startswith((".", "~")) or path.count("/") != 1:
        raise ValueError(f"model.path={path!r}: no such model directory")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path))
    except Exception as e:  # noqa: BLE001 -- offline, unknown repo, no auth: one clear error
        raise ValueError(f"model.path={path!r}: not a local directory, and the hub cannot give it ({e})") from None
