"""A model directory's tokenizer and context length, read without transformers' model registry.

`AutoTokenizer` and `AutoConfig` import the registry of every model class (`transformers.models.auto`), which
imports `torch._dynamo`: 1.7 s of the driver's start-up on these cores, before any actor starts, in every run
and every test that starts one. Where the directory says plainly what `AutoTokenizer` would build (its
`tokenizer_config.json` names the generic fast tokenizer, as the tiny model's and SmolLM2's do) and what
`AutoConfig` would read (`max_position_embeddings` in `config.json`), that class and that value are read
directly: the same object and number. Anything else (a hub name, a model-specific tokenizer class, a config
that maps the name) goes through the Auto classes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GENERIC = ("TokenizersBackend", "PreTrainedTokenizerFast")  # what AutoTokenizer builds for these: the class itself


def _json(path: str | Path, name: str) -> dict:
    f = Path(path) / name
    return json.loads(f.read_text()) if f.is_file() else {}


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer `AutoTokenizer.from_pretrained(path)` gives."""
    cls = _json(path, "tokenizer_config.json").get("tokenizer_class")
    if cls in GENERIC:
        import transformers

        return getattr(transformers, cls).from_pretrained(str(path))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def context_length(path: str | Path) -> int | None:
    """`max_position_embeddings` of the model's config (None where it has none), as `AutoConfig` reads it."""
    config = _json(path, "config.json")
    if "max_position_embeddings" in config:
        return config["max_position_embeddings"]
    from transformers import AutoConfig

    return getattr(AutoConfig.from_pretrained(str(path)), "max_position_embeddings", None)
