"""The curriculum state machine: transitions, skipping, serialisation, refusal of a mismatch."""

from __future__ import annotations

import json

import pytest

from curricula import Curriculum, Predicate, Stage, build_curriculum, curriculum_from_dict


def _run(c: Curriculum, metrics=lambda step: {}) -> list[tuple[str, int]]:
    """(stage name, stage step) of every step until the curriculum is done."""
    seen = []
    while not c.done:
        seen.append((c.stage.name, c.stage_step))
        c.update(metrics(c.global_step))
    return seen


def test_stages_run_in_order_for_their_step_counts():
    c = build_curriculum("sft_then_rl", sft_steps=2, rl_steps=3)
    assert [name for name, _ in _run(c)] == ["sft", "sft", "rl", "rl", "rl"]
    assert c.global_step == 5 and [h["ended_by"] for h in c.history] == ["steps", "steps"]


def test_empty_stages_are_skipped_and_recorded():
    c = build_curriculum("sft_then_rl", sft_steps=0, rl_steps=1)
    assert c.stage.kind == "rl"
    assert c.history == [{"stage": "sft", "steps": 0, "ended_by": "skipped", "global_step": 0}]
    assert c.update({}) is None and c.done
    with pytest.raises(IndexError):
        c.update({})


# metric values at stage steps 1..6, patience, min_steps -> stage steps run, why it ended
@pytest.mark.parametrize("values,patience,min_steps,ends_after,why", [
    ([0.1, 0.95, 0.2, 0.3, 0.4, 0.5], 1, 0, 2, "metric"),  # fires on the first step that holds
    ([0.1, 0.95, 0.2, 0.95, 0.95, 0.5], 2, 0, 5, "metric"),  # needs two in a row: steps 4 and 5
    ([0.95, 0.95, 0.95, 0.95, 0.95, 0.95], 1, 3, 3, "metric"),  # not before stage step 3
    ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], 1, 0, 6, "steps"),  # never holds: the budget ends it
])
def test_metric_predicate_ends_a_stage_early(values, patience, min_steps, ends_after, why):
    stage = Stage("rl", "rl", 6, reward="accuracy",
                  until=(Predicate("parallel/ratio", ">=", 0.9, min_steps, patience),))
    c = Curriculum([stage, Stage("rl2", "rl", 1, reward="accuracy")])
    for v in values:
        c.update({"parallel/ratio": v})
        if c.stage.name == "rl2":
            break
    assert c.history[0]["steps"] == ends_after
    assert c.history[0]["ended_by"] == {"metric": "metric parallel/ratio >= 0.9", "steps": "steps"}[why]


def test_epoch_transition_reads_the_drivers_epoch_metric():
    c = Curriculum([Stage("rl", "rl", 100, reward="accuracy", epochs=2), Stage("next", "sft", 1)])
    epochs = [0.4, 0.8, 1.2, 1.6, 2.0, 2.4]
    for e in epochs:
        c.update({"data/epoch": e})
        if c.stage.name == "next":
            break
    assert c.history[0] == {"stage": "rl", "steps": 5, "ended_by": "epochs 2", "global_step": 5}


def test_a_predicate_on_a_metric_the_driver_never_logs_is_an_error():
    c = Curriculum([Stage("rl", "rl", 5, reward="accuracy", until=(Predicate("eval/acc", ">", 0.5),))])
    with pytest.raises(KeyError, match="eval/acc"):
        c.update({"reward/mean": 0.1})


def test_state_dict_round_trip_resumes_mid_stage():
    a = build_curriculum("sft_then_rl", sft_steps=2, rl_steps=2)
    for _ in range(3):
        a.update({})
    b = build_curriculum("sft_then_rl", sft_steps=2, rl_steps=2)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))  # checkpoints store JSON
    assert (b.stage.name, b.stage_step, b.global_step, b.history) == ("rl", 1, 3, a.history)


def test_resume_keeps_predicate_patience_across_the_checkpoint():
    def make():
        return Curriculum([Stage("rl", "rl", 10, reward="accuracy",
                                 until=(Predicate("parallel/ratio", ">=", 0.9, patience=3),)),
                           Stage("after", "sft", 1)])

    a = make()
    a.update({"parallel/ratio": 0.95})
    a.update({"parallel/ratio": 0.95})  # two of three consecutive hits, then "crash"
    b = make()
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    b.update({"parallel/ratio": 0.95})
    assert b.stage.name == "after" and b.history[0]["steps"] == 3


@pytest.mark.parametrize("other", [
    lambda: build_curriculum("sft_then_rl", sft_steps=3, rl_steps=2),  # a different budget
    lambda: build_curriculum("sft_then_rl", sft_steps=2, rl_steps=2, reward="tiered"),  # another reward
    lambda: curriculum_from_dict("other", {"sft": {"kind": "sft", "steps": 2}, "rl": {"steps": 2}}),  # a name
])
def test_resume_into_a_different_curriculum_is_refused(other):
    a = build_curriculum("sft_then_rl", sft_steps=2, rl_steps=2)
    b = other()
    before = b.state_dict()
    with pytest.raises(ValueError, match="different curriculum"):
        b.load_state_dict(a.state_dict())
    assert b.state_dict() == before  # a refused load changes nothing


def test_refusal_names_the_differing_field():
    a = curriculum_from_dict("x", {"rl": {"steps": 30, "schedule": [
        {"steps": 20, "cycle": [{"reward": "accuracy"}]}, {"cycle": [{"reward": "tiered"}]}]}})
    b = curriculum_from_dict("x", {"rl": {"steps": 30, "schedule": [
        {"steps": 10, "cycle": [{"reward": "accuracy"}]}, {"cycle": [{"reward": "tiered"}]}]}})
    with pytest.raises(ValueError, match="stage 'rl' schedule"):
        b.load_state_dict(a.state_dict())


@pytest.mark.parametrize("corrupt,match", [
    (lambda s: s.pop("history"), "lacks"),
    (lambda s: s.update(version=1), "version"),
    (lambda s: s.update(stage_step=7), "out of range"),
    (lambda s: s.update(index=9), "out of range"),
])
def test_corrupt_state_is_refused(corrupt, match):
    a = build_curriculum("sft_then_rl", sft_steps=2, rl_steps=2)
    state = a.state_dict()
    corrupt(state)
    with pytest.raises(ValueError, match=match):
        build_curriculum("sft_then_rl", sft_steps=2, rl_steps=2).load_state_dict(state)


@pytest.mark.parametrize("make,match", [
    (lambda: Stage("x", "ppo", 1), "kind"),
    (lambda: Stage("x", "rl", -1), "steps"),
    (lambda: Stage("x", "sft", 1, reward="accuracy"), "sft stage takes no reward"),
    (lambda: Stage("x", "rl", 1, reward_params={"correct": 2.0}), "without a reward"),
    (lambda: Stage("x", "rl", 1, lr=0.0), "lr must be > 0"),
    (lambda: Stage("x", "rl", 1, lr_schedule="linear"), "lr_schedule"),
    (lambda: Stage("x", "rl", 1, warmup_ratio=1.0), "warmup_ratio"),
    (lambda: Curriculum([]), "at least one stage"),
    (lambda: Curriculum([Stage("a", "sft", 1), Stage("a", "rl", 1)]), "duplicate stage"),
    (lambda: Predicate("m", "=>", 1.0), "op must be"),
    (lambda: build_curriculum("nope"), "unknown curriculum"),
    (lambda: curriculum_from_dict("x", {"rl": {"steps": 1, "lr_rate": 1}}), "unknown key.*lr_rate"),
    (lambda: curriculum_from_dict("x", {"rl": {"steps": 1, "reward": "accuracy",
                                               "schedule": [{"cycle": [{"reward": "tiered"}]}]}}), "either"),
    (lambda: curriculum_from_dict("x", {"rl": {"steps": 1, "schedule": [
        {"cycle": [{"reward": "a"}]}, {"cycle": [{"reward": "b"}]}]}}), "only the last schedule phase"),
    (lambda: curriculum_from_dict("x", {"rl": {"steps": 1, "schedule": [{"cycle": []}]}}), "at least one slot"),
    (lambda: curriculum_from_dict("x", {"rl": {"steps": 1, "until": [{"metric": "m", "op": ">"}]}}), "needs a value"),
    (lambda: curriculum_from_dict("x", {}), "no stages"),
])
def test_bad_definitions_are_rejected_with_a_clear_message(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_rl_stages_without_a_reward_take_the_runs_reward():
    c = curriculum_from_dict("x", {"sft": {"kind": "sft", "steps": 1}, "rl": {"steps": 1},
                                   "own": {"steps": 1, "reward": "tiered"}},
                             default_reward=("pa_grpo", {"beta_sub": 0.1}))
    assert [(s.reward, s.reward_params) for s in c.stages] == [
        (None, {}), ("pa_grpo", {"beta_sub": 0.1}), ("tiered", {})]


def test_stage_settings_come_through_from_config_data():
    c = curriculum_from_dict("x", {"rl": {"steps": 35, "reward": "parallel_acc", "data": "gsm8k_train",
                                          "batch_size": 1024, "rollout_n": 5, "lr": 1e-6,
                                          "lr_schedule": "constant"}})
    s = c.stage
    assert (s.data, s.batch_size, s.rollout_n, s.lr, s.lr_schedule) == ("gsm8k_train", 1024, 5, 1e-6, "constant")
