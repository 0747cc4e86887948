"""Reward schedules, worked by hand: Parallel-R1's S2 alternation and the exploration scaffold."""

from __future__ import annotations

import json

import pytest

from curricula import Curriculum, Phase, Slot, Stage, curriculum_from_dict, reward_at

A, T = "accuracy", "tiered"
S2 = Phase((Slot(A, steps=8), Slot(T, steps=2)))

# S2 over 30 steps: per 10-step window, steps 0-7 accuracy and 8-9 tiered.
S2_30 = [A] * 8 + [T] * 2 + [A] * 8 + [T] * 2 + [A] * 8 + [T] * 2
# Scaffold, switch at 20: two S2 windows, then accuracy only.
SCAFFOLD_20_OF_30 = [A] * 8 + [T] * 2 + [A] * 8 + [T] * 2 + [A] * 10
# Switch mid-window (at 13, cycle 2 accuracy + 1 tiered): the switch wins over the cycle.
SWITCH_13 = [A, A, T, A, A, T, A, A, T, A, A, T, A] + [T] * 7


@pytest.mark.parametrize("schedule,expected", [
    ((S2,), S2_30),
    ((Phase(S2.cycle, steps=20), Phase((Slot(A),))), SCAFFOLD_20_OF_30),
    ((Phase((Slot(A, steps=2), Slot(T)), steps=13), Phase((Slot(T),))), SWITCH_13),
    ((Phase((Slot(A),), steps=5),), [A] * 20),  # a closed last phase: its last reward holds
])
def test_schedule_resolves_per_step(schedule, expected):
    assert [reward_at(schedule, i).name for i in range(len(expected))] == expected


def test_s2_through_the_machine_counts_from_the_stage_start_and_logs_the_reward():
    # Three SFT steps first: the S2 window must still start at the first RL step.
    c = Curriculum([Stage("sft", "sft", 3), Stage("rl", "rl", 30, schedule=(S2,))])
    logged = []
    while not c.done:
        logged.append(c.metrics())
        assert c.stage.reward == c.reward_for_step().name if c.stage.kind == "rl" else c.stage.reward is None
        c.update({})
    assert [m["curriculum/reward"] for m in logged] == ["sft"] * 3 + S2_30
    assert [m["curriculum/reward/tiered"] for m in logged] == [0.0] * 3 + [float(r == T) for r in S2_30]
    assert {m["curriculum/stage"] for m in logged[3:]} == {1}


def test_scaffold_switch_is_visible_in_the_logged_metrics():
    c = curriculum_from_dict("scaffold", {"dapo": {"steps": 30, "schedule": [
        {"steps": 20, "cycle": [{"reward": A, "steps": 8}, {"reward": T, "steps": 2}]},
        {"cycle": [{"reward": A}]}]}})
    logged = []
    while not c.done:
        logged.append(c.metrics())
        c.update({})
    assert [m["curriculum/reward"] for m in logged] == SCAFFOLD_20_OF_30
    # After the switch no step uses the tiered reward; the stage never changed (no optimiser reset).
    assert sum(m["curriculum/reward/tiered"] for m in logged[20:]) == 0.0
    assert [h["stage"] for h in c.history] == ["dapo"]


def test_slot_params_reach_the_resolved_stage():
    stage = Stage("rl", "rl", 4, schedule=(Phase((Slot(A), Slot(T, {"parallel_correct": 1.5}))),))
    assert [(stage.at(i).reward, stage.at(i).reward_params) for i in range(3)] == [
        (A, {}), (T, {"parallel_correct": 1.5}), (A, {})]
    assert stage.at(1).schedule == ()  # the resolved stage is one step's reward, not the schedule


def test_resume_mid_window_continues_the_same_sequence():
    def make():
        return Curriculum([Stage("sft", "sft", 2), Stage("rl", "rl", 30, schedule=(Phase(S2.cycle, 20),
                                                                                     Phase((Slot(A),))))])

    full, a = make(), make()
    expected = []
    while not full.done:
        expected.append((full.stage.name, full.stage.reward))
        full.update({})
    got = []
    for _ in range(11):  # stop inside the first S2 window's tiered steps (stage step 9)
        got.append((a.stage.name, a.stage.reward))
        a.update({})
    b = make()
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    while not b.done:
        got.append((b.stage.name, b.stage.reward))
        b.update({})
    assert got == expected and b.global_step == 32
