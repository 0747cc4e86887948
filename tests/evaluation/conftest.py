"""Shared fixtures: one tiny random checkpoint per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """A randomly initialised tiny Qwen3 + toy-world tokenizer (real HF checkpoint, ~1 MB)."""
    from parallax import tinylm, toyworld

    cfg = tinylm.TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    return str(tinylm.build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", cfg, toyworld.corpus(30, 0)))
