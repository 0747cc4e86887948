"""The execution record of any trajectory: its own (an executor's), or plain decoding's.

Every layout starts from `record_of`, which also refuses what a layout cannot score.
"""

from __future__ import annotations

from parallax.contract.batch import ExecutionRecord, Trajectory


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


def record_of(t: Trajectory, layout: str = "threadweaver") -> ExecutionRecord:
    rec = t.record or sequential_record(len(t.prompt_ids), len(t.response_ids))
    if layout == "causal" and rec.reprefill and len({r for r in rec.segment_request if r >= 0}) > 1:
        raise ValueError(
            f"trajectory {t.uid}: its engine requests re-read their contexts as text (request executor, "
            "ExecutionRecord.reprefill), so a later branch saw only the prefix; one causal row cannot "
            "express that: use learner.layout=structured (copies, parallax/layouts/reprefill.py) or threadweaver"
        )
    if len(rec.segment_ids) != len(t.prompt_ids) + len(t.response_ids):
        raise ValueError(
            f"trajectory {t.uid}: record covers {len(rec.segment_ids)} tokens, row has "
            f"{len(t.prompt_ids) + len(t.response_ids)}"
        )
    return rec
