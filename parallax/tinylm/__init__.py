"""A tiny causal LM and its tokenizer, built locally (no model hub).

The CPU scale of Parallax trains a small Qwen3-architecture model from scratch. Its
tokenizer is a byte-level BPE trained on the toy world's text, with every parallel tag of
both formats as one token, digits split one per token (arithmetic stays learnable), and
saved in Hugging Face format so every backend (transformers, vLLM, xgrammar) loads it the
same way as a real checkpoint.

    >>> from parallax.tinylm import TinyModelConfig, build_tiny_model
    >>> path = build_tiny_model("/tmp/tiny", TinyModelConfig(), ["Q: 1+2\\nA: 3 #### 3"])  # doctest: +SKIP
"""

from parallax.tinylm.model import TinyModelConfig, build_tiny_model
from parallax.tinylm.tokenizer import EOS_TOKEN, PAD_TOKEN, build_tokenizer

__all__ = ["EOS_TOKEN", "PAD_TOKEN", "TinyModelConfig", "build_tiny_model", "build_tokenizer"]
