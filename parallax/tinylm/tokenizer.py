"""Byte-level BPE tokenizer for the tiny model, trained on the machine.

Why these choices:
* tags are added tokens with ``special=False``: one id each, never dropped by ``decode``
  and matched as ordinary text by xgrammar (which refuses special tokens inside a grammar);
* digits are split one per token so that arithmetic is learnable by a tiny model;
* byte-level pre-tokenisation means any text round-trips, including model garbage.
"""

from __future__ import annotations

from collections.abc import Iterable

from parallax.formats import ALL_SPECIAL_TOKENS

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"


def build_tokenizer(corpus: Iterable[str], vocab_size: int = 384):
    """Train a byte-level BPE on ``corpus`` and wrap it as a ``PreTrainedTokenizerFast``.

    >>> tok = build_tokenizer(["Q: 12+3\\nA: 15 #### 15"] * 10)
    >>> tok.convert_ids_to_tokens(tok("<Path>")["input_ids"])
    ['<Path>']
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD_TOKEN, EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ALL_SPECIAL_TOKENS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN)
    fast.padding_side = "left"  # generation pads prompts on the left
    return fast
