"""A step's data: one record per sample (parallax.contract.batch.Trajectory, carrying its score and then its
advantage) in scored groups, and the filters and folds over them -- GRPO's advantages, DAPO's dynamic
sampling, the sample table -- on groups built by hand. Nothing is joined back by position: reordering the
groups, or the samples in a group, changes no sample's advantage, row or statistic."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

from actors import algo
from orchestrator import dynamic
from orchestrator.generation import scored
from orchestrator.samples import sample_rows
from orchestrator.structure import sample_stats
from parallax.contract.batch import Prompt, SampleScore, ScoredGroup, StepSamples, Trajectory
from parallax.formats import text_stats
from parallax.layouts.layout import build_train_batch

FORK = "<Parallel><Path>3*4=12</Path><Path>5*6=30</Path><Summary>12+30=42</Summary></Parallel> #### 7"


def _score(text: str, correct: bool, reward: float) -> SampleScore:
    return SampleScore(reward, correct, {"acc": float(correct)}, {**text_stats(text, "parallel_r1"), "steps_ok": 0.0})


def group(uid: str, correct: list[bool], rewards: list[float] | None = None, answer: str = "7",
          tag: str = "") -> ScoredGroup:
    """A prompt's group: every other sample forks; `tag` tells apart the texts of a prompt drawn twice."""
    rewards = rewards if rewards is not None else [float(c) for c in correct]
    texts = [f"{uid}{tag}:{k}" if k % 2 else FORK.replace("3*4", f"{uid}{tag}{k}*4") for k in range(len(correct))]
    samples = [Trajectory(uid, [1, 5], [2, 3 + k, 4][: 1 + k % 3], [-0.5] * (1 + k % 3), "stop", t)
               for k, t in enumerate(texts)]
    return scored(Prompt(uid, f"question {uid}", [1, 5], answer), samples,
                  [_score(t, c, r) for t, c, r in zip(texts, correct, rewards)])


def texts(s: StepSamples) -> list[str]:
    return [x.text for x in s.trajectories]


def test_a_group_refuses_samples_unscored_or_of_another_prompt_and_scores_that_do_not_match():
    g = group("a", [True, False])
    with pytest.raises(ValueError, match="1 of the 2 samples of prompt 'a' are not scored"):
        ScoredGroup(g.prompt, [g.samples[0], replace(g.samples[1], score=None)])
    with pytest.raises(ValueError, match="samples of prompts \\['b'\\] in the group of prompt 'a'"):
        ScoredGroup(g.prompt, [g.samples[0], group("b", [True]).samples[0]])
    with pytest.raises(RuntimeError, match="returned 1 scores for the 2 samples of prompt 'a'"):
        scored(g.prompt, g.samples, [g.samples[0].score])
    assert g.informative and not group("b", [True, True]).informative and not group("c", [False, False]).informative


def test_advantages_are_a_fold_over_groups_and_a_prompt_drawn_twice_is_two_grpo_groups():
    s = algo.set_advantages(StepSamples([group("a", [True, False], answer="1"), group("a", [True, True], answer="1"),
                                         group("b", [False, True], answer="2")]))
    # by group: (1, 0) -> +-0.7071, (1, 1) -> 0, (0, 1) -> -+0.7071. Grouped by uid instead, the four
    # samples of "a" (mean 0.75) would give the all-correct group a nonzero advantage.
    assert [round(x.advantage, 4) for x in s.trajectories] == [0.7071, -0.7071, 0.0, 0.0, -0.7071, 0.7071]
    flat = algo.grpo_advantages([x.score.reward for x in s.trajectories], [0, 0, 1, 1, 2, 2])
    assert [x.advantage for x in s.trajectories] == pytest.approx(flat, rel=1e-6)  # verl's call over the step
    with pytest.raises(ValueError, match="without an advantage"):
        build_train_batch("causal", [replace(x, advantage=None) for x in s.trajectories], 0)


def test_no_fold_depends_on_the_order_of_the_groups_or_of_a_groups_samples():
    step = StepSamples([group("a", [True, False, False]), group("b", [True, True, False], [1.0, 0.7, 0.1]),
                        group("c", [False, False]), group("a", [True, True, True, False], tag="again")])
    rng = random.Random(0)
    shuffled = StepSamples(rng.sample([ScoredGroup(g.prompt, rng.sample(g.samples, len(g.samples)))
                                       for g in step.groups], len(step.groups)))
    assert texts(shuffled) != texts(step)
    a, b = algo.set_advantages(step), algo.set_advantages(shuffled)

    def by_text(s: StepSamples) -> dict[str, float]:
        return {x.text: x.advantage for x in s.trajectories}

    assert by_text(a) == by_text(b) and any(by_text(a).values())
    assert sample_stats(a, "p") == sample_stats(b, "p")
    for layout in ("causal", "structured"):
        ra, rb = (build_train_batch(layout, s.trajectories, 0) for s in (a, b))
        rows = {}
        for x, adv, ids in zip(a.trajectories, ra.advantages, ra.input_ids):
            rows[x.text] = (adv, ids)
        for x, adv, ids in zip(b.trajectories, rb.advantages, rb.input_ids):  # each record's own row, as before
            want_adv, want_ids = rows[x.text]
            n = min(len(ids), len(want_ids))
            assert torch.equal(adv[:n], want_adv[:n]) and torch.equal(ids[:n], want_ids[:n]), (layout, x.text)


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
    rows = sample_rows(s, 4)
    assert [r["completion"] for r in rows] == [x.text for x in (s.groups[0].samples[0], s.groups[1].samples[0],
                                                                s.groups[0].samples[1], s.groups[1].samples[1])]
    assert [r["reward"] for r in rows] == [1.0, 0.0, 0.0, 0.5] and [r["correct"] for r in rows] == [True, False,
                                                                                                     False, True]
    assert rows[1]["prompt"] == "question b" and rows[1]["answer"] == "7"
    assert [r["blocks"] for r in rows] == [1, 1, 0, 0]  # each record's own parse: a fork, then plain text
    assert rows[0]["branches"] == 2 and rows[2]["branches"] == 0 and all(r["valid"] for r in rows)
