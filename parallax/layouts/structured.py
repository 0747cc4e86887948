"""The structured layout: one row per trajectory, scored with the engine's own segment visibility.

Each token attends to the segments its engine request saw, at the positions the engine used
(`parallax/layouts/masks.py` builds the attention): each branch sees the prefix and itself, the continuation
sees every branch as the branch computed it (the "Unseen" variant). Exact for the KV executor's
executed mode. A request-executor record (`ExecutionRecord.reprefill`, which says why) gets the
text causally plus copies of the requests that saw less than the text before them
(`parallax/layouts/reprefill.py`): exact too, with one prefix per trajectory. Cold-start SFT trains the same
layout on teacher traces (`structured_sft_batch`, records from `parallax/layouts/sft_records.py`).
"""

from __future__ import annotations

from dataclasses import replace

from parallax.contract.batch import ExecutionRecord, SFTBatch, TrainBatch, Trajectory, advantage_of
from parallax.layouts.masks import pack_records
from parallax.layouts.pad import padded_sft_batch, padded_train_batch
from parallax.layouts.records import record_of
from parallax.layouts.reprefill import expand_reprefill
from parallax.layouts.sft_records import teacher_record


def _with_layout(batch, records: list[ExecutionRecord]):
    """Attach the packed layout of `records` (one per row, covering the row) to a Train/SFT batch."""
    batch.position_ids, batch.segment_ids, batch.segment_visible = pack_records(
        records, width=int(batch.input_ids.shape[1])
    )
    return batch


def structured_sft_batch(
    problems: list, trace: str, tokenizer, mode: str = "executed", loss_on_forced: bool = False,
    reprefill: bool = False,
) -> SFTBatch:
    """Prompt + teacher trace + EOS with the layout the executor would run (`mode`), completion-only loss.

    Same token rows as ``parallax.layouts.causal.sft_batch``. The loss covers the tokens the engine will
    *sample* (forced tags are written by the executor, never by the model) unless `loss_on_forced`.
    `reprefill`: the layout the request executor runs (rollout.executor.dispatch=requests, vLLM):
    the same segments and visibility, but every request re-reads its context as text, so the rows
    are the text causally plus copies of later branches (parallax/layouts/reprefill.py).
    """
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
    batch = padded_sft_batch(rows, loss, tokenizer.pad_token_id)
    return _with_layout(batch, records)


def structured_train_batch(trajs: list[Trajectory], pad_id: int) -> TrainBatch:
    """One row per trajectory with its layout; the loss covers sampled tokens only.

    KV-executor and sequential records: the text-order row (``data.train_batch``'s) scored with
    the record's segment visibility and positions. Request-executor records (``reprefill``): the
    text-order row, causal, then copies of the requests it cannot hold (parallax/layouts/reprefill.py).
    Trajectories without a record (plain sequential decoding) get the causal layout.
    """
    rows, loss, old, adv, records = [], [], [], [], []
    for t in trajs:
        a = advantage_of(t)
        rec = record_of(t, "structured")
        ids, lp = t.prompt_ids + t.response_ids, [0.0] * len(t.prompt_ids) + list(t.logprobs)
        if rec.reprefill:
            ids, lp, rec = expand_reprefill(ids, lp, rec)
        keep = [float(x) for x in rec.sampled]
        rows.append(ids)
        loss.append(keep)
        old.append([x * k for x, k in zip(lp, keep)])
        adv.append([a * k for k in keep])
        records.append(rec)
    batch = padded_train_batch(rows, loss, old, adv, pad_id)
    return _with_layout(batch, records)
