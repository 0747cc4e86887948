"""The locally built tokenizer and model."""

from __future__ import annotations

import pytest
import torch

from parallax.formats import ALL_SPECIAL_TOKENS


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
    from parallax.tinylm import TinyModelConfig, build_tiny_model

    with pytest.raises(ValueError, match="another config"):
        build_tiny_model(tiny_model_path, TinyModelConfig(hidden_size=64), ["x"])


def test_a_cached_build_is_the_build_byte_for_byte_and_is_reused(tmp_path):
    """`cache=`: the first run builds into the cache and copies; the next copies the same entry (no new
    one, its files untouched); a different corpus is a different entry; no cache builds in place. All
    three directories hold the same bytes where the inputs are the same."""
    from parallax.tinylm import TinyModelConfig, build_tiny_model

    cfg, corpus, cache = TinyModelConfig(num_layers=1), ["Q: 1+2\nA: 3 #### 3", "Q: 4*5\nA: 20 #### 20"], tmp_path / "c"
    plain = build_tiny_model(tmp_path / "plain", cfg, corpus)
    first = build_tiny_model(tmp_path / "first", cfg, corpus, cache=cache)
    (entry,) = [d for d in cache.iterdir()]
    stamps = {f.name: f.stat().st_mtime_ns for f in entry.iterdir()}
    second = build_tiny_model(tmp_path / "second", cfg, corpus, cache=cache)
    assert [d for d in cache.iterdir()] == [entry] and stamps == {f.name: f.stat().st_mtime_ns for f in entry.iterdir()}
    files = sorted(f.name for f in plain.iterdir())
    assert "model.safetensors" in files and "parallax_tiny.json" in files
    for d in (first, second, entry):
        assert sorted(f.name for f in d.iterdir()) == files
        assert all((d / f).read_bytes() == (plain / f).read_bytes() for f in files), d
    build_tiny_model(tmp_path / "other", cfg, [*corpus, "Q: 2+2\nA: 4 #### 4"], cache=cache)
    assert len(list(cache.iterdir())) == 2


def test_a_cache_hit_never_loads_transformers_model_code(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from parallax.tinylm import TinyModelConfig, build_tiny_model; "
            "build_tiny_model(sys.argv[1], TinyModelConfig(num_layers=1), ['Q: 1+2 #### 3'], cache=sys.argv[2]); "
            "print(sorted(m for m in sys.modules if m.startswith('transformers.models.qwen3')))")
    outs = [subprocess.run([sys.executable, "-c", code, str(tmp_path / f"run{i}"), str(tmp_path / "cache")],
                           capture_output=True, text=True, check=True).stdout.strip() for i in (0, 1)]
    assert outs[0] != "[]" and outs[1] == "[]", outs  # the miss builds (Qwen3 loaded), the hit copies
