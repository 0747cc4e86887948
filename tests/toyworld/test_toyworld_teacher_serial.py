"""The teacher that forks only sometimes (``teacher_serial``): some train traces are serial."""

from __future__ import annotations

import pytest

from parallax import toyworld
from parallax.formats import parse
from parallax.formats.metrics import compute_metrics

S = 0.4


@pytest.fixture(scope="module")
def splits():
    return toyworld.make_splits(3000, 150, seed=5, difficulty=(1, 2), teacher_serial=S)


@pytest.fixture(scope="module")
def clean():
    return toyworld.make_splits(3000, 150, seed=5, difficulty=(1, 2))


def test_serial_rate_and_test_split_is_clean(splits, clean):
    train, test = splits
    rate = sum(p.teacher_serial for p in train) / len(train)
    assert abs(rate - S) < 0.04, rate  # 3,000 draws: binomial sd 0.009
    assert not any(p.teacher_serial for p in test)
    assert [p.traces for p in test] == [p.traces for p in clean[1]]


def test_serial_problems_carry_the_serial_trace_for_every_kind(splits, clean):
    train, _ = splits
    for p, c in zip(train, clean[0], strict=True):
        assert p.prompt == c.prompt and p.answer == c.answer  # same problems for every rate
        if not p.teacher_serial:
            assert p.traces == c.traces
            continue
        assert p.traces == {kind: c.traces["serial"] for kind in c.traces}
        assert "<Parallel>" not in p.traces["parallel_r1"] and p.traces["serial"].endswith(" #### " + p.answer)
        # A serial trace is a valid Parallel-R1 text with no parallel block: R_parallel is 0 there.
        result = parse(p.traces["parallel_r1"], "parallel_r1", strict=True)
        assert result.ok and compute_metrics(result, "parallel_r1").num_blocks == 0, result


def test_serial_draws_are_independent_of_the_other_slips():
    no_answer, _ = toyworld.make_splits(2000, 100, seed=2, teacher_no_answer=0.3)
    both, _ = toyworld.make_splits(2000, 100, seed=2, teacher_no_answer=0.3, teacher_serial=0.5)
    assert [p.teacher_no_answer for p in both] == [p.teacher_no_answer for p in no_answer]
    forgot_serial = [p for p in both if p.teacher_serial and p.teacher_no_answer]
    assert forgot_serial and all("####" not in p.traces["parallel_r1"] for p in forgot_serial)


@pytest.mark.parametrize("s", [-0.1, 1.0, "0.5", True])
def test_bad_rate_is_a_clear_error(s):
    with pytest.raises(ValueError, match="teacher_serial"):
        toyworld.make_splits(10, 2, seed=0, teacher_serial=s)
