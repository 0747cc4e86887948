"""Grammar-constrained decoding with xgrammar: a token-bitmask processor for the HF backend.

The grammar is the format's EBNF from `formats.grammar` (the one module that knows the tags).
Each engine request owns one `xgrammar.GrammarMatcher`; a branch request starts from a fork of
its parent's matcher (taken right after the fork point), and the continuation after a join
feeds its matcher every branch's tokens in text order — the same string the grammar accepts
sequentially, so executed and sequential modes are held to one grammar.

`GrammarMasker.mask(logits, matchers)` fills one bitmask row per matcher and applies it in place.
It times itself (`seconds`, `calls`) so the bench can report the masking cost per token.
"""

from __future__ import annotations

import time

import torch

from formats import FormatSpec, compile_grammar


class GrammarMasker:
    """Compiled grammar of one format for one tokenizer, and the batched masking step."""

    def __init__(self, spec: FormatSpec | str, tokenizer, vocab_size: int):
        import xgrammar as xgr

        self._xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.compiled = compile_grammar(spec, tokenizer, compiler=xgr.GrammarCompiler(info))
        self.vocab_size = vocab_size
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)  # [B, ceil(V/32)] int32, regrown on demand
        self.seconds = 0.0  # time spent filling and applying masks
        self.calls = 0  # rows masked

    def new_matcher(self):
        return self._xgr.GrammarMatcher(self.compiled)

    def accept(self, matcher, token: int) -> bool:
        """Advance `matcher` by `token` (sampled or forced); False if the grammar rejects it."""
        t0 = time.perf_counter()
        ok = bool(matcher.accept_token(token))
        self.seconds += time.perf_counter() - t0
        return ok

    def mask(self, logits: torch.Tensor, matchers: list) -> None:
        """Set to -inf, in place, every token a row's matcher forbids. logits: [S, V] float (CPU)."""
        t0 = time.perf_counter()
        S = logits.shape[0]
        if self._bitmask.shape[0] < S:
            self._bitmask = self._xgr.allocate_token_bitmask(S, self.vocab_size)
        bitmask = self._bitmask[:S]
        for i, m in enumerate(matchers):
            m.fill_next_token_bitmask(bitmask, i)
        self._xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device))
        self.seconds += time.perf_counter() - t0
        self.calls += S
