"""parallax/contract/seeds.py: every stream a run samples from is its own (the step streams, the evaluation's,
and the sub-streams of dynamic-sampling rounds, executor rounds and requests)."""

from __future__ import annotations

import pytest

from parallax.contract.seeds import (
    CHUNKS,
    DYNAMIC_ROUND,
    EVAL_SEED,
    EXECUTOR_ROUND,
    REQUEST,
    RUN_STRIDE,
    chunk_seed,
    step_seed,
    substream,
)


def test_step_seeds_are_the_step_plus_the_runs_stride():
    assert step_seed(0, 0) == 0 and step_seed(5, 0) == 5  # seed 0: the step alone (recorded runs unchanged)
    assert step_seed(5, 2) == 5 + 2 * RUN_STRIDE == 15_839_991


def test_no_two_streams_of_a_run_meet():
    steps = [step_seed(t, s) for s in range(4) for t in range(3000)]
    subs = [substream(seed, kind, i) for seed in steps[::7] + [EVAL_SEED]
            for kind, n in ((DYNAMIC_ROUND, 4), (EXECUTOR_ROUND, 12), (REQUEST, 12)) for i in range(1, n)]
    assert len(set(steps)) == len(steps) and EVAL_SEED not in steps
    assert len(set(subs)) == len(subs)  # sub-streams are distinct from each other ...
    assert min(subs) >= 2**32 > max(steps + [EVAL_SEED]) and max(subs) < 2**53  # ... and above every step seed
    assert chunk_seed(max(subs), CHUNKS - 1) < 2**63  # a torch generator's seed, also per rollout actor
    # the collisions the old offsets made: round 1 of step 0 was the evaluation's stream (seed + 1_000_003),
    # and request 1 of step 0 was request 0 of step 1 (seed + i)
    assert substream(step_seed(0, 0), DYNAMIC_ROUND, 1) != EVAL_SEED
    assert substream(step_seed(0, 0), REQUEST, 1) != step_seed(1, 0)


def test_substreams_are_deterministic_and_keyed_on_all_three():
    assert substream(12, REQUEST, 0) == 12  # index 0: the call's own stream
    a = substream(12, EXECUTOR_ROUND, 3)
    assert a == substream(12, EXECUTOR_ROUND, 3)
    assert len({a, substream(13, EXECUTOR_ROUND, 3), substream(12, REQUEST, 3), substream(12, EXECUTOR_ROUND, 4)}) == 4
    with pytest.raises(ValueError, match="non-negative"):
        substream(-1, REQUEST, 0)


def test_chunk_seeds_are_the_recorded_formula_and_bounded():
    assert [chunk_seed(7, i) for i in range(3)] == [7063, 7064, 7065]  # seed * 1009 + i, as every recorded run
    with pytest.raises(ValueError, match="at most 1009 rollout actors"):
        chunk_seed(7, CHUNKS)
