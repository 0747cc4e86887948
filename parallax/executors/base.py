"""What both executors share: trajectories, request chains, groups, caps, fork/join bookkeeping.

The KV executor (`parallax/executors/kv.py`) and the request executor (`parallax/executors/requests.py`) differ in
how an engine request runs (sequences of one decode loop over a forked KV cache, or whole engine
requests that re-read their context). Everything else is the same and lives here:

* a `Traj` per prompt: tokens emitted, caps, the final chain and its finish reason;
* a `Chain` per request role: the tracker, the record segments, forced tokens, its place in a
  fork (`group`, `k`); the KV executor's sequences and the request executor's requests extend it;
* a `Group` per fork: the parent chain and the branches that ended, waiting for the join;
* `ExecutorBase`: the format's tags, the tracker of a main chain, emitting a token into the record,
  the caps (`max_branch_tokens` per branch, `max_new_tokens` per trajectory), ends and results.

Logprobs are those of the model's distribution `logits / T`, before bans, grammar masks, top-p
and test processors: exactly what the learner recomputes from the `ExecutionRecord` (why that is
the right definition under a grammar: `parallax/engines/constrained.py`). Forced tokens (tags, thread
headers) carry logprob 0.0 and `sampled=False` in the record: context, not loss.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from parallax.contract.batch import ExecutionRecord, SamplingParams
from parallax.contract.config import ExecutorConfig
from parallax.executors.record import Segment, build_record
from parallax.executors.tracker import TagIds, Tracker
from parallax.formats.spec import resolve_spec

MODES = ("executed", "sequential")


@dataclass
class RequestView:
    """What a logits processor sees of a request: its trajectory, role and the role's tokens so far.

    role () is the main chain; (j, k) is branch k of the j-th block its parent role forked;
    nested branches extend the tuple. In sequential mode every request has role ().
    """

    traj: int
    role: tuple[int, ...]
    tokens: list[int]


Processor = Callable[[list[RequestView], torch.Tensor], torch.Tensor]


def engine_processor(processor: Processor, views: list[RequestView]) -> Callable[[list[list[int]], torch.Tensor],
                                                                             torch.Tensor]:
    """An executor `Processor` (e.g. `Replay`) as an engine-level one: sequence i continues `views[i]`."""

    def apply(generated: list[list[int]], x: torch.Tensor) -> torch.Tensor:
        return processor([RequestView(v.traj, v.role, v.tokens + g) for v, g in zip(views, generated)], x)

    apply.commutes_with_mask = getattr(processor, "commutes_with_mask", False)  # speculative grammar stays exact
    if hasattr(processor, "request_args"):  # engines that run processors in their own workers (vLLM) take these
        apply.request_args = [processor.request_args(v) for v in views]
    return apply


@dataclass
class Execution:
    """One trajectory as an executor produced it."""

    token_ids: list[int]  # response, text order
    logprobs: list[float]  # one per response token; 0.0 where forced
    finish_reason: str  # "stop" | "length"
    record: ExecutionRecord
    requests: int = 1  # engine requests this trajectory used


@dataclass(eq=False)
class Traj:
    index: int
    emitted: int = 0
    capped: bool = False
    eos: bool = False  # EOS was sampled inside a block (the structure was closed for it)
    requests: int = 0  # engine requests used (KV: sequences started; requests: engine calls)
    redraws: int = 0  # banned or spelled tags dropped and resampled (request executor)
    chains: list = field(default_factory=list)  # every chain started for it
    final: Chain | None = None
    finish: str = "length"


@dataclass(eq=False)
class Group:
    """The branches one chain forked, waiting for the join."""

    parent: Chain
    n: int
    kv: Any = None  # KV executor: the prefix (parent history incl. the fork token)
    done: list = field(default_factory=list)  # (k, branch chain, its history) of finished branches


@dataclass(eq=False, kw_only=True)
class Chain:
    """One engine request role: the main chain or a branch (a continuation after a join keeps the role)."""

    traj: Traj | None = None
    tracker: Tracker | None = None
    request: int = 0
    role: tuple[int, ...] = ()
    role_tokens: list[int] = field(default_factory=list)
    segs: list[Segment] = field(default_factory=list)
    forced: deque = field(default_factory=deque)
    cur: Segment | None = None  # the segment this chain is extending
    forks: int = 0
    group: Group | None = None
    k: int = 0
    live: bool = True

    def view(self) -> RequestView:
        return RequestView(self.traj.index, self.role, self.role_tokens)


class ExecutorBase:
    """The format's tags and the bookkeeping both executors run (module docstring)."""

    def __init__(self, tokenizer, cfg: ExecutorConfig, fmt: str, processor: Processor | None):
        if cfg.mode not in MODES:
            raise ValueError(f"executor mode {cfg.mode!r}; valid: {MODES}")
        self.tokenizer, self.cfg, self.fmt, self.processor = tokenizer, cfg, fmt, processor
        # `fmt`: a format name or a FormatSpec (its summary placement is what the tracker forces)
        self.spec = replace(resolve_spec(fmt), max_branches=cfg.max_branches, max_depth=cfg.max_depth,
                            min_branches=min(2, cfg.max_branches))
        self.tags = TagIds.from_tokenizer(self.spec, tokenizer)
        self.eos = tokenizer.eos_token_id

    @staticmethod
    def _check_run(prompts: list[list[int]], params: SamplingParams) -> None:
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if params.temperature <= 0:
            raise ValueError("temperature must be > 0 (use greedy=True for argmax decoding)")

    def _tracker(self) -> Tracker:
        """The tracker of a trajectory's main chain."""
        return Tracker(self.tags, self.eos, self.cfg.mode == "executed", self.cfg.num_paths,
                       self.cfg.thread_headers)

    def _record(self, c: Chain, tok: int, logprob: float | None, position: int) -> None:
        """Append `tok` (sampled when `logprob` is set) to `c`'s record; a segment never spans two requests."""
        request = c.request if logprob is not None else -1
        if c.cur is None or c.cur.request != request:
            c.cur = Segment(request, list(c.segs))
            c.segs.append(c.cur)
        c.cur.tokens.append(tok)
        c.cur.positions.append(position)
        c.cur.logprobs.append(0.0 if logprob is None else logprob)
        c.role_tokens.append(tok)
        c.traj.emitted += 1

    def _check_caps(self, c: Chain) -> None:
        t = c.traj
        if t.emitted >= self._params.max_new_tokens and not t.capped:
            t.capped = True
            for other in t.chains:
                other.tracker.start_closing(whole_request=True)
        elif not c.tracker.closing and c.tracker.branch_tokens() >= self.cfg.max_branch_tokens - 1:
            c.tracker.start_closing(whole_request=False)

    @staticmethod
    def _eos_in_block(c: Chain) -> None:
        """EOS (a stop token) inside a block: close the innermost branch; on the main chain, everything."""
        c.traj.eos = c.traj.eos or not c.tracker.in_branch
        c.tracker.start_closing(whole_request=False)

    @staticmethod
    def _closed_reason(t: Traj) -> str:
        """Finish reason of a trajectory whose closing reached its main chain."""
        return "stop" if t.eos and not t.capped else "length"

    @staticmethod
    def _end(c: Chain, reason: str) -> None:
        c.live = False
        c.traj.final, c.traj.finish = c, reason

    @staticmethod
    def _branch_ended(c: Chain, history: Any = None) -> bool:
        """Branch `c` fed its closing tag; True when it was the last of its block (join now)."""
        c.live = False
        c.group.done.append((c.k, c, history))
        return len(c.group.done) == c.group.n

    @staticmethod
    def _joined(group: Group) -> tuple[list[tuple[Chain, Any]], list[Segment], list[int]]:
        """(finished branches in branch order with their histories, the continuation's segments in
        text order, the forced join tokens)."""
        p = group.parent
        done = [(b, h) for _, b, h in sorted(group.done, key=lambda d: d[0])]
        segs = list(p.segs) + [s for b, _ in done for s in b.segs[len(p.segs):]]
        return done, segs, p.tracker.join()

    @staticmethod
    def _finish(t: Traj, reprefill: bool = False) -> Execution:
        tokens, logprobs, record = build_record(t.final.segs, reprefill=reprefill)
        return Execution(tokens, logprobs, t.finish, record, t.requests)
