"""expand_reprefill: one row per request-executor trajectory, worked by hand (the module docstring's example)."""

from __future__ import annotations

import pytest

from parallax.contract.batch import ExecutionRecord
from parallax.layouts.records import sequential_record
from parallax.layouts.reprefill import expand_reprefill

# Parallel-R1, two paths, as the request executor records it. Segments (tokens; request; sees):
# 0 prompt (10 11 12; -1; -)           1 main "<Parallel>.." (20 21; 0; 0)
# 2 forced <Path> (30; -1; 0 1)        3 path 1 "a a </Path>" (40 41 42; 1; 0 1 2)
# 4 forced <Path> (30; -1; 0 1)        5 path 2 "b b </Path>" (50 51 42; 2; 0 1 4)
# 6 forced <Summary> (60; -1; 0..5)    7 the join's continuation "s" (70; 0; 0..6)
SEGS = [[10, 11, 12], [20, 21], [30], [40, 41, 42], [30], [50, 51, 42], [60], [70]]
VISIBLE = [[], [0], [0, 1], [0, 1, 2], [0, 1], [0, 1, 4], [0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5, 6]]
REQUEST = [-1, 0, -1, 1, -1, 2, -1, 0]
# each request's own causal positions: path 2 starts after the prefix, like path 1; the join at its text index
POSITIONS = [[0, 1, 2], [3, 4], [5], [6, 7, 8], [5], [6, 7, 8], [13], [14]]


def _record() -> tuple[list[int], list[float], ExecutionRecord]:
    ids = [t for s in SEGS for t in s]
    seg = [i for i, s in enumerate(SEGS) for _ in s]
    sampled = [REQUEST[i] >= 0 for i in seg]
    logprobs = [-0.1 * (t + 1) if smp else 0.0 for t, smp in enumerate(sampled)]
    rec = ExecutionRecord([p for ps in POSITIONS for p in ps], seg, VISIBLE, REQUEST, sampled, reprefill=True)
    return ids, logprobs, rec


def test_a_later_branch_is_copied_after_the_causal_text():
    ids, logprobs, rec = _record()
    out_ids, out_lp, out = expand_reprefill(ids, logprobs, rec)
    # the 15 text tokens, then copies of path 2's <Path> (segment 8) and body (segment 9)
    assert out_ids == ids + [30, 50, 51, 42]
    assert out.segment_ids == rec.segment_ids + [8, 9, 9, 9]
    assert out.position_ids == list(range(15)) + [5, 6, 7, 8]  # text causal; copies continue the prefix (5 tokens)
    assert out.segment_visible[:8] == [list(range(s)) for s in range(8)]  # the text row is causal
    assert out.segment_visible[8:] == [[0, 1], [0, 1, 8]]  # the copy sees the prefix and its own <Path>
    assert out.segment_request == REQUEST + [-1, 2]
    # loss: main (cols 3 4), path 1 (6 7 8), the continuation (14) in the text; path 2 moved to its copy
    assert [t for t, x in enumerate(out.sampled) if x] == [3, 4, 6, 7, 8, 14, 16, 17, 18]
    assert out_lp[16:] == logprobs[10:13] and not out.reprefill


def test_copies_are_shared_and_exact_rows_stay_as_they_are():
    ids, logprobs, rec = _record()
    # a nested request inside path 2 (sees 0 1 4 5): it reuses the copies of 4 and 5, adds only itself
    rec.segment_visible.append([0, 1, 4, 5])
    rec.segment_request.append(3)
    rec.segment_ids.append(8)
    rec.position_ids.append(9)
    rec.sampled.append(True)
    out_ids, _, out = expand_reprefill(ids + [80], logprobs + [-2.0], rec)
    assert out_ids == ids + [80, 30, 50, 51, 42, 80] and out.segment_visible[-1] == [0, 1, 9, 10]
    assert out.position_ids[-1] == 9 and out.sampled[15] is False and out.sampled[-1] is True
    # a sequential record (one request, everything causal) is already one exact row: unchanged
    seq = sequential_record(3, 4)
    seq.reprefill = True
    assert expand_reprefill(list(range(7)), [0.0] * 7, seq)[2].segment_ids == seq.segment_ids


def test_mismatched_lengths_are_refused():
    ids, logprobs, rec = _record()
    with pytest.raises(ValueError, match="record covers"):
        expand_reprefill(ids[:-1], logprobs[:-1], rec)
