"""Parallel executor: real fork/join execution of parallel branches on the HF backend.

Algorithm (executed mode). Every trajectory starts as one *main request*. Rows of all
trajectories decode together, one token per row per step (`RowBatch`). When a request emits a
fork point — Parason: `</Outlines>` closing n outline entries; Parallel-R1: `<Parallel>`, with
n = `num_paths` because that format never announces its paths — the token is fed once more (so
the shared prefix holds it), the request is suspended and n *branch requests* start, each with a
copy of the prefix KV (computed once), its opening tag forced, and positions continuing from the
prefix length (every branch starts at the same position: "multiverse" positions); a Parason
thread then gets its *header* forced — its outline entry's tokens and a newline — so each thread
knows which entry it serves (`actors.executor_format`, "Thread headers"). Branch rows of
all trajectories decode in the same batch. A branch ends at its closing tag (fed, so its KV is
complete). When all n branches ended, the *continuation* request starts: its KV is the prefix
followed by every branch's own KV *as computed in its branch*, concatenated along time (keys
carry RoPE already), its positions continue from prefix_len + max branch length (the critical
path: position ids count critical-path tokens), and the executor forces the join tag
(Parason `</Parallel>`; Parallel-R1 `<Summary>`, then `</Parallel>` after `</Summary>`).
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

Logprobs are those of the model's distribution `logits / T`, before bans, grammar masks, top-p
and test processors: exactly what the learner recomputes from the `ExecutionRecord` (why that is
the right definition under a grammar: `actors.grammar_processor`). Forced tokens (tags, thread
headers) carry logprob 0.0 and `sampled=False` in the record: context, not loss.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from actors.executor_batch import KV, RowBatch, RowState
from actors.executor_format import TagIds, Tracker
from actors.executor_record import Segment, build_record, prompt_segment
from formats import get_spec
from orchestrator.batch import ExecutionRecord, SamplingParams

MODES = ("executed", "sequential")


@dataclass
class ExecutorConfig:
    """The `rollout.executor` config slice."""

    format: str = "parason"  # "parason" | "parallel_r1"
    mode: str = "executed"  # "executed" (fork/join) | "sequential" (causal, one request)
    num_paths: int = 2  # Parallel-R1 executed mode: branches per <Parallel>
    max_branches: int = 8  # per block (Parason: </Outlines> forced after this many entries)
    max_depth: int = 2  # nested blocks (Parason); Parallel-R1 never nests
    max_branch_tokens: int = 256  # tokens one branch request may emit before it is closed
    grammar: bool = False  # xgrammar-constrained decoding
    thread_headers: bool = True  # Parason: force each thread's outline entry after <Thread> (executor_format)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"executor mode {self.mode!r}; valid: {MODES}")
        if not 1 <= self.num_paths <= self.max_branches:
            raise ValueError(f"need 1 <= num_paths <= max_branches, got {self.num_paths}, {self.max_branches}")
        if self.max_branch_tokens < 2:
            raise ValueError("max_branch_tokens must leave room for the closing tag (>= 2)")


@dataclass
class RowView:
    """What a logits processor sees of a row: its trajectory, role and the role's tokens so far.

    role () is the main chain; (j, k) is branch k of the j-th block its parent role forked;
    nested branches extend the tuple. In sequential mode every row has role ().
    """

    traj: int
    role: tuple[int, ...]
    tokens: list[int]


Processor = Callable[[list[RowView], torch.Tensor], torch.Tensor]


@dataclass
class Execution:
    """One trajectory as the executor produced it."""

    token_ids: list[int]  # response, text order
    logprobs: list[float]  # one per response token; 0.0 where forced
    finish_reason: str  # "stop" | "length"
    record: ExecutionRecord
    requests: int = 1  # engine requests this trajectory used


@dataclass(eq=False)
class _Traj:
    index: int
    emitted: int = 0
    capped: bool = False
    eos: bool = False  # EOS was sampled inside a block (the structure was closed for it)
    requests: int = 0
    rows: list = field(default_factory=list)
    final: _Row | None = None
    finish: str = "length"


@dataclass(eq=False)
class _Group:
    """The branches one request forked, waiting for the join."""

    parent: _Row
    kv: KV  # the prefix (parent history incl. the fork token)
    done: list = field(default_factory=list)  # (k, row, kv) of finished branches


@dataclass(eq=False)
class _Row(RowState):
    traj: _Traj | None = None
    tracker: Tracker | None = None
    request: int = 0
    role: tuple[int, ...] = ()
    role_tokens: list[int] = field(default_factory=list)
    segs: list[Segment] = field(default_factory=list)
    forced: deque = field(default_factory=deque)
    pending: str = ""  # "fork" | "done": act after the next step feeds the token
    fork_n: int = 0
    forks: int = 0
    group: _Group | None = None
    k: int = 0
    matcher: object | None = None  # GrammarState when decoding under the grammar
    cur: Segment | None = None  # the segment this row is extending

    def view(self) -> RowView:
        return RowView(self.traj.index, self.role, self.role_tokens)


class ParallelExecutor:
    """Runs trajectories in executed or sequential mode over a transformers causal LM."""

    speculative_grammar = True  # grammar: check the unmasked draw, mask only refused rows (exact)

    def __init__(self, model, tokenizer, cfg: ExecutorConfig, processor: Processor | None = None):
        self.model, self.tokenizer, self.cfg = model, tokenizer, cfg
        self.spec = get_spec(cfg.format, max_branches=cfg.max_branches,
                             max_depth=cfg.max_depth, min_branches=min(2, cfg.max_branches))
        self.tags = TagIds.from_tokenizer(self.spec, tokenizer)
        self.eos = tokenizer.eos_token_id
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos
        self.processor = processor
        self.grammar = None
        if cfg.grammar:
            from actors.grammar_processor import GrammarMasker

            self.grammar = GrammarMasker(self.spec, tokenizer, model.config.vocab_size)
        # CPU seconds of the decoding thread (time.thread_time: preemption on a shared machine does not count)
        self.timing = {"decode": 0.0, "regroup": 0.0, "sample": 0.0}
        self.shapes: list[tuple[int, int, bool]] = []  # the last run's decode steps (see RowBatch.shapes)

    @classmethod
    def from_engine(cls, engine, cfg: ExecutorConfig, processor: Processor | None = None) -> ParallelExecutor:
        """Share an `HFEngine`'s model and tokenizer (weights synced into the engine apply here too)."""
        return cls(engine.model, engine.tokenizer, cfg, processor)

    @torch.no_grad()
    def run(self, prompts: list[list[int]], params: SamplingParams) -> list[Execution]:
        """One trajectory per prompt, in order."""
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if params.temperature <= 0:
            raise ValueError("temperature must be > 0 (use greedy=True for argmax decoding)")
        self._params, self._gen, self._next_request = params, torch.Generator().manual_seed(params.seed), 0
        batch = RowBatch(self.model, self.pad)
        self.shapes = batch.shapes  # (rows, width, padded) per decode step, for bench/bench_executor.py
        t0 = time.thread_time()
        logits = batch.prefill(prompts)
        self.timing["decode"] += time.thread_time() - t0
        trajs = [_Traj(i) for i in range(len(prompts))]
        rows = [self._main_row(t, p) for t, p in zip(trajs, prompts)]
        batch.adopt(rows)
        incoming = self._advance(rows, logits)
        while True:
            members = [r for r in batch.rows if r.live]
            if incoming or len(members) * 2 < len(batch.rows):
                if not members and not incoming:
                    break
                t0 = time.thread_time()
                batch.regroup(members + incoming)
                self.timing["regroup"] += time.thread_time() - t0
            if not any(r.live for r in batch.rows):
                break
            t0 = time.thread_time()
            logits = batch.step()
            self.timing["decode"] += time.thread_time() - t0
            incoming = self._advance(batch.rows, logits, batch)
        return [self._finish(t) for t in trajs]

    # ---- one step's bookkeeping ------------------------------------------------------------
    def _advance(self, rows: list[_Row], logits: torch.Tensor, batch: RowBatch | None = None) -> list[_Row]:
        """Act on fed fork/close points, then give every live row its next token. Returns new rows."""
        incoming: list[_Row] = []
        for r in rows:
            if r.live and r.pending:
                incoming += self._fork(r, batch) if r.pending == "fork" else self._branch_done(r, batch)
        want = [i for i, r in enumerate(rows) if r.live and not r.forced and
                (not r.tracker.closing or self._mid_character(r))]
        sampled = dict(zip(want, zip(*self._sample([rows[i] for i in want], logits[want])))) if want else {}
        for i, r in enumerate(rows):
            if not r.live:
                continue
            if i in sampled:
                self._take_sample(r, *sampled[i])
            else:
                self._take_forced(r)
        return [r for r in incoming if r.live]

    def _mid_character(self, r: _Row) -> bool:
        """Closing under the grammar, but the closing tag cannot come yet: the text ends inside a
        multi-byte character (byte-level tokens split them). Sample, masked, until it can."""
        tok = r.tracker.closing_token()
        return r.matcher is not None and tok is not None and not self.grammar.allows_now(r.matcher, tok)

    def _take_sample(self, r: _Row, tok: int, logprob: float) -> None:
        stops = {self.eos, *self._params.stop_token_ids}
        if tok in stops:
            if r.tracker.in_main_text:
                self._emit(r, tok, logprob)
                self._end(r, "stop")
                return
            # EOS inside a block: close the innermost branch (on the main chain: everything, then stop)
            if r.matcher is not None:
                self.grammar.release(r.matcher)  # the stop token is not emitted
            r.traj.eos = r.traj.eos or not r.tracker.in_branch
            r.tracker.start_closing(whole_request=False)
            self._take_forced(r)
            return
        self._emit(r, tok, logprob)

    def _take_forced(self, r: _Row) -> None:
        tok = r.forced.popleft() if r.forced else r.tracker.closing_token()
        if tok is None:  # closing mode reached the main chain: the trajectory ends here
            self._end(r, "stop" if r.traj.eos and not r.traj.capped else "length")
            return
        self._emit(r, tok, None)

    def _emit(self, r: _Row, tok: int, logprob: float | None) -> None:
        """Append `tok` to the row (sampled when `logprob` is set) and let the tracker react."""
        request = r.request if logprob is not None else -1
        seg = r.cur
        if seg is None or seg.request != request:  # a segment never spans two rows
            seg = r.cur = Segment(request, list(r.segs))
            r.segs.append(seg)
        seg.tokens.append(tok)
        seg.positions.append(r.pos)
        seg.logprobs.append(0.0 if logprob is None else logprob)
        r.role_tokens.append(tok)
        r.feed = tok
        r.traj.emitted += 1
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

    def _check_caps(self, r: _Row) -> None:
        t = r.traj
        if t.emitted >= self._params.max_new_tokens and not t.capped:
            t.capped = True
            for row in t.rows:
                row.tracker.start_closing(whole_request=True)
        elif not r.tracker.closing and r.tracker.branch_tokens() >= self.cfg.max_branch_tokens - 1:
            r.tracker.start_closing(whole_request=False)

    def _end(self, r: _Row, reason: str) -> None:
        r.live = False
        r.traj.final, r.traj.finish = r, reason

    # ---- fork and join ---------------------------------------------------------------------
    def _fork(self, r: _Row, batch: RowBatch) -> list[_Row]:
        """`r` fed its fork point: suspend it and start its branches from its history."""
        r.live, r.pending = False, ""
        group = _Group(r, batch.history(r))
        children = []
        for k in range(r.fork_n):
            tracker, open_tag = r.tracker.branch(k)
            child = self._new_row(r.traj, tracker, open_tag, pos=r.pos, length=r.length, kv=group.kv,
                                  role=r.role + (r.forks, k), role_tokens=[], segs=list(r.segs),
                                  matcher=self.grammar.fork(r.matcher) if r.matcher is not None else None)
            child.group, child.k = group, k
            children.append(child)
        r.forks += 1
        return children

    def _branch_done(self, r: _Row, batch: RowBatch) -> list[_Row]:
        """Branch `r` fed its closing tag; when it is the last of its block, start the continuation."""
        r.live, r.pending = False, ""
        group = r.group
        group.done.append((r.k, r, batch.history(r)))
        if len(group.done) < r.tracker.frames[-1].n:
            return []
        p = group.parent
        n0, s0 = p.length, len(p.segs)
        done = sorted(group.done, key=lambda d: d[0])
        kv = [(torch.cat([k] + [h[li][0][:, n0:] for _, _, h in done], dim=1),  # [Hkv, n0 + sum(len_k), D]
               torch.cat([v] + [h[li][1][:, n0:] for _, _, h in done], dim=1))
              for li, (k, v) in enumerate(group.kv)]
        segs = list(p.segs) + [s for _, b, _ in done for s in b.segs[s0:]]
        matcher = p.matcher
        branch_tokens = [tok for _, b, _ in done for s in b.segs[s0:] for tok in s.tokens]  # text order
        if matcher is not None and not all(self.grammar.accept(matcher, tok) for tok in branch_tokens):
            matcher = None
        forced = p.tracker.join()
        cont = self._new_row(p.traj, p.tracker, forced[0], pos=max(b.pos for _, b, _ in done),
                             length=kv[0][0].shape[1], kv=kv, role=p.role, role_tokens=p.role_tokens,
                             segs=segs, matcher=matcher)
        cont.forced.extend(forced[1:])
        cont.forks, cont.group, cont.k = p.forks, p.group, p.k
        return [cont]

    # ---- rows -------------------------------------------------------------------------------
    def _main_row(self, traj: _Traj, prompt: list[int]) -> _Row:
        tracker = Tracker(self.tags, self.eos, self.cfg.mode == "executed", self.cfg.num_paths,
                          self.cfg.thread_headers)
        row = _Row(feed=self.pad, pos=len(prompt), length=len(prompt), traj=traj, tracker=tracker,
                   segs=[prompt_segment(prompt)], request=self._request(traj))
        row.matcher = self.grammar.new_state() if self.grammar is not None else None
        traj.rows.append(row)
        return row

    def _new_row(self, traj: _Traj, tracker: Tracker, first: int, **kw) -> _Row:
        """A row that starts by emitting the forced token `first` (an opening or join tag)."""
        row = _Row(feed=first, traj=traj, tracker=tracker, request=self._request(traj), **kw)
        traj.rows.append(row)
        self._emit(row, first, None)
        return row

    def _request(self, traj: _Traj) -> int:
        self._next_request += 1
        traj.requests += 1
        return self._next_request - 1

    # ---- sampling ---------------------------------------------------------------------------
    def _sample(self, rows: list[_Row], logits: torch.Tensor) -> tuple[list[int], list[float]]:
        """Next token of each row; logprobs under logits / T. logits: [S, V].

        Under the grammar, speculatively (see `actors.grammar_processor`): draw from the unmasked
        distribution, keep the draws the grammar allows, mask and redraw only the refused rows —
        the masked distribution exactly, at the cost of one token check per row instead of a mask.
        """
        t0 = time.thread_time()
        p = self._params
        x = logits / p.temperature  # [S, V]
        logp = x.log_softmax(-1)  # [S, V] what the learner recomputes
        x = x.clone()
        for i, r in enumerate(rows):
            banned = r.tracker.banned()
            if banned:
                x[i, banned] = float("-inf")
        g = [i for i, r in enumerate(rows) if r.matcher is not None] if self.grammar is not None else []
        if g and not self._speculate():
            sub = x[g]
            self.grammar.mask(sub, [rows[i].matcher for i in g])
            x[g] = sub
            g = []
        tok = self._draw(rows, x)  # [S]
        refused = [i for i in g if not self.grammar.check(rows[i].matcher, int(tok[i]))]
        if refused:
            sub = x[refused]
            self.grammar.mask(sub, [rows[i].matcher for i in refused])
            # `check` may refuse a valid token it cannot judge alone: keep the draw if the mask does.
            redo = [j for j, i in enumerate(refused) if not torch.isfinite(sub[j, int(tok[i])])]
            if redo:
                tok[[refused[j] for j in redo]] = self._draw([rows[refused[j]] for j in redo], sub[redo])
        lp = logp.gather(-1, tok[:, None].to(logp.device)).squeeze(-1)
        self.timing["sample"] += time.thread_time() - t0
        return tok.tolist(), lp.tolist()

    def _speculate(self) -> bool:
        """Draw-then-check is exact only if masking commutes with what follows it: no top-p (which
        renormalises over the kept set) and a processor that declares it commutes (`Replay` does)."""
        return (self.speculative_grammar and self._params.top_p >= 1.0
                and (self.processor is None or getattr(self.processor, "commutes_with_mask", False)))

    def _draw(self, rows: list[_Row], x: torch.Tensor) -> torch.Tensor:
        """[S] tokens drawn (or argmax) from logits x [S, V] after the processor and top-p (CPU)."""
        p = self._params
        if self.processor is not None:
            x = self.processor([r.view() for r in rows], x)
        if p.top_p < 1.0:
            from actors.hf_engine import _top_p_filter

            x = _top_p_filter(x, p.top_p)
        if p.greedy:
            return x.argmax(-1).cpu()
        return torch.multinomial(x.softmax(-1).cpu(), 1, generator=self._gen).squeeze(-1)

    def _finish(self, t: _Traj) -> Execution:
        tokens, logprobs, record = build_record(t.final.segs)
        return Execution(tokens, logprobs, t.finish, record, t.requests)
