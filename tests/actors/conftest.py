"""Fixtures shared by the actor tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def lm(tiny_model_path):
    """(model, tokenizer) of the tiny model in fp32, scored on one thread (deterministic sums)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield (AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval(),
           AutoTokenizer.from_pretrained(tiny_model_path))
    torch.set_num_threads(threads)
