"""Hugging Face transformers engine: batched sampling with a KV cache (the CPU backend).

A hand-written decode loop rather than `model.generate`, because the learner must score
exactly what was sampled: we control the sampling distribution (logits / T, top-p), record
each sampled token's logprob under it, and stop per row on EOS / stop tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from parallax.contract.batch import Completion, SamplingParams
from parallax.engines.decode_kv import KVDecoder
from parallax.engines.sampling import draw as draw_token
from parallax.engines.sampling import grammar_draw, left_pad, top_p_filter
from parallax.weightsync.receive import bind_into, copy_into, load_state, own_parameters, receive


class HFEngine:
    """Sampling engine over a transformers causal LM on CPU (or one GPU)."""

    def __init__(self, model_path: str, dtype: str = "float32", device: str = "cpu", max_batch_size: int = 256,
                 pack: bool = True):
        """`pack`: a bf16 model on CPU runs its linear layers on weights prepacked for oneDNN, bit-equal and
        faster (`parallax.engines.packed`); False: plain `F.linear` (the bench's comparison)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from parallax.engines import packed

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype)).to(device)
        self.model.eval()
        self.device = device
        self.max_batch_size = max_batch_size
        self.eos_id = self.tokenizer.eos_token_id
        self.stop_ids = frozenset({self.eos_id})  # ids generate always stops on
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_id
        self._masker = None  # GrammarMasker for `generate(grammar=...)`, built on first use
        self.packed = (packed.PackedLinears(self.model) if pack and str(device) == "cpu" and dtype == "bfloat16"
                       and packed.available() else None)

    def _weights_changed(self) -> None:
        """Every load of weights calls this: packed copies are made again from the new ones on first use."""
        if self.packed is not None:
            self.packed.drop()

    def load_weights(self, state_dict: dict[str, Any]) -> int:
        self._own()
        self._weights_changed()
        return load_state(self.model, state_dict)

    def _own(self) -> None:
        """Parameters in memory of the engine's own before a path that copies into them (`receive_shared`
        on CPU binds them to the learner rank's buffers instead)."""
        if getattr(self, "_bound", False):
            own_parameters(self.model)
            self._bound = False

    sync_ranks = 1  # ranks this engine holds in the weight-sync group

    def open_sync(self, address: str, rank: int, world_size: int, backend: str, timeout_s: float) -> None:
        from parallax.weightsync.sync_group import SyncGroup

        self.close_sync()
        self._sync = SyncGroup(address, rank, world_size, backend, timeout_s)

    def close_sync(self) -> None:
        if getattr(self, "_sync", None) is not None:
            self._sync.close()
        self._sync = None

    def close(self) -> None:
        self.close_sync()

    @torch.no_grad()
    def receive_weights(self, plan: dict) -> int:
        """Take the learner's broadcast, copying each tensor into place (`parallax.weightsync.receive`); bytes
        received."""
        self._own()
        self._weights_changed()
        params = self.model.state_dict()
        return receive(self._sync, plan, lambda weights, wanted: copy_into(params, weights, wanted))

    @torch.no_grad()
    def receive_shared(self, handles: list[bytes], plan: dict) -> int:
        """The same-device hand-off (`parallax.weightsync.handoff`); bytes. On CPU the parameters are bound to
        the staged buffers themselves, no copy (the learner rank writes the other of its two sets next push,
        and the driver waits for this call first); on a GPU each staged tensor is copied into place (the rank
        frees its buffers after)."""
        from parallax.weightsync.handoff import receive_shared

        self._weights_changed()
        if str(self.device) == "cpu":
            self._bound = True
            return receive_shared(handles, plan, lambda weights, wanted: bind_into(self.model, weights, wanted))
        params = self.model.state_dict()
        return receive_shared(handles, plan, lambda weights, wanted: copy_into(params, weights, wanted))

    def parameters_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def sleep(self, level: int = 1) -> None:
        """Give the device back while a colocated learner updates (`rollout.colocate`): the parameters'
        storage is freed; level 1 keeps a host copy that `wake_up` restores, level 2 keeps nothing (the
        next weight sync fills them). This engine holds no KV cache between calls."""
        if getattr(self, "_asleep", None) is not None:
            return
        self._weights_changed()
        params = dict(self.model.named_parameters())  # a tied weight: one parameter, one entry
        # per parameter: its host copy (level 1), or its shape for wake_up to allocate (level 2)
        self._asleep = {n: p.data.to("cpu", copy=True) if level == 1 else p.shape for n, p in params.items()}
        for p in params.values():
            p.data = p.data.new_empty((0,))  # the model keeps its parameters, without storage
        if str(self.device).startswith("cuda"):
            torch.cuda.empty_cache()

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Storage for the parameters again (tags: "weights"; "kv_cache" has nothing to restore here): the
        level-1 host copy, or after level 2 uninitialised memory of the right shapes, for the sync to fill."""
        if getattr(self, "_asleep", None) is None or (tags is not None and "weights" not in tags):
            return
        for n, p in self.model.named_parameters():
            saved = self._asleep[n]
            p.data = saved.to(self.device) if isinstance(saved, torch.Tensor) else torch.empty(
                saved, dtype=p.dtype, device=self.device)
        self._asleep = None

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams, limits: list[int] | None = None,
                 grammar: str | list[str | None] | None = None,
                 processor: Callable[[list[list[int]], torch.Tensor], torch.Tensor] | None = None) -> list[Completion]:
        """One completion per prompt. `limits`: each prompt's own max new tokens (<= params'). `processor`
        (test doubles: `tests/doubles/replay.py`, through `parallax.executors.base.engine_processor`) maps (tokens each
        row generated so far, logits / T [B, V]) to the logits the token is drawn from; logprobs stay the model's.
        `grammar`: an EBNF grammar (xgrammar dialect, `parallax.formats.ebnf`) for every prompt, or one per
        prompt (None: free), applied as a token bitmask, as vLLM's structured outputs do. Logprobs are
        the model's unmasked `logits / T` (`parallax/engines/constrained.py` says why)."""
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

    def _states(self, grammars: list[str | None]) -> list | None:
        """One grammar state per row with a grammar (each text compiled once), None for free rows."""
        if not any(grammars):
            return None
        if self._masker is None:
            from parallax.engines.constrained import GrammarMasker

            self._masker = GrammarMasker(None, self.tokenizer, self.model.config.vocab_size)
        return [self._masker.new_state(g) if g else None for g in grammars]

    def _generate_batch(self, prompts: list[list[int]], params: SamplingParams, gen: torch.Generator,
                        limits: list[int] | None = None, processor=None, grammars: list | None = None):
        ids, mask = left_pad(prompts, self.pad_id)
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
        states = self._states(grammars or [None] * B)
        # draw unmasked, check the draw, mask and redraw only refused rows: exact (p / Z) unless a
        # processor or top-p renormalises after the mask (parallax/engines/constrained.py)
        speculate = params.top_p >= 1.0 and (processor is None or getattr(processor, "commutes_with_mask", False))
        raw = decoder.prefill(ids, mask, pos)  # [B, V]
        step_pos = pos[:, -1:]
        for t in range(T):
            logits = raw / params.temperature  # [B, V]
            if params.top_p < 1.0 and states is None:
                logits = top_p_filter(logits, params.top_p)
            # reported: the sampling distribution; under a grammar the model's own (unmasked, no top-p),
            # always finite for whatever the grammar lets through (parallax/engines/constrained.py)
            logp = logits.log_softmax(-1)  # [B, V]
            so_far = None
            if processor is not None:  # each row's tokens so far (a finished row: up to its stop)
                upto = torch.minimum(lengths, torch.tensor(t)).tolist()
                so_far = [row[:n] for row, n in zip(tokens[:, :t].tolist(), upto)]

            def draw(rows: list[int], x: torch.Tensor, so_far=so_far, logp=logp) -> torch.Tensor:
                if states is not None and params.top_p < 1.0:  # top-p over what the grammar allows
                    x = top_p_filter(x, params.top_p)
                if processor is not None:
                    x = processor([so_far[b] for b in rows], x)
                d = x.log_softmax(-1) if (processor is not None or states is not None) else logp[rows]
                if params.greedy:
                    return d.argmax(-1)
                return draw_token(d.exp(), gen, params.sampler).to(self.device)

            live = None if states is None else [st if not bool(done[b]) else None for b, st in enumerate(states)]
            nxt = draw(list(range(B)), logits) if live is None else grammar_draw(logits, live, self._masker, draw,
                                                                               speculate)
            nxt = torch.where(done, torch.full_like(nxt, self.pad_id), nxt)  # [B]
            for b, st in enumerate(live or []):
                if st is not None and not self._masker.accept(st, int(nxt[b])):
                    raise RuntimeError(f"row {b}: the grammar refused token {int(nxt[b])} its mask allowed")
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
