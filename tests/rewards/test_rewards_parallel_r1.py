"""Parallel-R1 rewards, the S2 schedule, the registry and group-level API."""

import pytest

import rewards
from rewards import (
    BaseParams,
    GroupScore,
    RewardSpec,
    get_reward,
    make_params,
    register,
    reward_names,
    score_group,
)
from rewards.parallel_r1 import S2Params, s2_uses_tiered

PAR = (
    "Try both. <Parallel><Path>6*7=42</Path><Path>7*6=42</Path><Summary>both 42</Summary></Parallel> #### 42"
)
PAR_WRONG = PAR.replace("#### 42", "#### 40")
SER = "6*7=42 #### 42"
SER_WRONG = "6*7=41 #### 41"
BROKEN = "<Parallel><Path>6*7=42</Path> #### 42"  # one path, never closed: malformed
IN_BRANCH = "<Parallel><Path>#### 42</Path><Path>x</Path><Summary>s</Summary></Parallel> done"
GROUP = [PAR, SER, PAR_WRONG, SER_WRONG, BROKEN, IN_BRANCH]


@pytest.mark.parametrize(
    "name, params, expected",
    [
        # format: valid 1 / invalid 0; only BROKEN is malformed
        ("format", {}, [1, 1, 1, 1, 0, 1]),
        ("format", {"require_parallel": True}, [1, 0, 1, 0, 0, 1]),
        # accuracy +-1; an answer inside a branch does not count (IN_BRANCH has no final answer)
        ("accuracy", {}, [1, 1, -1, -1, -1, -1]),
        ("s1", {}, [1, 1, -1, -1, -1, -1]),
        # R_parallel x R_acc: 1 only when correct AND a well-formed parallel unit exists
        ("parallel_acc", {}, [1, 0, 0, 0, 0, 0]),
        ("parallel_acc", {"hit": 2.0, "miss": -0.5}, [2, -0.5, -0.5, -0.5, -0.5, -0.5]),
        # tiered: 1.2 parallel+correct, 1.0 correct, -1.0 else
        ("tiered", {}, [1.2, 1.0, -1, -1, -1, -1]),
        ("tiered", {"parallel_correct": 2, "correct": 0.5, "wrong": 0}, [2, 0.5, 0, 0, 0, 0]),
    ],
)
def test_reward_table(name, params, expected):
    out = score_group(name, GROUP, "42", params=params)
    assert out.rewards == pytest.approx(expected)
    assert len(out.components["acc"]) == len(GROUP)


def test_components_and_correct_are_binary_accuracy():
    out = score_group("tiered", GROUP, "42")
    assert out.correct == [True, True, False, False, False, False]
    assert out.components["parallel"] == [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    assert out.components["format_valid"] == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0]


def test_broken_block_answer_before_it_still_counts():
    # the final part of a malformed text is the main chain of its valid prefix
    out = score_group("accuracy", ["6*7 #### 42 then <Parallel><Path>oops"], "42")
    assert out.correct == [True]


def test_s2_schedule_over_30_steps():
    p = S2Params()
    tiered_steps = [s for s in range(30) if s2_uses_tiered(s, p)]
    assert tiered_steps == [8, 9, 18, 19, 28, 29]  # 8 accuracy steps, then 2 tiered, per window
    for step in range(30):
        out = score_group("s2", [PAR, SER, SER_WRONG], "42", step=step)
        if step % 10 >= 8:
            assert out.rewards == [1.2, 1.0, -1.0], step
            assert out.components["s2_tiered"] == [1.0] * 3
        else:
            assert out.rewards == [1.0, 1.0, -1.0], step
    # all numbers are config: window 4, 3 accuracy steps
    assert [s for s in range(8) if s2_uses_tiered(s, S2Params(window=4, acc_steps=3))] == [3, 7]
    with pytest.raises(ValueError):
        S2Params(window=10, acc_steps=11)
    with pytest.raises(ValueError):
        score_group("s2", [SER], "42", step=-1)


def test_registry_refuses_duplicates_and_unknowns():
    assert {"format", "accuracy", "s1", "s2", "tiered", "parallel_acc", "pa_grpo", "acceleration"} <= set(
        reward_names()
    )
    with pytest.raises(ValueError, match="already registered"):
        register("tiered")(lambda samples, ctx, p: None)
    with pytest.raises(ValueError, match="unknown reward"):
        get_reward("nope")
    with pytest.raises(ValueError, match="expects float"):
        make_params("tiered", {"correct": "high"})
    with pytest.raises(ValueError, match="format must be"):
        make_params("tiered", {"format": "xml"})
    assert make_params("format", {"require_parallel": "true"}).require_parallel is True
    entry, p = RewardSpec("s2", {"window": "5", "acc_steps": 4}).resolve()
    assert (entry.name, p.window, p.acc_steps, p.parallel_correct) == ("s2", 5, 4, 1.2)
    with pytest.raises(ValueError, match="acc_steps"):
        RewardSpec("s2", {"window": 5}).resolve()  # 8 accuracy steps do not fit a window of 5


def test_custom_reward_registration_and_step_context():
    @register("test_step_echo", params=BaseParams, needs_accuracy=False, needs_parse=False)
    def step_echo(samples, ctx, p):
        """Reward = the global step (checks the context reaches the reward)."""
        return GroupScore([float(ctx.step)] * len(samples), [s.correct for s in samples])

    assert score_group("test_step_echo", ["a", "b"], "1", step=7).rewards == [7.0, 7.0]
    assert "test_step_echo" in rewards.reward_names()


def test_empty_group_and_non_str_text():
    assert score_group("accuracy", [], "1").rewards == []
    out = score_group("accuracy", ["#### 1", None], "1")
    assert out.rewards == [1.0, -1.0] and out.errors == {"bad_input": 1}
