"""Every stage (and the held-out evaluation) scores in the run's trajectory format: rewards.registry.stage_spec."""

from __future__ import annotations

import pytest

from actors.reward_worker import RewardWorker
from curricula.stage import Stage
from parallax import toyworld
from parallax.contract.config import RewardConfig
from rewards.registry import stage_spec
from rewards.types import RewardGroup


@pytest.fixture(scope="module")
def worker():
    w = RewardWorker("accuracy", workers=1, start_method="fork")
    yield w
    w.close()


@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
def test_eval_stage_scores_teacher_traces_correct_in_the_runs_format(worker, fmt):
    problems = toyworld.generate("mixed", 6, seed=3)
    groups = [RewardGroup([p.traces[fmt]], p.answer) for p in problems]
    spec = stage_spec(Stage("eval", "rl", 1, reward="accuracy"), RewardConfig(), fmt)
    assert spec.params["format"] == fmt
    out = worker.score(groups, spec=spec)
    assert [c for g in out.correct for c in g] == [True] * len(problems)


def test_parason_text_scored_as_parallel_r1_loses_its_parallel_units(worker):
    """What the driver did before stage_spec: the format default (Parallel-R1) on Parason text. The
    final answer still decides accuracy (it follows </Parallel> in both formats), but the format-aware
    reward finds no well-formed Parallel-R1 unit in it: R_parallel x R_acc is 0 instead of 1."""
    p = toyworld.generate("mixed", 1, seed=3)[0]
    for fmt, hit in (("parallel_r1", 0.0), ("parason", 1.0)):
        spec = stage_spec(Stage("rl", "rl", 1, reward="parallel_acc"), RewardConfig(), fmt)
        out = worker.score([RewardGroup([p.traces["parason"]], p.answer)], spec=spec)
        assert (out.correct, out.rewards) == ([[True]], [[hit]]), fmt


def test_stage_params_and_run_reward():
    run = RewardConfig(name="pa_grpo", beta_sub=0.1)
    spec = stage_spec(Stage("rl", "rl", 1), run, "parason")  # no stage reward: the run's
    assert (spec.name, spec.params["format"], spec.params["beta_sub"]) == ("pa_grpo", "parason", 0.1)
    explicit = Stage("rl", "rl", 1, reward="accuracy", reward_params={"format": "parallel_r1"})
    assert stage_spec(explicit, run, "parason").params["format"] == "parallel_r1"


def test_the_runs_format_options_reach_teachers_and_rewards(worker):
    """data.format_options (here: the summary inside the block, only) reaches the toy world's teacher
    traces and the reward's parser, so a run scores what its teacher and executor write."""
    from parallax.contract.config import DataConfig
    from parallax.formats import parse
    from parallax.trainingdata.streams import load_problems

    cfg = DataConfig(n_train=8, n_test=4, format_options={"summary_placement": "inside", "summary_accept": "inside"})
    train, _ = load_problems(cfg)
    trace = train[0].traces["parallel_r1"]
    assert "<Summary>" in trace and "</Summary></Parallel>" in trace  # the teacher writes inside
    spec = stage_spec(Stage("rl", "rl", 1, reward="parallel_acc"), RewardConfig(), cfg.spec)
    assert (spec.params["summary_placement"], spec.params["summary_accept"]) == ("inside", "inside")
    after = trace.replace("</Summary></Parallel>", "</Summary>").replace("<Summary>", "</Parallel><Summary>")
    assert parse(after, "parallel_r1").ok  # the default spec reads it...
    out = worker.score([RewardGroup([trace, after], train[0].answer)], spec=spec)
    assert out.rewards == [[1.0, 0.0]]  # ...this run's does not: R_parallel is 0


def test_unknown_format_option_is_a_config_error():
    from parallax.contract.config import DataConfig

    with pytest.raises(ValueError, match=r"data.format_options: unknown option\(s\) \['placement'\]"):
        DataConfig(format_options={"placement": "inside"})
    with pytest.raises(ValueError, match="data.format_options: summary_placement"):
        DataConfig(format_options={"summary_placement": "before"})
