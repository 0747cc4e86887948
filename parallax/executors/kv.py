"""KV executor: real fork/join execution of parallel branches in one decode loop (hf engine).

Algorithm (executed mode). Every trajectory starts as one *main request*. Sequences of all
trajectories decode together, one token per sequence per step (`DecodeBatch`). When a request emits a
fork point — Parason: `</Outlines>` closing n outline entries; Parallel-R1: `<Parallel>`, with
n = `num_paths` because that format never announces its paths — the token is fed once more (so
the shared prefix holds it), the request is suspended and n *branch requests* start, each with a
copy of the prefix KV (computed once), its opening tag forced, and positions continuing from the
prefix length (every branch starts at the same position: "multiverse" positions); a Parason
thread then gets its *header* forced — its outline entry's tokens and a newline — so each thread
knows which entry it serves (`parallax/executors/tracker.py`, "Thread headers"). Branch sequences of
all trajectories decode in the same batch. A branch ends at its closing tag (fed, so its KV is
complete). When all n branches ended, the *continuation* request starts: its KV is the prefix
followed by every branch's own KV *as computed in its branch*, concatenated along time (keys
carry RoPE already), its positions continue from prefix_len + max branch length (the critical
path: position ids count critical-path tokens), and the executor forces the join tag
(Parason `</Parallel>`; Parallel-R1 where `spec.summary_placement` puts its summary: `</Parallel><Summary>`,
or `<Summary>` and then `</Parallel>` after `</Summary>`).
AND (Subtask) and OR (Trial) joins differ in meaning, not mechanics: every branch's full trace
stays in the history either way. Branch requests may fork again (Parason nesting).

Sequential mode ("Seen", causal) runs the same tracker in one request per trajectory: it writes
the same format with the same forced tags and headers, so both modes can be compared on the same
model and, for the same sampled tokens, give the same text.

Caps: `spec.max_branches` entries per block (then `</Outlines>` is forced), `spec.max_depth`
(a further `<Parallel>` is banned), `max_branch_tokens` per branch request and
`params.max_new_tokens` per trajectory (then closing mode forces the closing tags; a capped
trajectory finishes with "length"). EOS (or a stop token) inside a block is not kept: the
innermost branch body is closed instead (outside any branch body: everything, then the
trajectory stops with "stop"), identically in both modes.

Logprobs and forced tokens: `parallax/executors/base.py`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from parallax.contract.batch import SamplingParams
from parallax.contract.config import ExecutorConfig
from parallax.engines.sampling import grammar_draw, sample, top_p_filter
from parallax.executors.base import Chain, Execution, ExecutorBase, Group, Processor, Traj
from parallax.executors.decode_batch import DecodeBatch, RequestState
from parallax.executors.record import prompt_segment
from parallax.executors.tracker import Tracker


@dataclass(eq=False)
class _Seq(Chain, RequestState):
    """A request of the decode loop: its KV history (`RequestState`) and its chain (`parallax.executors.base.Chain`)."""

    pending: str = ""  # "fork" | "done": act after the next step feeds the token
    fork_n: int = 0
    matcher: object | None = None  # GrammarState when decoding under the grammar


class KVExecutor(ExecutorBase):
    """Runs trajectories in executed or sequential mode over a transformers causal LM."""

    speculative_grammar = True  # grammar: check the unmasked draw, mask only refused sequences (exact)

    def __init__(self, model, tokenizer, cfg: ExecutorConfig, fmt: str = "parason",
                 processor: Processor | None = None):
        super().__init__(tokenizer, cfg, fmt, processor)
        self.model = model
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos
        self.grammar = None
        if cfg.grammar:
            from parallax.engines.constrained import GrammarMasker

            self.grammar = GrammarMasker(self.spec, tokenizer, model.config.vocab_size)
        # CPU seconds of the decoding thread (time.thread_time: preemption on a shared machine does not count)
        self.timing = {"decode": 0.0, "regroup": 0.0, "sample": 0.0}
        self.shapes: list[tuple[int, int, bool]] = []  # the last run's decode steps (see DecodeBatch.shapes)

    @classmethod
    def from_engine(cls, engine, cfg: ExecutorConfig, fmt: str = "parason",
                    processor: Processor | None = None) -> KVExecutor:
        """Share an `HFEngine`'s model and tokenizer (weights synced into the engine apply here too)."""
        return cls(engine.model, engine.tokenizer, cfg, fmt, processor)

    @torch.no_grad()
    def run(self, prompts: list[list[int]], params: SamplingParams) -> list[Execution]:
        """One trajectory per prompt, in order."""
        self._check_run(prompts, params)
        self._params, self._gen, self._next_request = params, torch.Generator().manual_seed(params.seed), 0
        batch = DecodeBatch(self.model, self.pad)
        self.shapes = batch.shapes  # (sequences, width, padded) per decode step, for bench/bench_executor.py
        t0 = time.thread_time()
        logits = batch.prefill(prompts)
        self.timing["decode"] += time.thread_time() - t0
        trajs = [Traj(i) for i in range(len(prompts))]
        seqs = [self._main_seq(t, p) for t, p in zip(trajs, prompts)]
        batch.adopt(seqs)
        incoming = self._advance(seqs, logits)
        while True:
            members = [r for r in batch.seqs if r.live]
            if incoming or len(members) * 2 < len(batch.seqs):
                if not members and not incoming:
                    break
                t0 = time.thread_time()
                batch.regroup(members + incoming)
                self.timing["regroup"] += time.thread_time() - t0
            if not any(r.live for r in batch.seqs):
                break
            t0 = time.thread_time()
            logits = batch.step()
            self.timing["decode"] += time.thread_time() - t0
            incoming = self._advance(batch.seqs, logits, batch)
        return [self._finish(t) for t in trajs]

    # ---- one step's bookkeeping ------------------------------------------------------------
    def _advance(self, seqs: list[_Seq], logits: torch.Tensor, batch: DecodeBatch | None = None) -> list[_Seq]:
        """Act on fed fork/close points, then give every live sequence its next token. Returns new ones."""
        incoming: list[_Seq] = []
        for r in seqs:
            if r.live and r.pending:
                incoming += self._fork(r, batch) if r.pending == "fork" else self._branch_done(r, batch)
        want = [i for i, r in enumerate(seqs) if r.live and not r.forced and
                (not r.tracker.closing or self._mid_character(r))]
        sampled = dict(zip(want, zip(*self._sample([seqs[i] for i in want], logits[want])))) if want else {}
        for i, r in enumerate(seqs):
            if not r.live:
                continue
            if i in sampled:
                self._take_sample(r, *sampled[i])
            else:
                self._take_forced(r)
        return [r for r in incoming if r.live]

    def _mid_character(self, r: _Seq) -> bool:
        """Closing under the grammar, but the closing tag cannot come yet: the text ends inside a
        multi-byte character (byte-level tokens split them). Sample, masked, until it can."""
        tok = r.tracker.closing_token()
        return r.matcher is not None and tok is not None and not self.grammar.allows_now(r.matcher, tok)

    def _take_sample(self, r: _Seq, tok: int, logprob: float) -> None:
        if tok in {self.eos, *self._params.stop_token_ids}:
            if r.tracker.in_main_text:
                self._emit(r, tok, logprob)
                self._end(r, "stop")
                return
            if r.matcher is not None:
                self.grammar.release(r.matcher)  # the stop token is not emitted
            self._eos_in_block(r)
            self._take_forced(r)
            return
        self._emit(r, tok, logprob)

    def _take_forced(self, r: _Seq) -> None:
        tok = r.forced.popleft() if r.forced else r.tracker.closing_token()
        if tok is None:  # closing mode reached the main chain: the trajectory ends here
            self._end(r, self._closed_reason(r.traj))
            return
        self._emit(r, tok, None)

    def _emit(self, r: _Seq, tok: int, logprob: float | None) -> None:
        """Append `tok` to the sequence (sampled when `logprob` is set) and let the tracker react."""
        self._record(r, tok, logprob, r.pos)
        r.feed = tok
        if r.matcher is not None and not self.grammar.accept(r.matcher, tok):
            self.grammar.rejected += 1
            r.matcher = None  # a forced tag the grammar rejects: keep going unconstrained
        ev = r.tracker.observe(tok)
        r.forced.extend(ev.force)
        if ev.fork:
            r.pending, r.fork_n = "fork", ev.fork
        elif ev.branch_done:
            r.pending = "done"
        self._check_caps(r)

    # ---- fork and join ---------------------------------------------------------------------
    def _fork(self, r: _Seq, batch: DecodeBatch) -> list[_Seq]:
        """`r` fed its fork point: suspend it and start its branches from its history."""
        r.live, r.pending = False, ""
        group = Group(r, r.fork_n, kv=batch.history(r))
        children = []
        for k in range(r.fork_n):
            tracker, open_tag = r.tracker.branch(k)
            child = self._new_seq(r.traj, tracker, open_tag, pos=r.pos, length=r.length, kv=group.kv,
                                  role=r.role + (r.forks, k), role_tokens=[], segs=list(r.segs),
                                  matcher=self.grammar.fork(r.matcher) if r.matcher is not None else None)
            child.group, child.k = group, k
            children.append(child)
        r.forks += 1
        return children

    def _branch_done(self, r: _Seq, batch: DecodeBatch) -> list[_Seq]:
        """Branch `r` fed its closing tag; when it is the last of its block, start the continuation:
        its KV is the prefix followed by every branch's own columns (as computed in its branch)."""
        r.pending = ""
        group = r.group
        if not self._branch_ended(r, batch.history(r)):
            return []
        p, n0 = group.parent, group.parent.length
        done, segs, forced = self._joined(group)
        kv = [(torch.cat([k] + [h[li][0][:, n0:] for _, h in done], dim=1),  # [Hkv, n0 + sum(len_k), D]
               torch.cat([v] + [h[li][1][:, n0:] for _, h in done], dim=1))
              for li, (k, v) in enumerate(group.kv)]
        matcher = p.matcher
        branch_tokens = [tok for b, _ in done for s in b.segs[len(p.segs):] for tok in s.tokens]  # text order
        if matcher is not None and not all(self.grammar.accept(matcher, tok) for tok in branch_tokens):
            matcher = None
        cont = self._new_seq(p.traj, p.tracker, forced[0], pos=max(b.pos for b, _ in done),
                             length=kv[0][0].shape[1], kv=kv, role=p.role, role_tokens=p.role_tokens,
                             segs=segs, matcher=matcher)
        cont.forced.extend(forced[1:])
        cont.forks, cont.group, cont.k = p.forks, p.group, p.k
        return [cont]

    # ---- sequences ---------------------------------------------------------------------------
    def _main_seq(self, traj: Traj, prompt: list[int]) -> _Seq:
        seq = _Seq(feed=self.pad, pos=len(prompt), length=len(prompt), traj=traj, tracker=self._tracker(),
                   segs=[prompt_segment(prompt)], request=self._request(traj))
        seq.matcher = self.grammar.new_state() if self.grammar is not None else None
        traj.chains.append(seq)
        return seq

    def _new_seq(self, traj: Traj, tracker: Tracker, first: int, **kw) -> _Seq:
        """A sequence that starts by emitting the forced token `first` (an opening or join tag)."""
        seq = _Seq(feed=first, traj=traj, tracker=tracker, request=self._request(traj), **kw)
        traj.chains.append(seq)
        self._emit(seq, first, None)
        return seq

    def _request(self, traj: Traj) -> int:
        self._next_request += 1
        traj.requests += 1
        return self._next_request - 1

    # ---- sampling ---------------------------------------------------------------------------
    def _sample(self, seqs: list[_Seq], logits: torch.Tensor) -> tuple[list[int], list[float]]:
        """Next token of each sequence; logprobs under logits / T. logits: [S, V].

        Under the grammar, speculatively where exact (`parallax.engines.sampling.grammar_draw`): one token
        check per sequence instead of a mask.
        """
        t0 = time.thread_time()
        p = self._params
        x = logits / p.temperature  # [S, V]
        logp = x.log_softmax(-1)  # [S, V] what the learner recomputes
        x = x.clone()
        for i, r in enumerate(seqs):
            banned = r.tracker.banned()
            if banned:
                x[i, banned] = float("-inf")
        states = [r.matcher for r in seqs] if self.grammar is not None else [None] * len(seqs)
        tok = grammar_draw(x, states, self.grammar, lambda idx, sub: self._draw([seqs[i] for i in idx], sub),
                           self._speculate())  # [S]
        lp = logp.gather(-1, tok[:, None].to(logp.device)).squeeze(-1)
        self.timing["sample"] += time.thread_time() - t0
        return tok.tolist(), lp.tolist()

    def _speculate(self) -> bool:
        """Draw-then-check is exact only if masking commutes with what follows it: no top-p (which
        renormalises over the kept set) and a processor that declares it commutes (`Replay` does)."""
        return (self.speculative_grammar and self._params.top_p >= 1.0
                and (self.processor is None or getattr(self.processor, "commutes_with_mask", False)))

    def _draw(self, seqs: list[_Seq], x: torch.Tensor) -> torch.Tensor:
        """[S] tokens drawn (or argmax) from logits x [S, V] after the processor and top-p (CPU)."""
        p = self._params
        if self.processor is not None:
            x = self.processor([r.view() for r in seqs], x)
        if p.top_p < 1.0:
            x = top_p_filter(x, p.top_p)
        return sample(x, p.greedy, self._gen, p.sampler)
