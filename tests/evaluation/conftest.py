"""Shared fixtures: the real data directory and one tiny random checkpoint per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation.loaders import data_dir


@pytest.fixture(scope="session")
def real_data() -> Path:
    d = data_dir()
    if not (d / "gsm8k" / "test.jsonl").is_file():
        pytest.skip(f"real data not found under {d} (set PARALLAX_DATA_DIR)")
    return d


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """A randomly initialised tiny Qwen3 + toy-world tokenizer (real HF checkpoint, ~1 MB)."""
    import tinylm
    import toyworld

    cfg = tinylm.TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    return str(tinylm.build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", cfg, toyworld.corpus(30, 0)))
