"""The imperfect teacher (``teacher_error``): slips only in the merge, at the asked rate, train only."""

from __future__ import annotations

import re

import pytest
from toyworld_checks import check_step, content_tokens, solve

from parallax import toyworld
from parallax.formats import parse

ANSWER_LINE = re.compile(r" #### (-?\d+)\Z")
P = 0.3


@pytest.fixture(scope="module")
def splits():
    return toyworld.make_splits(4000, 200, seed=3, difficulty=(1, 2, 3), teacher_error=P)


def test_slip_rate_and_test_split_is_clean(splits):
    train, test = splits
    rate = sum(p.teacher_flawed for p in train) / len(train)
    assert abs(rate - P) < 0.03, rate  # 4,000 draws: binomial sd 0.007
    assert not any(p.teacher_flawed for p in test)


def test_same_problems_for_every_rate(splits):
    clean, clean_test = toyworld.make_splits(4000, 200, seed=3, difficulty=(1, 2, 3))
    train, test = splits
    assert [p.prompt for p in train] == [p.prompt for p in clean]
    assert [p.traces for p in test] == [p.traces for p in clean_test]
    # unflawed problems keep the clean teacher's traces exactly
    assert all(a.traces == b.traces for a, b in zip(train, clean) if not a.teacher_flawed)


def test_flawed_traces_are_valid_with_right_branches_and_a_wrong_answer(splits):
    train, _ = splits
    clean = {p.uid: p for p in toyworld.make_splits(4000, 200, seed=3, difficulty=(1, 2, 3))[0]}
    flawed = [p for p in train if p.teacher_flawed]
    assert len(flawed) > 1000
    for p in flawed:
        family, truth = solve(p.prompt)
        assert p.answer == str(truth)  # the reward still checks the true answer
        for kind, trace in p.traces.items():
            m = ANSWER_LINE.search(trace)
            assert m and m.group(1) != p.answer, (kind, trace)
            if kind != "serial":
                assert parse(trace, kind, strict=True).ok, trace
        # Everything before the merge is the clean teacher's text, and true.
        good = clean[p.uid].traces["parallel_r1"]
        bad = p.traces["parallel_r1"]
        cut = bad.index("<Summary>")
        assert bad[:cut] == good[:cut]
        steps = content_tokens(bad[:cut])
        assert all(check_step(t) for t in steps), bad
        if family == "trial":  # names a candidate whose branch said no
            wrong = int(m.group(1))
            assert re.search(rf"<Path>{wrong}\*\d+=\d+ \d+%10=\d no</Path>", bad), bad
        else:  # a sum off by exactly ten
            assert abs(int(m.group(1)) - truth) == 10, bad


@pytest.mark.parametrize("p", [-0.1, 1.0, "0.2", True])
def test_bad_rate_is_a_clear_error(p):
    with pytest.raises(ValueError, match="teacher_error"):
        toyworld.make_splits(10, 2, seed=0, teacher_error=p)
