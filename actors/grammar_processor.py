"""Grammar-constrained decoding with xgrammar: a token-bitmask processor for the HF backend.

The grammar is the format's EBNF from `formats.grammar` (the one module that knows the tags).
Each engine request owns one `GrammarState` (an `xgrammar.GrammarMatcher` and a short text tail);
a branch request starts from a fork of its parent's state (taken right after the fork point),
and the continuation after a join feeds its state every branch's tokens in text order — the
same string the grammar accepts sequentially, so both modes are held to one grammar.

Single-token tags. xgrammar matches strings, so it would also accept a tag spelled in pieces
(`<`, `Out`, `lines>`), which the executor — watching tag *tokens* — would not see. The masker
therefore also forbids spelling a tag: a token whose text contains a tag, or that extends a
pending tag prefix (`tail`, e.g. `<Out`) into a longer prefix or a whole tag, and, where only
tags and whitespace may come (no plain text token is allowed), a token that would start
spelling one. Text may still contain `<` (`x < 3`); only spelled tags are excluded.

`GrammarMasker.mask(logits, states)` fills one bitmask row per state and applies it in place.
It times itself (`seconds`, `calls`) so the bench can report the masking cost per token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from formats import compile_grammar
from formats.parser import resolve_spec
from formats.spec import FormatSpec


@dataclass
class GrammarState:
    """One request's grammar position: the matcher, and the trailing text that could start a tag."""

    matcher: object
    tail: str = ""


class GrammarMasker:
    """Compiled grammar of one format for one tokenizer, and the batched masking step."""

    def __init__(self, spec: FormatSpec | str, tokenizer, vocab_size: int):
        import xgrammar as xgr

        self._xgr = xgr
        self.spec = resolve_spec(spec)
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.compiled = compile_grammar(self.spec, tokenizer, compiler=xgr.GrammarCompiler(info))
        self.vocab_size = vocab_size
        n = len(tokenizer)
        self._text = [tokenizer.decode([i]) if i < n else "" for i in range(vocab_size)]
        self._tag_ids = {tokenizer.convert_tokens_to_ids(t) for t in self.spec.tags}
        self._prefixes = {t[:i] for t in self.spec.tags for i in range(1, len(t))}
        self._banned: dict[str, torch.Tensor] = {}  # tail -> [V] bool
        # Tokens ending in a tag prefix ('<', ' </'): harmless in free text (the grammar lets text
        # go on after '<'), a dead end where only tags and whitespace may follow.
        self._starts_tag = torch.tensor([i not in self._tag_ids and self._pending(t) != "" for i, t in
                                         enumerate(self._text)])  # [V] bool
        plain = [i for i, t in enumerate(self._text) if t.strip() and "<" not in t and ">" not in t
                 and i not in self._tag_ids]
        self._plain = torch.tensor(plain, dtype=torch.long)  # tokens allowed wherever free text is
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)  # [B, ceil(V/32)] int32
        self.seconds = 0.0  # time spent filling and applying masks
        self.calls = 0  # rows masked
        self.rejected = 0  # tokens the executor forced that the grammar refused (should stay 0)

    def new_state(self) -> GrammarState:
        return GrammarState(self._xgr.GrammarMatcher(self.compiled))

    def fork(self, state: GrammarState) -> GrammarState:
        return GrammarState(state.matcher.fork(), state.tail)

    def accept(self, state: GrammarState, token: int) -> bool:
        """Advance `state` by `token` (sampled or forced); False if the grammar rejects it."""
        t0 = time.perf_counter()
        ok = bool(state.matcher.accept_token(token))
        state.tail = "" if token in self._tag_ids else self._pending(state.tail + self._text[token])
        self.seconds += time.perf_counter() - t0
        return ok

    def mask(self, logits: torch.Tensor, states: list[GrammarState]) -> None:
        """Set to -inf, in place, every token a row's state forbids. logits: [S, V] float (CPU)."""
        t0 = time.perf_counter()
        S = logits.shape[0]
        if self._bitmask.shape[0] < S:
            self._bitmask = self._xgr.allocate_token_bitmask(S, self.vocab_size)
        bitmask = self._bitmask[:S]
        for i, st in enumerate(states):
            st.matcher.fill_next_token_bitmask(bitmask, i)
        self._xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device))
        dev = logits.device
        banned = torch.stack([self._banned_after(st.tail) for st in states]).to(dev)  # [S, V]
        structural = ~torch.isfinite(logits[:, self._plain.to(dev)]).any(-1)  # [S] no free text allowed
        banned |= structural[:, None] & self._starts_tag.to(dev)[None, :]
        logits.masked_fill_(banned, float("-inf"))
        self.seconds += time.perf_counter() - t0
        self.calls += S

    def _pending(self, text: str) -> str:
        """Longest suffix of `text` that is a proper prefix of a tag ('' if none)."""
        for i in range(max(0, len(text) - 16), len(text)):
            if text[i:] in self._prefixes:
                return text[i:]
        return ""

    def _banned_after(self, tail: str) -> torch.Tensor:
        """[V] bool: non-tag tokens that would spell (part of) a tag after `tail`. Cached per tail."""
        if tail not in self._banned:
            bad = torch.zeros(self.vocab_size, dtype=torch.bool)
            for i, text in enumerate(self._text):
                if i in self._tag_ids or not text:
                    continue
                joined = tail + text
                if any(t in joined for t in self.spec.tags) or (tail and joined in self._prefixes):
                    bad[i] = True
            self._banned[tail] = bad
        return self._banned[tail]
