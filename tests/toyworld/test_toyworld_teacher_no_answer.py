"""The forgetful teacher (``teacher_no_answer``): train traces that stop before ``#### answer``."""

from __future__ import annotations

import pytest

from parallax import toyworld
from parallax.formats import parse
from parallax.toyworld.traces import final_line

Q = 0.3


@pytest.fixture(scope="module")
def splits():
    return toyworld.make_splits(4000, 200, seed=3, difficulty=(1, 2), teacher_no_answer=Q)


@pytest.fixture(scope="module")
def clean():
    return toyworld.make_splits(4000, 200, seed=3, difficulty=(1, 2))


def test_drop_rate_and_test_split_is_clean(splits):
    train, test = splits
    rate = sum(p.teacher_no_answer for p in train) / len(train)
    assert abs(rate - Q) < 0.03, rate  # 4,000 draws: binomial sd 0.007
    assert not any(p.teacher_no_answer for p in test)


def test_dropped_traces_are_the_clean_ones_minus_the_answer_line(splits, clean):
    train, _ = splits
    for p, c in zip(train, clean[0], strict=True):
        assert p.prompt == c.prompt and p.answer == c.answer  # same problems for every rate
        if not p.teacher_no_answer:
            assert p.traces == c.traces
            continue
        for kind, trace in p.traces.items():
            assert trace + final_line(int(p.answer)) == c.traces[kind], (kind, trace)
            assert "####" not in trace
            if kind != "serial":
                assert parse(trace, kind, strict=True).ok, trace  # still valid format


def test_both_slips_draw_independently():
    """Merge slips are the same with or without dropped answer lines, and may coincide."""
    merge_only, _ = toyworld.make_splits(2000, 100, seed=1, teacher_error=0.3)
    both, _ = toyworld.make_splits(2000, 100, seed=1, teacher_error=0.3, teacher_no_answer=0.3)
    assert [p.teacher_flawed for p in both] == [p.teacher_flawed for p in merge_only]
    assert any(p.teacher_flawed and p.teacher_no_answer for p in both)


@pytest.mark.parametrize("q", [-0.1, 1.0, "0.2", True])
def test_bad_rate_is_a_clear_error(q):
    with pytest.raises(ValueError, match="teacher_no_answer"):
        toyworld.make_splits(10, 2, seed=0, teacher_no_answer=q)
