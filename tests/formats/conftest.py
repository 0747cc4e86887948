"""Fixtures for the formats tests: a real (tiny, locally trained) HF tokenizer and grammar checkers."""

from __future__ import annotations

import os
import sys

import pytest

try:  # `pytest` without an installed package: make the repository root importable
    from parallax import formats  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from parallax.formats import ALL_SPECIAL_TOKENS

_CORPUS = [
    f"Step {i}: compute {i}*{i + 3} = {i * (i + 3)}, then x < {i} and y > 2 so we check the value. #### {i}"
    for i in range(300)
] + [
    (
        "First. <Parallel><Outlines><Subtask>3*4</Subtask><Subtask>5*6</Subtask></Outlines>"
        "<Thread>3*4=12</Thread><Thread>5*6=30</Thread></Parallel> 12+30=42 #### 42"
    ),
    (
        "Let us think in parallel. <Parallel>\n<Path>try a</Path>\n<Path>try b</Path>\n"
        "<Summary>both agree</Summary>\n</Parallel> The answer is 7."
    ),
]


def build_tokenizer(path: str):
    """ByteLevel BPE trained on a few hundred strings; every format tag is one special token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=800,
        special_tokens=["<eos>", *ALL_SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS, trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<eos>", additional_special_tokens=list(ALL_SPECIAL_TOKENS)
    )
    hf.save_pretrained(path)
    return PreTrainedTokenizerFast.from_pretrained(path)


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe_tokenizer")
    build_tokenizer(str(d))
    return str(d)


@pytest.fixture(scope="session")
def hf_tokenizer(tokenizer_dir):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)


@pytest.fixture(scope="session")
def checkers(hf_tokenizer):
    """GrammarChecker per default format name."""
    from parallax.formats import GrammarChecker

    return {name: GrammarChecker(name, hf_tokenizer) for name in ("parallel_r1", "parason")}
