"""A step's data: scored groups (parallax.contract.batch.ScoredGroup) and the filters and folds over them --
DAPO's dynamic sampling, the sample table, GRPO's groups -- on groups built by hand."""

from __future__ import annotations

import pytest

from actors import algo
from orchestrator import dynamic
from orchestrator.samples import sample_rows
from parallax.contract.batch import Prompt, ScoredGroup, StepSamples, Trajectory


def group(uid: str, correct: list[bool], rewards: list[float] | None = None, answer: str = "7") -> ScoredGroup:
    samples = [Trajectory(uid, [1], [2, 3], [-0.5, -0.5], "stop", f"{uid}:{k}") for k in range(len(correct))]
    rewards = rewards if rewards is not None else [float(c) for c in correct]
    return ScoredGroup(Prompt(uid, f"question {uid}", [1], answer), samples, rewards, correct,
                       {"acc": [float(c) for c in correct]})


def texts(s: StepSamples) -> list[str]:
    return [x.text for x in s.trajectories]


def test_a_group_refuses_scores_that_do_not_match_its_samples():
    g = group("a", [True, False])
    with pytest.raises(ValueError, match="2 samples but scores of sizes \\[1, 2, 2\\]"):
        ScoredGroup(g.prompt, g.samples, [1.0], g.correct, g.components)
    with pytest.raises(ValueError, match="sizes \\[2, 2, 3\\]"):
        ScoredGroup(g.prompt, g.samples, g.rewards, g.correct, {"acc": [1.0, 0.0, 1.0]})
    with pytest.raises(ValueError, match="samples of prompts \\['b'\\] in the group of prompt 'a'"):
        ScoredGroup(g.prompt, [g.samples[0], group("b", [True]).samples[0]], g.rewards, g.correct)
    assert g.informative and not group("b", [True, True]).informative and not group("c", [False, False]).informative


def test_flat_views_are_group_by_group_and_a_prompt_drawn_twice_is_two_grpo_groups():
    s = StepSamples([group("a", [True, False], answer="1"), group("a", [True, True], answer="1"),
                     group("b", [False, True], answer="2")])
    assert texts(s) == ["a:0", "a:1", "a:0", "a:1", "b:0", "b:1"]
    assert s.correct == [True, False, True, True, False, True] and s.truths == ["1"] * 4 + ["2"] * 2
    assert s.group_ids == [0, 0, 1, 1, 2, 2] and [p.uid for p in s.prompts] == ["a", "a", "b"]
    # by group: (1, 0) -> +-0.7071, (1, 1) -> 0, (0, 1) -> -+0.7071. Grouped by uid instead, the four
    # samples of "a" (mean 0.75) would give the all-correct group a nonzero advantage.
    adv = [round(a, 4) for a in algo.grpo_advantages(s.rewards, s.group_ids)]
    assert adv == [0.7071, -0.7071, 0.0, 0.0, -0.7071, 0.7071]
    assert round(algo.grpo_advantages(s.rewards, [x.uid for x in s.trajectories])[2], 4) == 0.5


def test_dynamic_sampling_keeps_informative_groups_in_the_order_they_were_drawn():
    step = StepSamples([group("a", [True, False]), group("b", [True, True]), group("c", [False, True])],
                       {"reward/mean": 0.75, "rollout/retries": 0.0})
    rounds = []

    def draw(r: int) -> StepSamples:
        rounds.append(r)
        return StepSamples([group("d", [False, False]), group("e", [True, False], [0.9, 0.1]),
                            group("f", [False, True])], {"reward/mean": 0.0})

    out = dynamic.refill(step, max_rounds=3, draw=draw)
    assert rounds == [1]  # one round brought enough
    assert [g.prompt.uid for g in out.groups] == ["a", "c", "e"]
    assert out.metrics["rollout/filtered"] == 2 and out.metrics["rollout/dynamic_rounds"] == 1
    assert out.metrics["rollout/dynamic_short"] == 0 and out.metrics["rollout/samples"] == 6
    assert out.metrics["reward/mean"] == pytest.approx((1 + 0 + 0 + 1 + 0.9 + 0.1) / 6)
    assert out.metrics["rollout/retries"] == 0.0  # the step's own generation's metrics stay


def test_dynamic_sampling_still_short_tops_up_with_the_steps_own_filtered_groups():
    step = StepSamples([group("a", [True, True]), group("b", [True, False]), group("c", [False, False])])
    out = dynamic.refill(step, max_rounds=2, draw=lambda r: StepSamples([group(f"r{r}", [True, True])]))
    assert [g.prompt.uid for g in out.groups] == ["b", "a", "c"]  # informative first, then the step's own in order
    assert out.metrics["rollout/dynamic_rounds"] == 2 and out.metrics["rollout/dynamic_short"] == 2
    assert out.metrics["rollout/filtered"] == 4
    assert dynamic.refill(step, max_rounds=0,
                          draw=lambda r: pytest.fail("no round allowed")).groups[0].prompt.uid == "b"


def test_the_sample_table_takes_each_groups_first_sample_before_any_second():
    s = StepSamples([group("a", [True, False], [1.0, 0.0]), group("b", [False, True, True], [0.0, 0.5, 1.0])])
    rows = sample_rows(s, "parallel_r1", 4)
    assert [r["completion"] for r in rows] == ["a:0", "b:0", "a:1", "b:1"]
    assert [r["reward"] for r in rows] == [1.0, 0.0, 0.0, 0.5] and [r["correct"] for r in rows] == [True, False,
                                                                                                     False, True]
    assert rows[1]["prompt"] == "question b" and rows[1]["answer"] == "7"
