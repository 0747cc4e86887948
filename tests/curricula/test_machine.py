"""The curriculum state machine: transitions, skipping, serialisation."""

from __future__ import annotations

import pytest

from curricula import Curriculum, Stage, build_curriculum


def test_stages_run_in_order_for_their_step_counts():
    c = build_curriculum("sft_then_rl", sft_steps=2, rl_steps=3)
    seen = []
    while not c.done:
        seen.append(c.stage.kind)
        c.update({})
    assert seen == ["sft", "sft", "rl", "rl", "rl"] and c.global_step == 5


def test_empty_stages_are_skipped():
    c = build_curriculum("sft_then_rl", sft_steps=0, rl_steps=1)
    assert c.stage.kind == "rl"
    assert c.update({}) is None and c.done


def test_state_dict_round_trip_resumes_mid_stage():
    a = build_curriculum("sft_then_rl", sft_steps=2, rl_steps=2)
    for _ in range(3):
        a.update({})
    b = build_curriculum("sft_then_rl", sft_steps=2, rl_steps=2)
    b.load_state_dict(a.state_dict())
    assert (b.stage.name, b.stage_step, b.global_step) == ("rl", 1, 3)


def test_resume_into_a_different_curriculum_is_refused():
    a = build_curriculum("sft_then_rl", sft_steps=2, rl_steps=2)
    b = build_curriculum("sft_then_rl", sft_steps=3, rl_steps=2)
    with pytest.raises(ValueError, match="different curriculum"):
        b.load_state_dict(a.state_dict())


def test_bad_stages_are_rejected():
    with pytest.raises(ValueError, match="kind"):
        Stage("x", "ppo", 1)
    with pytest.raises(ValueError, match="unknown curriculum"):
        build_curriculum("nope")
    with pytest.raises(ValueError):
        Curriculum([])
