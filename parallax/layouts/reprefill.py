"""One masked row per trajectory for request-executor records: the text, then copies of what it cannot hold.

A request-executor record (`ExecutionRecord.reprefill`, parallax/executors/requests.py) comes from
engine requests that each re-read their whole context causally, as text. Scoring one causal row
per request (the threadweaver layout) is exact but re-scores the shared prefix once per request.
This module builds a single row that is exact too:

* the *main row*: the trajectory in text order with plain causal attention, positions 0..L-1 —
  exactly what the last continuation read. Every segment whose engine context was all of the
  text before it (the main chain, the first branch of a block, every join) is scored here;
* *copies*: a segment whose request saw less than all the text before it (a later branch, which
  never saw its siblings; anything nested in it) is scored in a copy appended after the main row.
  A copy attends to the longest text prefix its context shares with the main row (those KVs are
  the same in both) and to copies of the rest of its context, chained; positions continue the
  context's length, as the engine's did. Copies are shared between requests that read the same
  context (a branch and its continuation, a branch and its nested branches).

Each sampled token is in the loss exactly once: where its own context is. The result is an
ordinary segment-visibility record (`reprefill=False`) over the longer row, so the structured
layout's masks, predictor index and block-sparse attention score it unchanged.

Worked example (Parallel-R1, two paths; `|` separates segments):
text  `P | <Parallel>.. | <Path> | a a </Path> | <Path> | b b </Path> | </Parallel><Summary> | s`,
segments 0..7. Path 2 (`<Path>` = 4, body = 5) saw segments 0, 1 only, so it is copied: the row is
the 8 text segments (causal) plus copies 8 (`<Path>`, sees 0, 1) and 9 (`b b </Path>`, sees 0, 1, 8),
with positions continuing from len(P) + len(segment 1). The body's loss moves to copy 9.
"""

from __future__ import annotations

from parallax.contract.batch import ExecutionRecord


def expand_reprefill(
    ids: list[int], logprobs: list[float], rec: ExecutionRecord
) -> tuple[list[int], list[float], ExecutionRecord]:
    """(row token ids, row logprobs, row record) of one request-executor trajectory.

    `ids` and `logprobs` cover prompt + response in text order (logprob 0 on the prompt);
    the returned record's `sampled` is the loss mask of the expanded row.
    """
    if len(ids) != len(rec.segment_ids) or len(logprobs) != len(ids):
        raise ValueError(f"record covers {len(rec.segment_ids)} tokens, row has {len(ids)}, logprobs {len(logprobs)}")
    n_seg = len(rec.segment_visible)
    cols: list[list[int]] = [[] for _ in range(n_seg)]
    for t, s in enumerate(rec.segment_ids):
        cols[s].append(t)
    L = len(ids)
    out_ids, out_lp = list(ids), list(logprobs)
    position_ids, segment_ids = list(range(L)), list(rec.segment_ids)
    visible = [list(range(s)) for s in range(n_seg)]  # the main row is causal
    request = list(rec.segment_request)
    loss = [False] * L
    node_cols: dict[int, list[int]] = {}
    nodes: dict[tuple[int, ...], int] = {}  # (main prefix length, copied segments...) -> new segment id
    for s in range(n_seg):
        chain = sorted(rec.segment_visible[s]) + [s]  # the engine request's context, then the segment
        j = 0
        while j < len(chain) and chain[j] == j:
            j += 1
        if j == len(chain):  # its context was all the text before it: exact in the main row
            for t in cols[s]:
                loss[t] = rec.sampled[t]
            continue
        seen, offset, key = list(range(j)), sum(len(cols[c]) for c in range(j)), (j,)
        for c in chain[j:]:
            key += (c,)
            if key not in nodes:
                nodes[key] = new = len(visible)
                visible.append(list(seen))
                request.append(rec.segment_request[c])
                node_cols[new] = []
                for i, t in enumerate(cols[c]):
                    node_cols[new].append(len(out_ids))
                    out_ids.append(ids[t])
                    out_lp.append(logprobs[t])
                    position_ids.append(offset + i)
                    segment_ids.append(new)
                    loss.append(False)
            seen.append(nodes[key])
            offset += len(cols[c])
        for t, col in zip(cols[s], node_cols[nodes[key]]):
            loss[col] = rec.sampled[t]
    return out_ids, out_lp, ExecutionRecord(position_ids, segment_ids, visible, request, loss)
