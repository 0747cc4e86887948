"""The per-branch reward (``branch_acc``): every branch's steps checked, values worked by hand."""

from __future__ import annotations

import random

import pytest

import rewards
from parallax import toyworld
from rewards.branch import unit_correct

R1 = "<Parallel><Path>{a}</Path><Path>{b}</Path></Parallel><Summary>{m}</Summary> #### {ans}"


def test_values_by_hand():
    texts = [
        R1.format(a="3*4=12", b="5*6=30", m="12+30=42", ans=42),  # right, branches and join check: 1 + 0.5
        R1.format(a="3*4=12", b="5*6=31", m="12+30=42", ans=42),  # right answer, one bad branch: 1 + 0.5 * 2/3
        R1.format(a="3*4=12", b="5*6=31", m="12+31=44", ans=44),  # wrong, the first branch checks: -1 + 0.5 / 3
        "3*4=12 5*6=30 12+30=42 #### 42",  # serial: its main chain is one unit that checks: 1 + 0.5
        "3*4=12 5*6=30 12+30=41 #### 41",  # serial, a bad sum: the unit fails: -1 + 0
        "<Parallel><Path>3*4=12</Path>",  # malformed: no branch credit
    ]
    got = rewards.score_group("branch_acc", texts, "42")
    assert got.rewards == pytest.approx([1.5, 1 + 1 / 3, -1 + 1 / 6, 1.5, -1.0, -1.0])
    assert got.components["branch_share"] == pytest.approx([1.0, 2 / 3, 1 / 3, 1.0, 0.0, 0.0])
    weighted = rewards.score_group("branch_acc", texts[:2], "42", params={"branch_weight": 3.0, "wrong": 0.0})
    assert weighted.rewards == pytest.approx([4.0, 3.0])
    # A trial fork's main chain states the winner without an equation: only its branches count.
    trial = R1.format(a="2*7=14 14%10=4 no", b="3*7=21 21%10=1 yes", m="x=3", ans=3)
    assert rewards.score_group("branch_acc", [trial], "3").components["branch_share"] == [1.0]
    wrong_verdict = R1.format(a="2*7=14 14%10=4 yes", b="3*7=21 21%10=1 yes", m="x=3", ans=3)
    assert rewards.score_group("branch_acc", [wrong_verdict], "3").components["branch_share"] == [0.5]


@pytest.mark.parametrize(("text", "truth", "ok"), [
    ("3*7=21 21%10=1 yes", "3", True),
    ("3*7=21 21%10=1 no", "3", False),  # right arithmetic, wrong verdict
    ("2*7=14 14%10=4 no", "3", True),
    ("2*7=14 14%10=4 yes", "3", False),
    ("2*7=15 15%10=5 no", "3", False),  # a wrong product
    ("x=2\n2*7=14 14%10=4 no", "3", True),  # a Parason thread: header, then the work
    ("2*7=14 14%10=4 no 3*7=21 21%10=1 yes x=3", "3", True),  # a serial trial: each verdict on its candidate
    ("2*7=14 14%10=4 yes 3*7=21 21%10=1 yes x=3", "3", False),
    ("12+30+7=49", "49", True),
    ("2+3*4=14", "14", True),  # precedence as written
    ("twelve", "12", False),  # no step to check
])
def test_one_unit(text, truth, ok):
    assert unit_correct(text, truth) is ok


@pytest.mark.parametrize("kind", ["parallel_r1", "parason"])
@pytest.mark.parametrize("shape", toyworld.traces.SHAPES)
def test_teacher_traces_earn_full_branch_credit_and_one_bad_branch_loses_its_share(kind, shape):
    rng = random.Random(3)
    for _ in range(30):
        _, sol = (toyworld.tasks.sample_subtask if rng.random() < 0.5 else toyworld.tasks.sample_trial)(rng, 2)
        text = toyworld.traces.render_all(sol, shape=shape)[kind]
        got = rewards.score_group("branch_acc", [text], str(sol.answer), params={"format": kind})
        assert got.components["branch_share"] == [1.0] and got.rewards == [1.5], text
        # The last part's work, where the block holds it, one digit off: that branch alone fails.
        work = sol.parts[-1].work
        head, tail = text.rsplit(work, 1)
        bad = head + work.replace("=", "=1", 1) + tail
        share = rewards.score_group("branch_acc", [bad], str(sol.answer),
                                    params={"format": kind}).components["branch_share"][0]
        # + the main chain when it holds an equation: a sum joining the branches, or serial work before the block
        units = len(sol.parts) + (sol.kind == "subtask" or shape != "fork")
        assert share == pytest.approx((units - 1) / units), bad
