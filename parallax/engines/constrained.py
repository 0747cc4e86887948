"""Grammar-constrained decoding with xgrammar: the one token-bitmask masker every decode loop uses.

Two uses: the KV executor constrains every row by the format's EBNF from `parallax.formats.grammar` (the
one module that knows the tags), with the spelled-tag rules below; the hf engine's `generate`
constrains each row by the grammar it was given (`GrammarMasker(None, ...)`, `new_state(ebnf)`:
plain xgrammar, as vLLM's structured outputs apply it). Both draw through
`parallax.engines.sampling.grammar_draw`.
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

Two ways to use it (`parallax.engines.sampling.grammar_draw` picks):

* `mask(logits, states)`: fill every row's bitmask and set forbidden logits to -inf;
* speculative: draw from the unmasked logits, `check(state, token)` each draw, and mask +
  redraw only the rows whose draw was refused. Exact: for a valid t,
  P(t) = p(t) + (1 - Z) p(t) / Z = p(t) / Z with Z the valid mass, i.e. the masked distribution.
  `check` is xgrammar's `accept_token`, which agrees with the bitmask token for token (tested);
  a token it keeps stays accepted *provisionally* (`GrammarState.ahead`): the executor's
  `accept` of that token then costs nothing, anything else rolls it back (`release`). `check`
  may say "not sure" (False) for a valid token (one that starts spelling a tag, whose verdict
  needs the full mask); the executor then checks the draw against the mask before redrawing, so
  exactness never depends on `check` being complete, only on it being sound.

Logprobs under the grammar. The executor reports, and the learner recomputes, the log-softmax of
the model's own `logits / T` -- *unmasked* (before the grammar, bans and top-p), not the masked
distribution the token was drawn from (log p(t) - log Z, Z = the valid mass). Why this is the
number to put in GRPO/PPO ratios:
* the learner has no grammar. The masked logprob needs Z at every sampled token under the
  *current* weights, i.e. the per-token valid set (a V-bit mask per token) shipped to the learner
  or the grammar replayed there. Without it the learner's ratio at the behaviour weights would be
  Z, not 1, and the clip would act on the mask, not on the weight change;
* with unmasked logprobs engine and learner agree to float precision
  (tests/layouts/test_structured_consistency.py, test_executor.py): the ratio is exactly 1
  on-policy and the clip sees only the weight change. The masked ratio is this one times
  Z_old / Z_new, so the two losses agree on-policy and their gradients differ by A * grad log Z:
  the unmasked update also moves the mass the model itself puts on grammar-valid tokens (up for
  positive advantages, down for negative ones), which the masked update leaves to the grammar.
  That term vanishes as Z -> 1, i.e. once SFT has taught the format -- the regime RL runs in
  (the bench's `sampled_refused` shows how far a model is from it). A masked-policy learner would
  need the mask per sampled token; if that is ever wanted, ship it with the record;
* it is what makes speculative masking pay: the reported logprob never needs the mask.

`seconds` is the masker's CPU time (fills, checks, accepts; `time.thread_time`, like the executor's
`timing`), `calls` / `checks` count fully masked rows / speculatively checked draws: the bench's figures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from parallax.formats import FormatSpec, compile_grammar, get_spec


@dataclass
class GrammarState:
    """One request's grammar position: the matcher, and the trailing text that could start a tag."""

    matcher: object
    tail: str = ""
    ahead: int | None = None  # a token `check` accepted provisionally (committed by `accept`)


class GrammarMasker:
    """Compiled grammars for one tokenizer, and the batched masking step.

    With a format `spec`: its grammar is the default one, and spelled tags are refused as well (the
    module docstring). With `spec=None`: plain xgrammar for the EBNF texts states are made with.
    """

    def __init__(self, spec: FormatSpec | str | None, tokenizer, vocab_size: int):
        import xgrammar as xgr

        self._xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self._compiler = xgr.GrammarCompiler(info)
        self._compiled: dict[str, object] = {}  # EBNF text -> compiled grammar
        self.vocab_size = vocab_size
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)  # [B, ceil(V/32)] int32, grown on demand
        self._bits = torch.arange(32, dtype=torch.int32)
        self.seconds = 0.0  # CPU time spent filling masks, checking and accepting tokens
        self.calls = 0  # rows fully masked
        self.checks = 0  # sampled tokens checked speculatively (`check`)
        self.rejected = 0  # tokens the executor forced that the grammar refused (should stay 0)
        self.spec = None if spec is None else spec if isinstance(spec, FormatSpec) else get_spec(spec)
        if self.spec is None:
            self.compiled = None
            return
        self.compiled = compile_grammar(self.spec, tokenizer, compiler=self._compiler)
        n = len(tokenizer)
        self._text = [tokenizer.decode([i]) if i < n else "" for i in range(vocab_size)]
        self._tag_ids = {tokenizer.convert_tokens_to_ids(t) for t in self.spec.tags}
        self._prefixes = {t[:i] for t in self.spec.tags for i in range(1, len(t))}
        self._banned: dict[str, tuple[torch.Tensor, frozenset[int]]] = {}  # tail -> ([V] bool, same as a set)
        # Tokens ending in a tag prefix ('<', ' </'): harmless in free text (the grammar lets text
        # go on after '<'), a dead end where only tags and whitespace may follow.
        starts = [i not in self._tag_ids and self.spec.pending_tag(t) != "" for i, t in enumerate(self._text)]
        self._starts_tag = torch.tensor(starts)  # [V] bool
        self._starts_tag_ids = frozenset(i for i, s in enumerate(starts) if s)
        plain = [i for i, t in enumerate(self._text) if t.strip() and "<" not in t and ">" not in t
                 and i not in self._tag_ids]
        self._plain = torch.tensor(plain, dtype=torch.long)  # tokens allowed wherever free text is

    def new_state(self, ebnf: str | None = None) -> GrammarState:
        """A matcher at the start of `ebnf` (compiled once per text), or of the format's grammar."""
        if ebnf is None:
            if self.compiled is None:
                raise ValueError("a masker without a format needs the EBNF of each state")
            return GrammarState(self._xgr.GrammarMatcher(self.compiled))
        if ebnf not in self._compiled:
            self._compiled[ebnf] = self._compiler.compile_grammar(ebnf)
        return GrammarState(self._xgr.GrammarMatcher(self._compiled[ebnf]))

    def fork(self, state: GrammarState) -> GrammarState:
        self.release(state)
        return GrammarState(state.matcher.fork(), state.tail)

    def accept(self, state: GrammarState, token: int) -> bool:
        """Advance `state` by `token` (sampled or forced); False if the grammar rejects it."""
        t0 = time.thread_time()
        if state.ahead is not None and state.ahead == token:  # `check` accepted it already
            state.ahead, ok = None, True
        else:
            self.release(state)
            ok = bool(state.matcher.accept_token(token))
        if self.spec is not None:
            state.tail = "" if token in self._tag_ids else self.spec.pending_tag(state.tail + self._text[token])
        self.seconds += time.thread_time() - t0
        return ok

    def check(self, state: GrammarState, token: int) -> bool:
        """True if `mask` would keep `token` for `state`. A kept token stays accepted provisionally:
        `accept(state, token)` commits it, any other use of `state` (or `release`) rolls it back.

        Sound, not complete: False also means "not sure" for a token that starts spelling a tag
        (allowed only where free text is, which needs the full mask to tell)."""
        t0 = time.thread_time()
        self.release(state)
        ok = self.spec is None or (token not in self._starts_tag_ids and token not in self._banned_after(state.tail)[1])
        if ok and state.matcher.accept_token(token):
            state.ahead = token
        else:
            ok = False
        self.checks += 1
        self.seconds += time.thread_time() - t0
        return ok

    def release(self, state: GrammarState) -> None:
        """Undo a provisional `check` (the checked token will not be emitted)."""
        if state.ahead is not None:
            state.matcher.rollback(1)
            state.ahead = None

    def allows_now(self, state: GrammarState, token: int) -> bool:
        """Whether the grammar lets `token` come next (xgrammar only, e.g. a closing tag); no state change."""
        self.release(state)
        ok = bool(state.matcher.accept_token(token))
        if ok:
            state.matcher.rollback(1)
        return ok

    def allowed(self, states: list[GrammarState]) -> torch.Tensor:
        """[S, V] bool: the tokens each state lets come next (grammar and spelled-tag rules)."""
        S = len(states)
        if self._bitmask.shape[0] < S:
            self._bitmask = self._xgr.allocate_token_bitmask(S, self.vocab_size)
        bitmask = self._bitmask[:S]
        for i, st in enumerate(states):
            self.release(st)
            st.matcher.fill_next_token_bitmask(bitmask, i)
        ok = ((bitmask[:, :, None] >> self._bits) & 1).view(S, -1)[:, : self.vocab_size].bool()  # [S, V]
        if self.spec is None:
            return ok
        structural = ~ok[:, self._plain].any(-1)  # [S] the grammar allows no free text here
        ok &= ~torch.stack([self._banned_after(st.tail)[0] for st in states])
        ok &= ~(structural[:, None] & self._starts_tag[None, :])
        return ok

    def mask(self, logits: torch.Tensor, states: list[GrammarState]) -> None:
        """Set to -inf, in place, every token a row's state forbids. logits: [S, V] float."""
        t0 = time.thread_time()
        ok = self.allowed(states).to(logits.device)
        logits.masked_fill_(~ok, float("-inf"))
        self.seconds += time.thread_time() - t0
        self.calls += len(states)

    def _banned_after(self, tail: str) -> tuple[torch.Tensor, frozenset[int]]:
        """Non-tag tokens that would spell (part of) a tag after `tail`, as [V] bool and as a set.
        Cached per tail."""
        if tail not in self._banned:
            bad = torch.zeros(self.vocab_size, dtype=torch.bool)
            for i, text in enumerate(self._text):
                if i in self._tag_ids or not text:
                    continue
                joined = tail + text
                if any(t in joined for t in self.spec.tags) or (tail and joined in self._prefixes):
                    bad[i] = True
            self._banned[tail] = (bad, frozenset(bad.nonzero().squeeze(-1).tolist()))
        return self._banned[tail]
