"""The locally built tokenizer and model."""

from __future__ import annotations

import pytest
import torch

from formats import ALL_SPECIAL_TOKENS


@pytest.fixture(scope="module")
def tok(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


def test_every_tag_is_one_token_and_survives_decode(tok):
    for tag in ALL_SPECIAL_TOKENS:
        ids = tok(tag, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, tag
        assert tok.decode(ids, skip_special_tokens=True) == tag  # not dropped as "special"


def test_text_round_trips_and_digits_split(tok):
    text = "<Parallel><Path>12*34=408</Path> #### 408"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    toks = tok.convert_ids_to_tokens(ids)
    assert "1" in toks and "2" in toks and "12" not in toks


def test_model_loads_in_hf_format_with_matching_vocab(tiny_model_path, tok):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    assert model.config.vocab_size == len(tok)
    out = model(torch.tensor([[1, 2, 3]])).logits
    assert out.shape == (1, 3, len(tok)) and torch.isfinite(out).all()


def test_rebuilding_with_another_config_is_refused(tiny_model_path):
    from tinylm import TinyModelConfig, build_tiny_model

    with pytest.raises(ValueError, match="another config"):
        build_tiny_model(tiny_model_path, TinyModelConfig(hidden_size=64), ["x"])
