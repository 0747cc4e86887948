"""Structured learner batches: execution records -> TrainBatch / SFTBatch with their layout.

Three row layouts, chosen by name (``LAYOUTS``):

* ``causal``: one row per trajectory, plain causal attention, positions 0..L-1 (the "Seen"
  variant; exact for the executor's sequential mode).
* ``structured``: one row per trajectory in text order, scored with the engine's own segment
  visibility and multiverse positions (actors/masks.py). Exact for the executed mode: each
  branch sees the prefix and itself, the continuation sees every branch as the branch computed it.
  A request-executor record (``ExecutionRecord.reprefill``: each engine request re-read its
  context as text, as on vLLM) gets the text causally plus copies of the requests that saw less
  than the text before them (orchestrator/reprefill.py): exact too, with one prefix per trajectory.
* ``threadweaver``: one row per engine request (its visible context + its own tokens), plain
  causal attention, the trajectory's advantage broadcast to every row. Works with any attention
  backend (flash / varlen packing, no custom mask) at the cost of recomputing the shared prefix
  once per request (tokens grow with branches x prefix) and of scoring a join's context causally:
  a continuation row lets branch k attend to branches < k, which a KV-merging engine (the KV
  executor) never did, so its continuation tokens are only approximately on-policy. Branch and
  main rows are exact. For the request executor (``ExecutionRecord.reprefill``) every row is
  exactly what the engine computed; ``causal`` refuses such records when they fork.

For cold-start SFT of the structured variant, :func:`teacher_record` turns a teacher trace into
the record the executor would have produced had the model sampled that text, so SFT trains
exactly the layout the engine will run (see actors/executor*.py for the engine side).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from orchestrator.batch import ExecutionRecord, SFTBatch, TrainBatch, Trajectory

LAYOUTS = ("causal", "structured", "threadweaver")


def sequential_record(n_prompt: int, n_response: int) -> ExecutionRecord:
    """The record of plain sequential decoding: prompt, then one sampled segment that sees it."""
    if n_prompt < 1:
        raise ValueError("a record needs at least one prompt token")
    segs = [0] * n_prompt + [1] * n_response
    visible = [[], [0]] if n_response else [[]]
    return ExecutionRecord(
        list(range(n_prompt + n_response)),
        segs,
        visible,
        [-1, 0][: len(visible)],
        [False] * n_prompt + [True] * n_response,
    )


# ---- teacher traces -> records ----------------------------------------------------------------
@dataclass
class _Row:
    """An engine request being emulated: the segments it sees, its next position, its open segment."""

    request: int
    history: list[int]
    pos: int
    cur: int = -1
    role: tuple[int, ...] = ()  # the executor's RowView.role: () main, + (fork j, branch k) per level
    forks: int = 0


@dataclass
class _Walk:
    """Replays a teacher tree as the executor would run it, over the trace's tokens."""

    spec: object
    starts: list[int]  # char offset where each trace token starts
    text: str
    executed: bool
    char: int = 0  # chars consumed
    tok: int = 0  # trace tokens consumed
    positions: list[int] = field(default_factory=list)
    segment_ids: list[int] = field(default_factory=list)
    visible: list[list[int]] = field(default_factory=list)
    request: list[int] = field(default_factory=list)
    sampled: list[bool] = field(default_factory=list)
    roles: list[tuple[int, ...]] = field(default_factory=list)  # [L] role of the row that emitted token t
    n_requests: int = 1

    def emit(self, row: _Row, piece: str, sampled: bool, n_tokens: int | None = None) -> None:
        """Append the tokens of `piece` (the next chars of the trace) to `row`'s current segment.

        `n_tokens` given: that many tokens that are not trace text (the prompt, EOS)."""
        if n_tokens is None:
            end = self.char + len(piece)
            if self.text[self.char : end] != piece:
                raise ValueError(f"trace text diverges from its tree at char {self.char}")
            n_tokens = 0
            while self.tok + n_tokens < len(self.starts) and self.starts[self.tok + n_tokens] < end:
                n_tokens += 1
            if (
                end < len(self.text)
                and self.tok + n_tokens < len(self.starts)
                and self.starts[self.tok + n_tokens] != end
            ):
                raise ValueError(f"a token straddles a structure boundary at char {end} of the trace")
            self.char = end
            self.tok += n_tokens
        if n_tokens == 0:
            return
        request = row.request if sampled else -1
        if row.cur < 0 or self.request[row.cur] != request:  # a new segment, as the executor cuts them
            row.cur = len(self.visible)
            self.visible.append(list(row.history))
            self.request.append(request)
            row.history.append(row.cur)
        self.segment_ids += [row.cur] * n_tokens
        self.positions += range(row.pos, row.pos + n_tokens)
        self.sampled += [sampled] * n_tokens
        self.roles += [row.role] * n_tokens
        row.pos += n_tokens

    def seq(self, nodes, row: _Row) -> _Row:
        """Free text and blocks, sampled by `row`; returns the row that continues after them."""
        from formats import Block

        for node in nodes:
            row = self.block(node, row) if isinstance(node, Block) else self._text(row, node)
        return row

    def _text(self, row: _Row, text: str) -> _Row:
        self.emit(row, text, True)
        return row

    def block(self, block, row: _Row) -> _Row:
        """One parallel block: fork point, branches, join tags; returns the continuation row."""
        from formats import SUBTASK

        s = self.spec
        n = len(block.branches)
        gaps = block.gaps or ("",) * (2 * n + 3 if s.is_parason else n + 2)
        if s.is_parason:  # the main request writes the outline; </Outlines> is the fork point
            self.emit(row, s.parallel_open + gaps[0] + s.outlines_open + gaps[1], True)
            for k, br in enumerate(block.branches):
                o, c = (
                    (s.subtask_open, s.subtask_close) if br.kind == SUBTASK else (s.trial_open, s.trial_close)
                )
                self.emit(row, o + br.outline + c + gaps[k + 2], True)
            self.emit(row, s.outlines_close, True)
            fixed = gaps[n + 2 :]
            opener, closer = s.thread_open, s.thread_close
        else:
            self.emit(row, s.parallel_open, True)  # Parallel-R1 forks at <Parallel>
            fixed = gaps
            opener, closer = s.path_open, s.path_close
        if any(fixed):
            raise ValueError(
                "whitespace between branches / join tags cannot be produced by the executor "
                "(it forces those tags back to back); strip the block's gaps"
            )
        children = []
        for k, br in enumerate(block.branches):
            child = row
            if self.executed:
                child = _Row(self._new_request(), list(row.history), row.pos, role=row.role + (row.forks, k))
            self.emit(child, opener, False)
            child = self.seq(self._forced_header(child, br) if s.is_parason else br.body, child)
            self.emit(child, closer, True)
            children.append(child)
        if self.executed:  # the continuation sees every branch's own segments, at the critical-path position
            own = [h for c in children for h in c.history[len(row.history) :]]
            row = _Row(
                self._new_request(),
                row.history + own,
                max(c.pos for c in children),
                role=row.role,
                forks=row.forks + 1,
            )
        else:
            row = children[-1]
        if s.is_parason:
            self.emit(row, s.parallel_close, False)
        else:
            self.emit(row, s.summary_open, False)
            self.emit(row, block.summary + s.summary_close, True)
            self.emit(row, s.parallel_close, False)
        return row

    def _forced_header(self, row: _Row, branch) -> tuple:
        """Emit a Parason thread's header (its outline entry, forced by the executor); the rest of its body."""
        from actors.executor_format import thread_header

        head, body = thread_header(branch.outline), branch.body
        if not (body and isinstance(body[0], str) and body[0].startswith(head)):
            raise ValueError(
                f"a Parason thread must open with its outline entry's header {head!r} "
                "(actors.executor_format.with_thread_headers adds it)"
            )
        self.emit(row, head, False)
        return (body[0][len(head) :],) + tuple(body[1:])

    def _new_request(self) -> int:
        self.n_requests += 1
        return self.n_requests - 1


def teacher_record(
    prompt_ids: list[int], trace: str, spec, tokenizer, mode: str = "executed", eos: bool = True
) -> tuple[list[int], ExecutionRecord]:
    """(response token ids, record) of a teacher trace as the executor would have run it.

    Executed mode: every branch is its own request that sees the prefix (through the fork token)
    and starts at the same position; the continuation sees all branches and starts at
    prefix_len + longest branch. Sequential mode: one request, positions 0..L-1. Forced tags
    (branch openers, join tags) and Parason thread headers are marked unsampled, exactly as
    actors/executor_format.py forces them; a Parason thread without its header is refused.
    The response ids are the tokenizer's ids of ``trace`` (+ EOS), i.e. what ``sft_batch`` trains on.
    """
    walk, ids = _walk_trace(prompt_ids, trace, spec, tokenizer, mode, eos)
    return ids, ExecutionRecord(walk.positions, walk.segment_ids, walk.visible, walk.request, walk.sampled)


def teacher_role_scripts(
    prompt_ids: list[int], trace: str, spec, tokenizer, mode: str = "executed"
) -> dict[tuple[int, ...], list[int]]:
    """What each executor request role emits (sampled and forced) to reproduce the trace; for replay."""
    walk, ids = _walk_trace(prompt_ids, trace, spec, tokenizer, mode, eos=False)
    scripts: dict[tuple[int, ...], list[int]] = {}
    for tok, role in zip(ids, walk.roles[len(prompt_ids) :]):
        scripts.setdefault(role, []).append(tok)
    return scripts


def replay_processor(scripts: list[dict[tuple[int, ...], list[int]]], eos_id: int):
    """Executor logits processor: request role r of trajectory i emits scripts[i][r], then EOS.

    The executor reports logprobs of the model's own distribution (before processors), so a
    replayed run yields real engine logprobs of the teacher's tokens: the consistency check's input.
    """

    def processor(rows, x: torch.Tensor) -> torch.Tensor:
        out = torch.full_like(x, float("-inf"))  # [S, V]
        for i, r in enumerate(rows):
            script = scripts[r.traj].get(r.role, [])
            out[i, script[len(r.tokens)] if len(r.tokens) < len(script) else eos_id] = 0.0
        return out

    return processor


def _walk_trace(
    prompt_ids: list[int], trace: str, spec, tokenizer, mode: str, eos: bool
) -> tuple[_Walk, list[int]]:
    from formats import parse

    if mode not in ("executed", "sequential"):
        raise ValueError(f"mode {mode!r}; valid: executed, sequential")
    if not prompt_ids:
        raise ValueError("the prompt needs at least one token")
    result = parse(trace, spec)
    if not result.ok:
        raise ValueError(
            f"teacher trace does not parse as {getattr(spec, 'name', spec)}: {result.error.message}"
        )
    enc = tokenizer(trace, add_special_tokens=False, return_offsets_mapping=True)
    walk = _Walk(_spec(spec), [a for a, _ in enc["offset_mapping"]], trace, mode == "executed")
    walk.emit(_Row(-1, [], 0), "", False, n_tokens=len(prompt_ids))
    row = walk.seq(result.tree.nodes, _Row(0, [0], len(prompt_ids)))
    if walk.tok != len(enc["input_ids"]) or walk.char != len(trace):
        raise ValueError("the trace's tokens were not all placed (tokenizer offsets do not cover the text)")
    ids = list(enc["input_ids"])
    if eos:
        walk.emit(row, "", True, n_tokens=1)
        ids.append(tokenizer.eos_token_id)
    return walk, ids


def _spec(spec):
    from formats.parser import resolve_spec

    return resolve_spec(spec)


# ---- batches ------------------------------------------------------------------------------------
def _pad(rows: list[list], value, dtype) -> torch.Tensor:
    out = torch.full((len(rows), max(len(r) for r in rows)), value, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=dtype)
    return out


def _with_layout(batch, records: list[ExecutionRecord]):
    """Attach the packed layout of `records` (one per row, covering the row) to a Train/SFT batch."""
    from actors.masks import pack_records

    batch.position_ids, batch.segment_ids, batch.segment_visible = pack_records(
        records, width=int(batch.input_ids.shape[1])
    )
    return batch


def structured_sft_batch(
    problems: list, trace: str, tokenizer, mode: str = "executed", loss_on_forced: bool = False,
    reprefill: bool = False,
) -> SFTBatch:
    """Prompt + teacher trace + EOS with the layout the executor would run (`mode`), completion-only loss.

    Same token rows as ``orchestrator.data.sft_batch``. The loss covers the tokens the engine will
    *sample* (forced tags are written by the executor, never by the model) unless `loss_on_forced`.
    `reprefill`: the layout the request executor runs (rollout.executor.dispatch=requests, vLLM):
    the same segments and visibility, but every request re-reads its context as text, so the rows
    are the text causally plus copies of later branches (orchestrator/reprefill.py).
    """
    from orchestrator.reprefill import expand_reprefill

    rows, loss, records = [], [], []
    for p in problems:
        prompt = tokenizer(p.prompt, add_special_tokens=False)["input_ids"]
        ids, rec = teacher_record(prompt, p.traces[trace], trace, tokenizer, mode=mode)
        row = prompt + ids
        if loss_on_forced:
            rec = replace(rec, sampled=[t >= len(prompt) for t in range(len(row))])
        if reprefill:
            row, _, rec = expand_reprefill(row, [0.0] * len(row), replace(rec, reprefill=True))
        rows.append(row)
        loss.append([float(s) for s in rec.sampled])
        records.append(rec)
    batch = SFTBatch(
        _pad(rows, tokenizer.pad_token_id, torch.long),
        _pad([[1] * len(r) for r in rows], 0, torch.long),
        _pad(loss, 0.0, torch.float32),
    )
    return _with_layout(batch, records)


def _record_of(t: Trajectory, layout: str = "threadweaver") -> ExecutionRecord:
    rec = t.record or sequential_record(len(t.prompt_ids), len(t.response_ids))
    if layout == "causal" and rec.reprefill and len({r for r in rec.segment_request if r >= 0}) > 1:
        raise ValueError(
            f"trajectory {t.uid}: its engine requests re-read their contexts as text (request executor, "
            "ExecutionRecord.reprefill), so a later branch saw only the prefix; one causal row cannot "
            "express that: use learner.layout=structured (copies, orchestrator/reprefill.py) or threadweaver"
        )
    if len(rec.segment_ids) != len(t.prompt_ids) + len(t.response_ids):
        raise ValueError(
            f"trajectory {t.uid}: record covers {len(rec.segment_ids)} tokens, row has "
            f"{len(t.prompt_ids) + len(t.response_ids)}"
        )
    return rec


def structured_train_batch(trajs: list[Trajectory], advantages: list[float], pad_id: int) -> TrainBatch:
    """One row per trajectory with its layout; the loss covers sampled tokens only.

    KV-executor and sequential records: the text-order row (``data.train_batch``'s) scored with
    the record's segment visibility and positions. Request-executor records (``reprefill``): the
    text-order row, causal, then copies of the requests it cannot hold (orchestrator/reprefill.py).
    Trajectories without a record (plain sequential decoding) get the causal layout.
    """
    from orchestrator.reprefill import expand_reprefill

    rows, loss, old, adv, records = [], [], [], [], []
    for t, a in zip(trajs, advantages):
        rec = _record_of(t, "structured")
        ids, lp = t.prompt_ids + t.response_ids, [0.0] * len(t.prompt_ids) + list(t.logprobs)
        if rec.reprefill:
            ids, lp, rec = expand_reprefill(ids, lp, rec)
        keep = [float(x) for x in rec.sampled]
        rows.append(ids)
        loss.append(keep)
        old.append([x * k for x, k in zip(lp, keep)])
        adv.append([a * k for k in keep])
        records.append(rec)
    batch = TrainBatch(
        input_ids=_pad(rows, pad_id, torch.long),
        attention_mask=_pad([[1] * len(r) for r in rows], 0, torch.long),
        response_mask=_pad(loss, 0.0, torch.float32),
        old_logprobs=_pad(old, 0.0, torch.float32),
        advantages=_pad(adv, 0.0, torch.float32),
    )
    return _with_layout(batch, records)


def threadweaver_train_batch(trajs: list[Trajectory], advantages: list[float], pad_id: int) -> TrainBatch:
    """One causal row per engine request: its visible context + its own tokens, loss on its sampled tokens.

    A request's row is the context of its *last* segment (which, in the executor, sees every earlier
    segment of that request) plus that segment; positions are the engine's. Every sampled token is
    in exactly one row's loss, so token counts and the advantage sum match the other layouts.
    """
    ids, resp, old, adv = [], [], [], []
    for t, a in zip(trajs, advantages):
        rec = _record_of(t)
        row = t.prompt_ids + t.response_ids
        lp = [0.0] * len(t.prompt_ids) + list(t.logprobs)
        seg = torch.tensor(rec.segment_ids)
        for req in sorted({r for r in rec.segment_request if r >= 0}):
            last = max(s for s, r in enumerate(rec.segment_request) if r == req)
            cols = (
                torch.isin(seg, torch.tensor(rec.segment_visible[last] + [last]))
                .nonzero()
                .squeeze(-1)
                .tolist()
            )
            own = [rec.segment_request[rec.segment_ids[c]] == req and rec.sampled[c] for c in cols]
            ids.append([row[c] for c in cols])
            resp.append([float(o) for o in own])
            old.append([lp[c] if o else 0.0 for c, o in zip(cols, own)])
            adv.append([a if o else 0.0 for o in own])
    return TrainBatch(
        input_ids=_pad(ids, pad_id, torch.long),
        attention_mask=_pad([[1] * len(r) for r in ids], 0, torch.long),
        response_mask=_pad(resp, 0.0, torch.float32),
        old_logprobs=_pad(old, 0.0, torch.float32),
        advantages=_pad(adv, 0.0, torch.float32),
    )  # causal rows, positions 0..n-1: a join row is re-read flat, as ThreadWeaver's engine re-prefills it


def build_train_batch(
    layout: str, trajs: list[Trajectory], advantages: list[float], pad_id: int
) -> TrainBatch:
    """The learner batch for a layout name (``LAYOUTS``), chosen once from config."""
    if layout == "causal":
        from orchestrator.data import train_batch

        for t in trajs:
            _record_of(t, "causal")  # a request executor's forked record has no causal row: refuse it
        return train_batch(trajs, advantages, pad_id)
    if layout == "structured":
        return structured_train_batch(trajs, advantages, pad_id)
    if layout == "threadweaver":
        return threadweaver_train_batch(trajs, advantages, pad_id)
    raise ValueError(f"unknown learner layout {layout!r}; valid: {LAYOUTS}")
