"""Request executor: the parallel formats over any engine's `generate` (vLLM on GPU; hf stands in on CPU).

`parallax.executors.kv.KVExecutor` forks inside one decode loop and merges the branches' KV at a
join; it needs per-token control of a transformers model. Engines such as vLLM only take whole
requests, so this executor drives the same `Tracker` (parallax/executors/tracker.py) one *engine
request* at a time, as Parason dispatches threads on SGLang:

* the tags where the executor acts are stop tokens (`stop_tags`: a branch's closing tag, the
  fork point, Parallel-R1's `</Summary>`); the executor feeds each returned token to the
  trajectory's tracker and acts: forced tags and headers are appended, a fork point launches one
  request per branch (context: the prefix and the branch's opening tag), a branch's closing tag
  ends its request, and when every branch of a block has ended the continuation request reads
  prefix + every branch's text + the forced join tag;
* where the executor must act on a token that is not a stop token (a cap reached, `</Outlines>`
  forced after `max_branches` entries, a banned tag) the completion is cut there and the rest
  dropped: every kept token was sampled in the context the record gives it, so cutting is exact
  and costs only the dropped tokens. Fewer stop tokens, fewer engine rounds;
* a tag the tracker bans there (a block past the depth cap) is dropped and the request resampled
  from the same context: rejection sampling, so the text follows the banned-token distribution
  exactly. After `MAX_REDRAWS` refusals in a row (at once when greedy) the branch is closed, as
  after EOS in a block;
* caps as in the KV executor: `max_branch_tokens` and the trajectory's `max_new_tokens` become each
  request's token limit; a trajectory over its budget closes every open block;
* all live requests of all trajectories go to the engine together, one `generate` call per round
  (`driver` rounds); or, on an engine that streams requests (vLLM), each request goes in on its own
  and what it starts goes in the moment it returns, with no rounds (`driver` async, `_run_async`);
* `grammar`: each request is constrained by the part of the format's grammar it writes
  (`parallax.formats.ebnf(spec, start)`: the response, a thread / path body + its closing tag, a summary
  body), through the engine's structured outputs (vLLM; xgrammar bitmasks on hf). The engine
  matches strings, so it cannot stop a tag spelled in pieces the way the KV executor's masker
  does (`parallax/engines/constrained.py`); a request restarted mid-text (after a cut) re-enters its
  body's grammar at the start.

Every request re-reads its context causally, as text, with positions 0..n-1, so records say
`reprefill=True` (what that means for the learner: `parallax.contract.batch.ExecutionRecord`). A request that
continues after a forced tag or a join keeps its request id (its new context extends the old one
causally), so the main chain is one sequence. Logprobs are the engine's (model distribution at
temperature T); forced tokens 0.0.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from parallax.contract.batch import Completion, SamplingParams
from parallax.contract.config import ExecutorConfig
from parallax.contract.seeds import EXECUTOR_ROUND, substream
from parallax.executors.base import Chain, Execution, ExecutorBase, Group, Processor, Traj, engine_processor
from parallax.executors.record import Segment, prompt_segment
from parallax.executors.tracker import Tracker

MAX_REDRAWS = 4  # resamples of a request that drew a banned tag before its branch is closed


@dataclass(eq=False, kw_only=True)
class _Req(Chain):
    """A chain of engine requests (a continuation keeps its id); `context` is what the next one reads."""

    context: list[int]
    refused: int = 0  # banned draws in a row
    cut: bool = False  # this round's completion was cut (a banned draw): ignore the rest of it
    tail: str = ""  # grammar on: trailing text that could be the start of a tag spelled in pieces
    close_after: bool = False  # close the branch once this round's kept tokens are consumed
    stalled: bool = False  # the engine returned fewer tokens than asked, with "length": it cannot go on
    held: list = dataclasses.field(default_factory=list)  # grammar on: (token, logprob) that may begin a tag
    held_tail: str = ""  # `tail` before the first held token


class RequestExecutor(ExecutorBase):
    """Runs trajectories in executed or sequential mode over `engine.generate`, request by request."""

    def __init__(self, engine, tokenizer, cfg: ExecutorConfig, fmt: str = "parason",
                 processor: Processor | None = None):
        super().__init__(tokenizer, cfg, fmt, processor)
        self.engine = engine
        self._tag_set = frozenset(self.tags.ids.values())
        self._texts: dict[int, str] = {}
        self.free = 0  # grammar on: requests that started where no grammar fragment applies (last run)
        self.rounds = 0  # engine calls (rounds of requests) of the last run
        self.redraws = 0  # banned tags dropped and resampled in the last run

    def run(self, prompts: list[list[int]], params: SamplingParams) -> list[Execution]:
        """One trajectory per prompt, in order."""
        self._check_run(prompts, params)
        self._params, self._next_request, self.rounds, self._reqs, self.free = params, 0, 0, [], 0
        # every id the engine itself stops on (vLLM adds the generation config's EOS ids)
        self._stops = {self.eos, *params.stop_token_ids, *getattr(self.engine, "stop_ids", ())}
        self._sp = dataclasses.replace(params,
                                       stop_token_ids=tuple(sorted(set(params.stop_token_ids) | self.stop_tags())))
        trajs = [Traj(i) for i in range(len(prompts))]
        pending = [self._main(t, p) for t, p in zip(trajs, prompts)]
        if self.streaming:
            self._run_async(pending)
        else:
            self._run_rounds(pending)
        unfinished = [t.index for t in trajs if t.final is None]
        if unfinished:  # a bug, never a silent loss: name what was left
            raise RuntimeError(f"request executor stopped with trajectories {unfinished} unfinished")
        self.redraws = sum(t.redraws for t in trajs)
        return [self._finish(t, reprefill=True) for t in trajs]

    @property
    def streaming(self) -> bool:
        """The async driver is in effect (`ExecutorConfig.driver`)."""
        streams = getattr(self.engine, "streams", False)
        if self.cfg.driver == "async" and not streams:
            raise ValueError("rollout.executor.driver=async needs an engine that streams requests (vllm); "
                             f"{type(self.engine).__name__} does not")
        return self.cfg.driver == "async" or (self.cfg.driver == "auto" and streams)

    def _run_rounds(self, pending: list[_Req]) -> None:
        """Every live request in one `generate` call; the next round when all are back."""
        while pending:
            sp = dataclasses.replace(self._sp, seed=substream(self._params.seed, EXECUTOR_ROUND, self.rounds))
            limits = [self._limit(r) for r in pending]
            kw = {}
            if self.cfg.grammar:
                kw["grammar"] = [self._grammar(r) for r in pending]
            if self.processor is not None:
                kw["processor"] = engine_processor(self.processor, [r.view() for r in pending])
            outs = self.engine.generate([r.context for r in pending],
                                        dataclasses.replace(sp, max_new_tokens=max(limits)), limits=limits, **kw)
            self.rounds += 1
            self._returned(pending, outs, limits)
            pending = self._settle()

    def _run_async(self, pending: list[_Req]) -> None:
        """Requests stream through the engine (`submit` / `poll`): the moment one returns, its
        tokens are consumed and whatever it starts (branches, a join's continuation, a resample) is
        submitted, while the others keep decoding. `rounds` counts engine steps.

        A trajectory's requests are consumed in the order they finish, not interleaved token by
        token as in rounds: when a trajectory cap closes it, the tokens kept are those of the requests
        that finished first (each kept token still sampled in the context its record gives). A request
        its trajectory has closed meanwhile is aborted in the engine."""
        inflight: dict[int, tuple[_Req, int]] = {}  # engine key -> (request, its limit)
        submitted = 0

        def submit(reqs: list[_Req]) -> None:
            nonlocal submitted
            busy = {id(r) for r, _ in inflight.values()}
            for r in reqs:
                if id(r) in busy:
                    continue
                lim = self._limit(r)
                sp = dataclasses.replace(self._sp, max_new_tokens=lim,
                                         seed=substream(self._params.seed, EXECUTOR_ROUND, submitted))
                kw = {} if self.processor is None else {"processor": engine_processor(self.processor, [r.view()])}
                self.engine.submit(submitted, list(r.context), sp, lim, self._grammar(r) if self.cfg.grammar else None,
                                   **kw)
                inflight[submitted] = (r, lim)
                submitted += 1

        submit(pending)
        while inflight:
            done = self.engine.poll()
            self.rounds += 1
            if not done:
                continue
            done = [(k, c) for k, c in done if k in inflight]  # an aborted request may still report
            back = [inflight.pop(k) for k, _ in done]
            self._returned([r for r, _ in back], [c for _, c in done], [lim for _, lim in back])
            submit(self._settle())
            stale = [k for k, (r, _) in inflight.items() if not self._takes_samples(r)]
            self.engine.abort(stale)  # closed meanwhile (a cap): its output is no longer wanted
            for k in stale:
                inflight.pop(k)

    def _returned(self, reqs: list[_Req], outs: list[Completion], limits: list[int]) -> None:
        """Completions of `reqs` (asked for `limits` tokens each) are back: check and consume them."""
        for r, c, lim in zip(reqs, outs, limits):
            r.traj.requests += 1
            if not self.cfg.grammar:
                self._check_completion(r, c)
            r.stalled = c.finish_reason == "length" and len(c.token_ids) < lim
        if self.cfg.grammar:
            # under a grammar a tag stop is a stop *string*, which a tag spelled in pieces also matches:
            # `_unspelled` cuts that; what is left must hold its stop token
            outs = [self._unspelled(r, c) for r, c in zip(reqs, outs)]
            for r, c in zip(reqs, outs):
                self._check_completion(r, c)
        self._consume(reqs, outs)

    # ---- one round ----------------------------------------------------------------------------
    def _check_completion(self, r: _Req, c: Completion) -> None:
        if len(c.logprobs) != len(c.token_ids):
            raise RuntimeError(f"engine returned {len(c.token_ids)} tokens but {len(c.logprobs)} logprobs")
        if c.finish_reason == "stop" and (not c.token_ids or c.token_ids[-1] not in self._stops | self.stop_tags()):
            raise RuntimeError("engine finished a request with 'stop' but dropped the stop token; the request "
                               "executor needs it in token_ids (vLLM keeps stop_token_ids there)")

    def _consume(self, reqs: list[_Req], outs: list[Completion]) -> None:
        """Feed each request its tokens; a trajectory's requests take turns token by token (as
        concurrent decoding would), so a trajectory cap truncates them all at the same length."""
        by_traj: dict[int, list[tuple[_Req, Completion]]] = {}
        for r, c in zip(reqs, outs):
            by_traj.setdefault(r.traj.index, []).append((r, c))
        for items in by_traj.values():
            for i in range(max(len(c.token_ids) for _, c in items)):
                for r, c in items:
                    if i < len(c.token_ids) and self._takes_samples(r):
                        self._take(r, c.token_ids[i], c.logprobs[i])
        for r in reqs:
            if r.held:  # held at the end of its completion, or when a cap closed it: never written (a cut)
                r.held, r.tail = [], r.held_tail
            r.cut = False  # a cut lasts for the rest of its completion only
            if r.close_after and r.live:  # a spelled tag refused too often: close the branch after the kept tokens
                r.tracker.start_closing(whole_request=False)
            r.close_after = False
            if r.stalled and r.live and not r.traj.capped:  # the engine stopped short (e.g. its max_model_len)
                r.traj.capped = True
                for q in r.traj.chains:
                    q.tracker.start_closing(whole_request=True)

    def stop_tags(self) -> set[int]:
        """Tags that end an engine request: where the executor (almost) always acts. Other actions
        (caps, bans, forced </Outlines>) cut the completion instead (module docstring)."""
        s = self.spec
        tags = [s.thread_close, s.outlines_close] if s.is_parason else [s.path_close, s.parallel_open, s.summary_close]
        return {self.tags[t] for t in tags}

    def _takes_samples(self, r: _Req) -> bool:
        return r.live and not r.forced and not r.tracker.closing and not r.cut

    def _settle(self) -> list[_Req]:
        """Write forced and closing tokens (forks and joins follow); the requests that sample next."""
        # Until nothing is left to write: a token written here can cap its trajectory and so put
        # requests already passed over into closing mode.
        while work := [r for r in self._reqs if r.live and (r.forced or r.tracker.closing)]:
            while work:
                r = work.pop()
                while r.live and (r.forced or r.tracker.closing):
                    tok = r.forced.popleft() if r.forced else r.tracker.closing_token()
                    if tok is None:  # closing reached the main chain: the trajectory ends
                        self._end(r, self._closed_reason(r.traj))
                        break
                    work += self._emit(r, tok, None)
            self._reqs = [r for r in self._reqs if r.live]
        self._reqs = [r for r in self._reqs if r.live]
        return [r for r in self._reqs if self._takes_samples(r)]

    def _take(self, r: _Req, tok: int, logprob: float) -> None:
        """A sampled token of request `r`."""
        if self.cfg.grammar and tok not in self._tag_set and tok not in self._stops:
            pending = self.spec.pending_tag(r.tail + self._text(tok))
            if pending:  # may be the start of a tag spelled in pieces: held, not yet written
                if not r.held:
                    r.held_tail = r.tail
                r.held.append((tok, logprob))
                r.tail = pending
                return
        if r.held:  # it did not become a tag: text, sampled where it stands; written now
            held, r.held, r.tail = r.held, [], r.held_tail
            for t, lp in held:
                self._emit(r, t, lp)
                if not self._takes_samples(r):  # a cap closed it part-way: the rest is dropped
                    return
        if tok in self._stops:
            if r.tracker.in_main_text:
                self._emit(r, tok, logprob)
                self._end(r, "stop")
                return
            self._eos_in_block(r)
            return
        if tok in r.tracker.banned():
            r.refused += 1
            r.traj.redraws += 1
            if self._params.greedy or r.refused > MAX_REDRAWS:
                r.tracker.start_closing(whole_request=False)
            r.cut = True  # the rest of this completion followed the banned tag: drop it
            return  # the next round resamples from the same context
        r.refused = 0
        self._emit(r, tok, logprob)  # a fork or join it causes starts requests; `_settle` picks them up

    def _unspelled(self, r: _Req, c: Completion) -> Completion:
        """`c` cut where a tag begins to be spelled in pieces (`<`, `Out`, `lines>`): the engine's
        grammar matches strings and lets that through, the tracker watches tag tokens and would not
        see it. The request resamples from the cut (rejection, as for a banned tag)."""
        tail, begin = r.tail, (0 if r.tail else None)  # begin: first token of the pending prefix
        for i, tok in enumerate(c.token_ids):
            if tok in self._tag_set and not tail:
                continue
            text = "" if tok in self._tag_set else self._text(tok)
            # a tag spelled out, or a tag token right after the start of one in pieces ("<Subtask" +
            # <Subtask>: text where only tags may stand)
            if tok in self._tag_set or any(t in tail + text for t in self.spec.tags):
                r.refused += 1
                r.traj.redraws += 1
                r.close_after = self._params.greedy or r.refused > MAX_REDRAWS  # once its kept tokens are in
                cut = i if begin is None else begin
                return Completion(c.token_ids[:cut], c.logprobs[:cut], "length")
            tail = self.spec.pending_tag(tail + text)
            begin = None if not tail else (i if len(tail) <= len(text) else begin)
        if tail and c.finish_reason == "length" and begin is not None:
            # The completion stopped at its limit part-way through what may become a tag. Kept, it
            # would be text the closing tags of a cap land after ("<Outl" + "<Outlines>": malformed).
            # Dropped, the request redraws from there (a fresh draw from the same context, so the text
            # keeps the model's distribution); counted as a redraw so the branch still ends.
            r.refused += 1
            r.traj.redraws += 1
            r.close_after = self._params.greedy or r.refused > MAX_REDRAWS
            return Completion(c.token_ids[:begin], c.logprobs[:begin], "length")
        return c

    def _text(self, tok: int) -> str:
        if tok not in self._texts:
            self._texts[tok] = self.tokenizer.decode([tok], skip_special_tokens=False)
        return self._texts[tok]

    def _grammar(self, r: _Req) -> str | None:
        """The EBNF for what request `r` writes next (`parallax.formats.ebnf(spec, start)`): the response's
        grammar on the main chain, a branch body + closing tag inside a branch, Parallel-R1's summary
        body + `</Summary>`; a Parason outline resumed part-way (after a cut) its remaining entries up to
        `</Outlines>`. Anything else (none known) goes free and is counted (`free`)."""
        from parallax.formats import ebnf

        top = r.tracker.frames[-1]
        if top.kind == "seq":
            if top.close is None:
                return ebnf(self.spec, "main")
            return ebnf(self.spec, f"thread_{top.depth}" if self.spec.is_parason else "path")
        if top.kind == "summary" and not top.flag:
            return ebnf(self.spec, "summary")
        if top.kind == "outline":  # resumed inside an outline (a cut stopped it there)
            if not top.flag:
                return ebnf(self.spec, "outline_pre")
            if top.close is None:
                return ebnf(self.spec, f"outline_{top.n}")
            kind = "subtask" if top.close == self.tags[self.spec.subtask_close] else "trial"
            return ebnf(self.spec, f"{kind}_{top.n}")
        self.free += 1
        return None

    def _limit(self, r: _Req) -> int:
        """Tokens request `r` may sample before a cap closes it (the KV executor's `_check_caps`)."""
        lim = self._params.max_new_tokens - r.traj.emitted
        if r.tracker.in_branch:
            lim = min(lim, self.cfg.max_branch_tokens - 1 - r.tracker.branch_tokens())
        return max(1, lim)

    # ---- tokens, forks, joins -----------------------------------------------------------------
    def _emit(self, r: _Req, tok: int, logprob: float | None) -> list[_Req]:
        """Append `tok` to `r` (sampled when `logprob` is set); returns requests a fork or join started."""
        self._record(r, tok, logprob, len(r.context))  # causal: the engine reads the context as one sequence
        r.context.append(tok)
        if self.cfg.grammar:
            r.tail = "" if tok in self._tag_set else self.spec.pending_tag(r.tail + self._text(tok))
        ev = r.tracker.observe(tok)
        r.forced.extend(ev.force)
        self._check_caps(r)
        if ev.fork:
            return self._fork(r, ev.fork)
        if ev.branch_done:
            return self._branch_done(r)
        return []

    def _fork(self, r: _Req, n: int) -> list[_Req]:
        r.live = False
        group = Group(r, n)
        children = []
        for k in range(n):
            tracker, open_tag = r.tracker.branch(k)
            child = self._new(r.traj, tracker, r.role + (r.forks, k), list(r.context), list(r.segs))
            child.group, child.k = group, k
            children.append(child)
            children += self._emit(child, open_tag, None)
        r.forks += 1
        return children

    def _branch_done(self, r: _Req) -> list[_Req]:
        """The last branch of a block ended: the continuation re-reads prefix + every branch as text."""
        group = r.group
        if not self._branch_ended(r):
            return []
        p = group.parent
        done, segs, forced = self._joined(group)
        context = p.context + [tok for b, _ in done for tok in b.context[len(p.context):]]
        cont = _Req(traj=p.traj, tracker=p.tracker, request=p.request, role=p.role, context=context, segs=segs,
                    role_tokens=p.role_tokens, forks=p.forks, group=p.group, k=p.k)
        p.traj.chains.append(cont)
        self._reqs.append(cont)
        cont.forced.extend(forced[1:])
        return [cont] + self._emit(cont, forced[0], None)

    def _main(self, traj: Traj, prompt: list[int]) -> _Req:
        return self._new(traj, self._tracker(), (), list(prompt), [prompt_segment(prompt)])

    def _new(self, traj: Traj, tracker: Tracker, role: tuple, context: list[int], segs: list[Segment]) -> _Req:
        r = _Req(traj=traj, tracker=tracker, request=self._next_request, role=role, context=context, segs=segs)
        self._next_request += 1
        traj.chains.append(r)
        self._reqs.append(r)
        return r
