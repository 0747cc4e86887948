"""Make a causal-LM directory runnable by the parallel executors and learners, once.

`prepare_model_dir(src, out, tags)` checks the tokenizer and, only where needed, writes a copy to `out`:

* every format tag becomes one special token (the executors act on tag *tokens*, `parallax/executors/tracker.py`);
  a tag that a pretrained tokenizer splits (``<Parallel>`` is 3 tokens for SmolLM2) is added;
* a pad token (``<|pad|>``) when the tokenizer has none (padded SFT / learner batches need one);
* the embeddings hold every new id: resized when the new ids pass the matrix (a model whose matrix is
  already larger than its vocabulary, as Qwen3's, keeps its size), and every new row -- input and, when
  untied, output -- is the mean of the vocabulary's rows, so a new tag starts as an average token
  instead of noise that would dominate the first logits.

A directory that needs nothing is used as it is (no copy of a 4B model). The copy is written under a
temporary name and renamed. Errors name the config key: a missing directory, a tokenizer that still
splits a tag after adding it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PAD_TOKEN", "PreparedModel", "missing_tags", "prepare_model_dir", "tag_ids"]

PAD_TOKEN = "<|pad|>"


@dataclass(frozen=True)
class PreparedModel:
    """The directory the actors load, and what was changed to get it."""

    path: str
    added: tuple[str, ...] = ()  # tokens added to the vocabulary (tags, pad)
    resized: tuple[int, int] | None = None  # embedding rows before, after
    copied: bool = False  # a new directory was written


def _single(tok, tag: str) -> bool:
    ids = tok.encode(tag, add_special_tokens=False)
    return len(ids) == 1 and tok.decode(ids, skip_special_tokens=False) == tag


def missing_tags(tok, tags) -> list[str]:
    """The tags `tok` does not hold as one token."""
    return [t for t in tags if not _single(tok, t)]


def tag_ids(tok, tags) -> list[int]:
    """The ids of the tags `tok` holds as one token (the others are skipped)."""
    return sorted({tok.convert_tokens_to_ids(t) for t in tags if _single(tok, t)})


def prepare_model_dir(src: str | os.PathLike, out: str | os.PathLike, tags, *,
                      key: str = "model.path") -> PreparedModel:
    """The prepared model of `src` (module docstring); `out` is written only if something changes."""
    from transformers import AutoTokenizer

    src = Path(src)
    if not src.is_dir():
        raise ValueError(f"{key}={str(src)!r}: no such model directory")
    if not any((src / f).is_file() for f in ("config.json",)):
        raise ValueError(f"{key}={str(src)!r}: not a Hugging Face model directory (no config.json)")
    tok = AutoTokenizer.from_pretrained(str(src))
    add = missing_tags(tok, tags)
    need_pad = tok.pad_token is None
    if not add and not need_pad:
        return PreparedModel(str(src))
    return _write(src, Path(out), tok, add, need_pad, key)


def _write(src: Path, out: Path, tok, add: list[str], need_pad: bool, key: str) -> PreparedModel:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(src), dtype="auto")
    vocab = len(tok)  # rows the pretrained vocabulary uses
    added = list(add)
    if add:
        tok.add_tokens(add, special_tokens=True)
    if need_pad:
        tok.add_special_tokens({"pad_token": PAD_TOKEN})
        added.append(PAD_TOKEN)
    bad = missing_tags(tok, add)
    if bad:
        raise ValueError(f"{key}={str(src)!r}: the tokenizer still splits {bad} after adding them as special tokens")
    new_ids = sorted({tok.convert_tokens_to_ids(t) for t in added})
    rows = model.get_input_embeddings().weight.shape[0]
    resized = None
    if new_ids and new_ids[-1] >= rows:
        model.resize_token_embeddings(len(tok), mean_resizing=False)
        resized = (rows, model.get_input_embeddings().weight.shape[0])
    with torch.no_grad():
        mats = [model.get_input_embeddings().weight]
        out_emb = model.get_output_embeddings()
        if out_emb is not None and out_emb.weight.data_ptr() != mats[0].data_ptr():
            mats.append(out_emb.weight)
        for w in mats:
            mean = w[:vocab].float().mean(0).to(w.dtype)
            w[new_ids] = mean
    model.config.pad_token_id = tok.pad_token_id
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tok.pad_token_id
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    try:
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return PreparedModel(str(out), tuple(added), resized, True)
