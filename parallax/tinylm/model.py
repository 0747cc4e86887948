"""Build and save the tiny Qwen3-architecture model with its tokenizer (Hugging Face format)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path

from parallax.tinylm.tokenizer import build_tokenizer


@dataclass
class TinyModelConfig:
    """Shape of the tiny model; defaults train in minutes on 2 CPU cores."""

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 384
    vocab_size: int = 384  # BPE merges budget; the tags are added on top
    max_position_embeddings: int = 1024
    seed: int = 0


STAMP = "parallax_tiny.json"  # written last: marks a complete build


def build_tiny_model(out_dir: str | Path, cfg: TinyModelConfig, corpus: list[str],
                     cache: str | Path | None = None) -> Path:
    """Create (or reuse) a randomly initialised model + tokenizer at ``out_dir``.

    Reuse is keyed on the config: a directory built with another config is an error,
    not silently loaded, so a run never trains a model of a shape it did not ask for.
    ``cache``: a directory of earlier builds, keyed on everything the build reads (the config, the
    corpus, this package's source, the torch / transformers / tokenizers versions); a hit is copied
    to ``out_dir``, byte for byte what a build would write, without importing transformers' model
    code (~3 s of every run's start-up).
    """
    out = Path(out_dir)
    stamp = out / STAMP
    if stamp.exists():
        if json.loads(stamp.read_text()) != asdict(cfg):
            raise ValueError(f"{out} holds a tiny model built with another config; remove it or change the path")
        return out
    if cache is None:
        _build(out, cfg, corpus)
        return out
    built = _cached(Path(cache), cfg, corpus)
    out.mkdir(parents=True, exist_ok=True)
    for f in sorted(built.iterdir(), key=lambda f: f.name == STAMP):  # the stamp last
        shutil.copy2(f, out / f.name)
    return out


def _cache_key(cfg: TinyModelConfig, corpus: list[str]) -> str:
    h = hashlib.sha256()
    here = Path(__file__).parent
    parts = [json.dumps(asdict(cfg), sort_keys=True), *(version(p) for p in ("torch", "transformers", "tokenizers")),
             *((here / f).read_text() for f in ("model.py", "tokenizer.py")), *corpus]
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _cached(root: Path, cfg: TinyModelConfig, corpus: list[str]) -> Path:
    """The cached build for (cfg, corpus), built into ``root`` first on a miss (atomically: a run that
    dies mid-build, or two runs building at once, never leave a partial entry)."""
    path = root / f"tiny-{_cache_key(cfg, corpus)}"
    if (path / STAMP).is_file():
        return path
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".tiny-") as tmp:
        _build(Path(tmp) / "model", cfg, corpus)
        try:
            os.replace(Path(tmp) / "model", path)
        except OSError:  # another run put the same build there first
            if not (path / STAMP).is_file():
                raise
    return path


def _build(out: Path, cfg: TinyModelConfig, corpus: list[str]) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = build_tokenizer(corpus, vocab_size=cfg.vocab_size)
    torch.manual_seed(cfg.seed)
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.hidden_size // cfg.num_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    model = Qwen3ForCausalLM(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / STAMP).write_text(json.dumps(asdict(cfg)))  # written last: marks a complete build
