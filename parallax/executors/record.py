"""Segments of one executed trajectory and the `ExecutionRecord` built from them.

A `Segment` is a run of tokens one sequence emitted with one context: the segments in that sequence's
history when the run started (`visible`). A sequence's history is always in text order (a branch
copies its parent's history; a join appends each branch's own segments in branch order), so the
final main sequence's segment list *is* the trajectory in text order and every visible segment comes
earlier in it — the record's contract.

Invariant the learner relies on (checked by `build_record`): every sampled token at sequence index
t > 0 was sampled from the logits at index t-1, i.e. the text predecessor of a sampled token is
the token its sequence fed just before (boundaries where this is not so — branch starts, joins —
always begin with a forced tag).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parallax.contract.batch import ExecutionRecord


@dataclass(eq=False)
class Segment:
    request: int  # engine request id; -1 for the prompt and forced tokens
    visible: list[Segment]  # earlier segments this one attends to (besides itself, causally)
    tokens: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    @property
    def sampled(self) -> bool:
        return self.request >= 0


def prompt_segment(prompt: list[int]) -> Segment:
    return Segment(-1, [], list(prompt), list(range(len(prompt))), [0.0] * len(prompt))


def build_record(segs: list[Segment], reprefill: bool = False) -> tuple[list[int], list[float], ExecutionRecord]:
    """Response token ids, their logprobs (0.0 where forced) and the record, from the text-order segments.

    `reprefill`: the segments come from the request executor (see `ExecutionRecord.reprefill`)."""
    index = {id(s): i for i, s in enumerate(segs)}
    position_ids: list[int] = []
    segment_ids: list[int] = []
    sampled: list[bool] = []
    visible: list[list[int]] = []
    for i, s in enumerate(segs):
        vis = sorted(index[id(v)] for v in s.visible)
        if vis and vis[-1] >= i:
            raise AssertionError("a segment sees a later segment: the executor broke text order")
        visible.append(vis)
        position_ids += s.positions
        segment_ids += [i] * len(s.tokens)
        sampled += [s.sampled] * len(s.tokens)
    for t, is_sampled in enumerate(sampled):
        # the sampled token's sequence predecessor must be its text predecessor (see module docstring)
        if is_sampled and t > 0 and segment_ids[t - 1] != segment_ids[t]:
            prev = segment_ids[t - 1]
            if prev not in visible[segment_ids[t]] or position_ids[t - 1] != position_ids[t] - 1:
                raise AssertionError(f"sampled token {t} does not follow its sequence predecessor")
    tokens = [tok for s in segs[1:] for tok in s.tokens]
    logprobs = [lp for s in segs[1:] for lp in s.logprobs]
    record = ExecutionRecord(
        position_ids=position_ids,
        segment_ids=segment_ids,
        segment_visible=visible,
        segment_request=[s.request for s in segs],
        sampled=sampled,
        reprefill=reprefill,
    )
    return tokens, logprobs, record
