"""The threadweaver layout: one causal row per engine request, the trajectory's advantage broadcast.

A request's row is its visible context + its own tokens, positions as the engine used them. Works
with any attention backend (flash / varlen packing, no custom mask) at the cost of recomputing the
shared prefix once per request (tokens grow with branches x prefix) and of scoring a join's context
causally: a continuation row lets branch k attend to branches < k, which the KV executor never
did, so its continuation tokens are only approximately on-policy. Branch and main rows are exact.
For request-executor records (`ExecutionRecord.reprefill`) every row is exactly what the engine
computed.
"""

from __future__ import annotations

import torch

from parallax.contract.batch import TrainBatch, Trajectory, advantage_of
from parallax.layouts.pad import padded_train_batch
from parallax.layouts.records import record_of


def threadweaver_train_batch(trajs: list[Trajectory], pad_id: int) -> TrainBatch:
    """One causal row per engine request: its visible context + its own tokens, loss on its sampled tokens.

    A request's row is the context of its *last* segment (which, in the executor, sees every earlier
    segment of that request) plus that segment; positions are the engine's. Every sampled token is
    in exactly one row's loss, so token counts and the advantage sum match the other layouts.
    """
    ids, resp, old, adv = [], [], [], []
    for t in trajs:
        a = advantage_of(t)
        rec = record_of(t)
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
    # causal rows, positions 0..n-1: a join row is re-read flat, as ThreadWeaver's engine re-prefills it
    return padded_train_batch(ids, resp, old, adv, pad_id)
