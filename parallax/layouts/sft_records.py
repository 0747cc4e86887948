"""Teacher traces as the executor would have run them: the records cold-start SFT trains on.

`teacher_record` replays a teacher tree over the trace's tokens exactly as the executor would
emit it (forks, branch positions, forced tags and Parason thread headers), so SFT of the
structured variant trains the layout the engine will run; `teacher_role_scripts` gives what each
executor request emits, for replay (the tests' `Replay`, `tests/doubles/replay.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parallax.contract.batch import ExecutionRecord


# ---- teacher traces -> records ----------------------------------------------------------------
@dataclass
class _Seq:
    """An engine request being emulated: the segments it sees, its next position, its open segment."""

    request: int
    history: list[int]
    pos: int
    cur: int = -1
    role: tuple[int, ...] = ()  # the executor's RequestView.role: () main, + (fork j, branch k) per level
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
    roles: list[tuple[int, ...]] = field(default_factory=list)  # [L] role of the sequence that emitted token t
    n_requests: int = 1

    def emit(self, seq: _Seq, piece: str, sampled: bool, n_tokens: int | None = None) -> None:
        """Append the tokens of `piece` (the next chars of the trace) to `seq`'s current segment.

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
        request = seq.request if sampled else -1
        if seq.cur < 0 or self.request[seq.cur] != request:  # a new segment, as the executor cuts them
            seq.cur = len(self.visible)
            self.visible.append(list(seq.history))
            self.request.append(request)
            seq.history.append(seq.cur)
        self.segment_ids += [seq.cur] * n_tokens
        self.positions += range(seq.pos, seq.pos + n_tokens)
        self.sampled += [sampled] * n_tokens
        self.roles += [seq.role] * n_tokens
        seq.pos += n_tokens

    def run(self, nodes, seq: _Seq) -> _Seq:
        """Free text and blocks, sampled by `seq`; returns the sequence that continues after them."""
        from parallax.formats import Block

        for node in nodes:
            seq = self.block(node, seq) if isinstance(node, Block) else self._text(seq, node)
        return seq

    def _text(self, seq: _Seq, text: str) -> _Seq:
        self.emit(seq, text, True)
        return seq

    def block(self, block, seq: _Seq) -> _Seq:
        """One parallel block: fork point, branches, join tags; returns the continuation sequence."""
        from parallax.formats import SUBTASK

        s = self.spec
        n = len(block.branches)
        if block.summary is not None and s.is_parason:
            raise ValueError("a Parason <Conclusion> (the release's alias) is never written by the executor; "
                             "drop it from the trace before training on it")
        gaps = block.gaps or ("",) * (2 * n + 3 if s.is_parason else n + 2)
        if s.is_parason:  # the main request writes the outline; </Outlines> is the fork point
            self.emit(seq, s.parallel_open + gaps[0] + s.outlines_open + gaps[1], True)
            for k, br in enumerate(block.branches):
                o, c = (
                    (s.subtask_open, s.subtask_close) if br.kind == SUBTASK else (s.trial_open, s.trial_close)
                )
                self.emit(seq, o + br.outline + c + gaps[k + 2], True)
            self.emit(seq, s.outlines_close, True)
            fixed = gaps[n + 2 :]
            opener, closer = s.thread_open, s.thread_close
        else:
            self.emit(seq, s.parallel_open, True)  # Parallel-R1 forks at <Parallel>
            fixed = gaps
            opener, closer = s.path_open, s.path_close
        if any(fixed):
            raise ValueError(
                "whitespace between branches / join tags cannot be produced by the executor "
                "(it forces those tags back to back); strip the block's gaps"
            )
        children = []
        for k, br in enumerate(block.branches):
            child = seq
            if self.executed:
                child = _Seq(self._new_request(), list(seq.history), seq.pos, role=seq.role + (seq.forks, k))
            self.emit(child, opener, False)
            child = self.run(self._forced_header(child, br) if s.is_parason else br.body, child)
            self.emit(child, closer, True)
            children.append(child)
        if self.executed:  # the continuation sees every branch's own segments, at the critical-path position
            own = [h for c in children for h in c.history[len(seq.history) :]]
            seq = _Seq(
                self._new_request(),
                seq.history + own,
                max(c.pos for c in children),
                role=seq.role,
                forks=seq.forks + 1,
            )
        else:
            seq = children[-1]
        if s.is_parason:
            self.emit(seq, s.parallel_close, False)
        elif (block.placement or s.summary_placement) == "after":  # </Parallel><Summary> forced, the summary sampled
            self.emit(seq, s.parallel_close, False)
            self.emit(seq, s.summary_open, False)
            self.emit(seq, block.summary + s.summary_close, True)
        else:
            self.emit(seq, s.summary_open, False)
            self.emit(seq, block.summary + s.summary_close, True)
            self.emit(seq, s.parallel_close, False)
        return seq

    def _forced_header(self, seq: _Seq, branch) -> tuple:
        """Emit a Parason thread's header (its outline entry, forced by the executor); the rest of its body."""
        from parallax.formats import thread_header

        head, body = thread_header(branch.outline), branch.body
        if not (body and isinstance(body[0], str) and body[0].startswith(head)):
            raise ValueError(
                f"a Parason thread must open with its outline entry's header {head!r} "
                "(parallax.formats.with_thread_headers adds it)"
            )
        self.emit(seq, head, False)
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
    parallax/executors/tracker.py forces them; a Parason thread without its header is refused.
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


def _walk_trace(
    prompt_ids: list[int], trace: str, spec, tokenizer, mode: str, eos: bool
) -> tuple[_Walk, list[int]]:
    from parallax.formats import parse

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
    walk.emit(_Seq(-1, [], 0), "", False, n_tokens=len(prompt_ids))
    seq = walk.run(result.tree.nodes, _Seq(0, [0], len(prompt_ids)))
    if walk.tok != len(enc["input_ids"]) or walk.char != len(trace):
        raise ValueError("the trace's tokens were not all placed (tokenizer offsets do not cover the text)")
    ids = list(enc["input_ids"])
    if eos:
        walk.emit(seq, "", True, n_tokens=1)
        ids.append(tokenizer.eos_token_id)
    return walk, ids


def _spec(spec):
    from parallax.formats.parser import resolve_spec

    return resolve_spec(spec)
