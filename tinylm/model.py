"""Build and save the tiny Qwen3-architecture model with its tokenizer (Hugging Face format)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from tinylm.tokenizer import build_tokenizer


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


def build_tiny_model(out_dir: str | Path, cfg: TinyModelConfig, corpus: list[str]) -> Path:
    """Create (or reuse) a randomly initialised model + tokenizer at ``out_dir``.

    Reuse is keyed on the config: a directory built with another config is an error,
    not silently loaded, so a run never trains a model of a shape it did not ask for.
    """
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    stamp = out / "parallax_tiny.json"
    if stamp.exists():
        if json.loads(stamp.read_text()) != asdict(cfg):
            raise ValueError(f"{out} holds a tiny model built with another config; remove it or change the path")
        return out
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
    stamp.write_text(json.dumps(asdict(cfg)))  # written last: marks a complete build
    return out
