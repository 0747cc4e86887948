"""contract/seeds.py: every stream a run samples from is its own (the step streams, the evaluation's,
and the sub-streams of dynamic-sampling rounds, executor rounds and requests)."""

from __future__ import annotations

import pytest

from contract.seeds import DYNAMIC_ROUND, EVAL_SEED, EXECUTOR_ROUND, REQUEST, RUN_STRIDE, step_seed, substream


def test_step_seeds_are_the_step_plus_the_runs_stride():
    assert step_seed(0, 0) == 0 and step_seed(5, 0) == 5  # seed 0: the step alone (recorded runs unchanged)
    assert step_seed(5, 2) == 5 + 2 * RUN_STRIDE == 15_839_991


def test_no_two_streams_of_a_run_meet():
    steps = [step_seed(t, s) for s in range(4) for t in range(3000)]
    subs = [substream(seed, kind, i) for seed in steps[::7] + [EVAL_SEED]
            for kind, n in ((DYNAMIC_ROUND, 4), (EXECUTOR_ROUND, 12), (REQUEST, 12)) for i in range(1, n)]
    assert len(set(steps)) == len(steps) and EVAL_SEED not in steps
    assert len(set(subs)) == len(subs)  # sub-streams are distinct from each other ...
    assert min(subs) >= 2**32 > max(steps + [EVAL_SEED]) and max(subs) < 2**63  # ... and above every step seed
    # the collisions the old offsets made: round 1 of step 0 was the evaluation's stream (seed + 1_000_003),
    # and request 1 of step 0 was request 0 of step 1 (seed + i)
    assert substream(step_seed(0, 0), DYNAMIC_ROUND, 1) != EVAL_SEED
    assert substream(step_seed(0, 0), REQUEST, 1) != step_seed(1, 0)


def test_substreams_are_deterministic_and_keyed_on_all_three():
    a = substream(12, EXECUTOR_ROUND, 3)
    assert a == substream(12, EXECUTOR_ROUND, 3)
    assert len({a, substream(13, EXECUTOR_ROUND, 3), substream(12, REQUEST, 3), substream(12, EXECUTOR_ROUND, 4)}) == 4
    with pytest.raises(ValueError, match="non-negative"):
        substream(-1, REQUEST, 0)
