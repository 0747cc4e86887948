"""Hugging Face transformers engine: batched sampling with a KV cache (the CPU backend).

A hand-written decode loop rather than `model.generate`, because the learner must score
exactly what was sampled: we control the sampling distribution (logits / T, top-p), record
each sampled token's logprob under it, and stop per row on EOS / stop tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from actors.decode_kv import KVDecoder
from actors.engine import register_engine
from orchestrator.batch import Completion, SamplingParams


def _left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask  # [B, P], [B, P]


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask tokens outside the smallest set whose probability mass reaches top_p."""
    sorted_logits, idx = logits.sort(dim=-1, descending=True)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    drop = cum - sorted_logits.softmax(-1) >= top_p  # keep the token that crosses top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, idx, sorted_logits)


@register_engine("hf")
class HFEngine:
    """Sampling engine over a transformers causal LM on CPU (or one GPU)."""

    def __init__(self, model_path: str, dtype: str = "float32", device: str = "cpu", max_batch_size: int = 256):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype)).to(device)
        self.model.eval()
        self.device = device
        self.max_batch_size = max_batch_size
        self.eos_id = self.tokenizer.eos_token_id
        self.stop_ids = frozenset({self.eos_id})  # ids generate always stops on
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_id
        self._executors: dict[str, Any] = {}  # repr(ExecutorConfig) -> ParallelExecutor (grammar compiled once)

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
        # Tied embeddings may be absent from the learner's dict; anything else is a bug.
        missing = [k for k in missing if k != "lm_head.weight"]
        if missing or unexpected:
            raise ValueError(f"weight sync mismatch: missing={missing[:5]} unexpected={unexpected[:5]}")

    def parameters_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def execute(self, prompts: list[list[int]], params: SamplingParams, cfg) -> list:
        """Parallel-format rollout on this engine's model: `actors.executor.ParallelExecutor.run`.

        `cfg` is an `ExecutorConfig` (executed fork/join or sequential mode, caps, grammar).
        Returns one `Execution` (token ids, logprobs, finish reason, `ExecutionRecord`) per prompt.
        Weights loaded with `load_weights` apply: the executor shares the model.
        """
        from actors.executor import ParallelExecutor

        key = repr(cfg)
        if key not in self._executors:
            self._executors[key] = ParallelExecutor.from_engine(self, cfg)
        return self._executors[key].run(prompts, params)

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams, limits: list[int] | None = None,
                 processor: Callable[[list[list[int]], torch.Tensor], torch.Tensor] | None = None,
                 grammar: str | list[str | None] | None = None) -> list[Completion]:
        """One completion per prompt. `limits`: each prompt's own max new tokens (<= params'). `processor`
        (tests, bench: `actors.executor_requests.replay_processor`) maps (tokens each row generated so far,
        logits / T [B, V]) to the logits the token is drawn from; logprobs stay the model's.
        `grammar`: an EBNF grammar (xgrammar dialect, `formats.ebnf`) for every prompt, or one per
        prompt (None: free), applied as a token bitmask, as vLLM's structured outputs do. Logprobs are
        the model's unmasked `logits / T` (`actors/grammar_processor.py` says why)."""
        if limits is not None and (len(limits) != len(prompts) or min(limits, default=1) < 1):
            raise ValueError("limits needs one value >= 1 per prompt")
        grammars = grammar if isinstance(grammar, list) else [grammar] * len(prompts)
        if len(grammars) != len(prompts):
            raise ValueError("grammar needs one entry per prompt")
        out: list[Completion] = []
        gen = torch.Generator().manual_seed(params.seed)
        for i in range(0, len(prompts), self.max_batch_size):
            chunk = slice(i, i + self.max_batch_size)
            lim = limits[chunk] if limits is not None else None
            out.extend(self._generate_batch(prompts[chunk], params, gen, lim, processor, grammars[chunk]))
        return out

    def _matchers(self, grammars: list[str | None]) -> list | None:
        """One xgrammar matcher per row with a grammar (compiled once per grammar text)."""
        if not any(grammars):
            return None
        import xgrammar as xgr

        if not hasattr(self, "_grammar_compiler"):
            vocab = self.model.config.vocab_size
            info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=vocab)
            self._grammar_compiler, self._compiled = xgr.GrammarCompiler(info), {}
        for g in set(grammars) - {None} - set(self._compiled):
            self._compiled[g] = self._grammar_compiler.compile_grammar(g)
        return [xgr.GrammarMatcher(self._compiled[g]) if g else None for g in grammars]

    def _generate_batch(self, prompts: list[list[int]], params: SamplingParams, gen: torch.Generator,
                        limits: list[int] | None = None, processor=None, grammars: list | None = None):
        ids, mask = _left_pad(prompts, self.pad_id)
        ids, mask = ids.to(self.device), mask.to(self.device)
        B = ids.shape[0]
        stops = torch.tensor(sorted({self.eos_id, *params.stop_token_ids}), device=self.device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, P] positions ignore left padding
        cap = torch.tensor(limits if limits is not None else [params.max_new_tokens] * B)  # [B] per-row max
        T = int(cap.max())
        tokens = torch.zeros((B, T), dtype=torch.long)
        logps = torch.zeros((B, T))
        lengths = cap.clone()
        done = torch.zeros(B, dtype=torch.bool, device=self.device)
        decoder = KVDecoder(self.model)
        matchers = self._matchers(grammars or [None] * B)
        # draw unmasked, check the draw, mask and redraw only refused rows: exact (p / Z) unless a
        # processor or top-p renormalises after the mask (actors/grammar_processor.py)
        speculate = params.top_p >= 1.0 and (processor is None or getattr(processor, "commutes_with_mask", False))
        raw = decoder.prefill(ids, mask, pos)  # [B, V]
        step_pos = pos[:, -1:]
        for t in range(T):
            logits = raw / params.temperature  # [B, V]
            if params.top_p < 1.0 and matchers is None:
                logits = _top_p_filter(logits, params.top_p)
            # reported: the sampling distribution; under a grammar the model's own (unmasked, no top-p),
            # always finite for whatever the grammar lets through (actors/grammar_processor.py)
            logp = logits.log_softmax(-1)  # [B, V]
            if matchers is not None and not speculate:  # the grammar limits the draw, not the reported logprob
                logits = self._grammar_mask(logits, matchers, done)
                if params.top_p < 1.0:  # top-p over what the grammar allows, as the KV executor draws
                    logits = _top_p_filter(logits, params.top_p)
            gen_so_far = None
            if processor is not None:  # each row's tokens so far (a finished row: up to its stop)
                upto = torch.minimum(lengths, torch.tensor(t)).tolist()
                gen_so_far = [row[:n] for row, n in zip(tokens[:, :t].tolist(), upto)]
                draw = processor(gen_so_far, logits).log_softmax(-1)
            elif matchers is not None and not speculate:
                draw = logits.log_softmax(-1)
            else:
                draw = logp
            if params.greedy:
                nxt = draw.argmax(-1)
            else:
                nxt = torch.multinomial(draw.exp().cpu(), 1, generator=gen).squeeze(-1).to(self.device)
            nxt = torch.where(done, torch.full_like(nxt, self.pad_id), nxt)  # [B]
            if matchers is not None:
                redo = None if processor is None else (lambda rows, x, g=gen_so_far: processor([g[b] for b in rows], x))
                nxt = self._grammar_accept(nxt, logits, matchers, done, speculate, params, gen, redo)
            tokens[:, t] = nxt.cpu()
            logps[:, t] = logp.gather(-1, nxt[:, None]).squeeze(-1).cpu()
            hit = torch.isin(nxt, stops) & ~done
            lengths[hit.cpu()] = t + 1
            done |= hit | (cap.to(self.device) == t + 1)  # a row at its own limit stops ("length")
            if bool(done.all()) or t + 1 == T:
                break
            step_pos = step_pos + 1
            raw = decoder.step(nxt[:, None], step_pos)  # finished rows decode pads, ignored
        results, stop_ids = [], set(stops.tolist())
        for b in range(B):
            n = int(lengths[b])
            stopped = int(tokens[b, n - 1]) in stop_ids
            results.append(Completion(tokens[b, :n].tolist(), logps[b, :n].tolist(), "stop" if stopped else "length"))
        return results

    def _grammar_accept(self, nxt: torch.Tensor, logits: torch.Tensor, matchers: list, done: torch.Tensor,
                        speculate: bool, params: SamplingParams, gen: torch.Generator, processor=None) -> torch.Tensor:
        """Advance every live row's matcher by its token; speculative: a refused draw is redrawn masked
        (through `processor(rows, logits)` when one shapes the draw; it must commute with the mask)."""
        live = [b for b, m in enumerate(matchers) if m is not None and not bool(done[b])]
        refused = [b for b in live if not matchers[b].accept_token(int(nxt[b]))]  # refused: state unchanged
        if refused and not speculate:
            raise RuntimeError(f"rows {refused}: the grammar refused tokens its mask allowed")
        if refused:
            sub = self._grammar_mask(logits, matchers, done, refused)[refused]  # [R, V]
            if processor is not None:
                sub = processor(refused, sub)
            if params.greedy:
                new = sub.argmax(-1)
            else:
                new = torch.multinomial(sub.softmax(-1).cpu(), 1, generator=gen).squeeze(-1).to(nxt.device)
            nxt = nxt.clone()
            nxt[refused] = new
            for b in refused:
                if not matchers[b].accept_token(int(nxt[b])):
                    raise RuntimeError(f"row {b}: the grammar refused token {int(nxt[b])} its mask allowed")
        return nxt

    def _grammar_mask(self, logits: torch.Tensor, matchers: list, done: torch.Tensor,
                      rows: list[int] | None = None) -> torch.Tensor:
        """`logits` [B, V] with every token a row's grammar forbids at -inf (a copy; only `rows`, default
        every live row with a grammar)."""
        import xgrammar as xgr

        if rows is None:
            rows = [b for b, m in enumerate(matchers) if m is not None and not bool(done[b])]
        if not rows:
            return logits
        bitmask = xgr.allocate_token_bitmask(len(matchers), logits.shape[-1])
        for b in rows:
            matchers[b].fill_next_token_bitmask(bitmask, b)
        out = logits.clone()
        xgr.apply_token_bitmask_inplace(out, bitmask.to(out.device), indices=rows)
        return out
