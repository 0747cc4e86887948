"""Faults while asleep: colocated engines (`rollout.colocate`, the hf engine on CPU) sleep at level 2 through
every update, holding no weights, and wake inside the next push (orchestrator/weights.py, `EngineWeights`). An
engine killed while asleep, and one killed while it wakes, come back through Ray's restart, rejoin at that
push, and sample the new policy: a step's generation is never a sample short, and every engine equals the
learners afterwards. The driver's own calls, on the session's cluster: the same `EngineWeights`, `start` and
`collect` a run makes."""

from __future__ import annotations

import pytest
import ray
import torch

from parallax.contract.config import LearnerConfig, ParallaxConfig, RolloutConfig

pytestmark = pytest.mark.slow

N = 2  # samples per prompt


@pytest.fixture(scope="module")
def run(ray_cluster, tiny_model_path):
    from orchestrator.setup import build_groups
    from orchestrator.weights import EngineWeights

    cfg = ParallaxConfig()
    cfg.rollout = RolloutConfig(num_actors=2, num_cpus=0.25, torch_threads=1, n=N, max_new_tokens=8, colocate=True)
    cfg.learner = LearnerConfig(num_actors=2, num_cpus=0.25, torch_threads=1, micro_batch_size=2)
    cfg.reward.num_cpus = 0.25
    g = build_groups(cfg, tiny_model_path, "colocated-faults")
    weights = EngineWeights(g.sync, g.learner, g.rollout, max_restarts=3, start_timeout_s=180, sleep_level=2)
    weights.push()
    yield g, weights, tiny_model_path
    g.shutdown()


def _update(g, model_path: str) -> None:
    """One SFT step on the learners: a policy the engines do not hold yet."""
    from transformers import AutoTokenizer

    from parallax import toyworld
    from parallax.layouts.causal import sft_batch

    batch = sft_batch(toyworld.generate("mixed", 4, seed=3), "parallel_r1", AutoTokenizer.from_pretrained(model_path))
    ray.get(g.learner.async_sft_step(batch, lr=1e-2))


def _kill(actor, restarted: bool = False) -> int:
    """As a node's OOM killer or a lost process would: Ray restarts it (max_restarts) with the initial weights.
    Returns once the process is gone (`ray.kill` only asks), so the next call cannot reach the old one (it
    fails, or waits for the restart); `restarted`: once the new process answers, so the next call runs there
    and fails nothing."""
    import time

    import psutil

    pid = ray.get(actor.pid.remote())
    ray.kill(actor, no_restart=False)
    deadline = time.monotonic() + 60
    while True:
        try:
            gone = psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            gone = True
        if gone and not restarted:
            return pid
        if gone and _answers(actor, pid):
            return pid
        assert time.monotonic() < deadline, f"rollout process {pid} still alive 60 s after ray.kill"
        time.sleep(0.05)


def _answers(actor, old_pid: int) -> bool:
    """Whether the actor's new process (not `old_pid`) answers; False while Ray still restarts it."""
    try:
        return ray.get(actor.pid.remote(), timeout=30) != old_pid
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return False


def _check_policy_and_samples(g, weights, model_path: str, step: int) -> None:
    from transformers import AutoTokenizer

    from orchestrator.generation import collect, start
    from orchestrator.logger import Timer
    from parallax import toyworld
    from parallax.trainingdata.streams import to_prompts
    from rewards.registry import RewardSpec

    learner = ray.get(g.learner.async_state_dict())
    for i, actor in enumerate(g.rollout.actors):
        engine = ray.get(actor.get_weights.remote())
        assert all(torch.equal(engine[k], v) for k, v in learner.items()), f"rollout_{i} differs from the learners"
        assert ray.get(actor.__ray_call__.remote(lambda w: w.version)) == weights.version
    prompts = to_prompts(toyworld.generate("mixed", 4, seed=step), AutoTokenizer.from_pretrained(model_path))
    started = start(g.rollout, weights, prompts, n=N, seed=step, step=step, max_restarts=3)
    samples = collect(started, reward=g.reward, weights=weights, spec=RewardSpec("accuracy"), stage_name="rl",
                      t=Timer(), max_restarts=3, start_timeout_s=180)
    assert [len(s.samples) for s in samples.groups] == [N] * len(prompts)  # not a sample short
    assert {x.policy_version for x in samples.trajectories} == {weights.version}


def test_an_engine_killed_while_asleep_rejoins_at_the_next_push(run):
    g, weights, model_path = run
    weights.sleep()
    _update(g, model_path)
    old = _kill(g.rollout.actors[0])
    figures = weights.push()  # waits for the restart, forms the sync group anew with it, wakes the other
    assert "timing/wake_and_sync" in figures and not weights.asleep and not weights.lost
    assert ray.get(g.rollout.actors[0].pid.remote()) != old  # a new process
    _check_policy_and_samples(g, weights, model_path, step=1)


@pytest.mark.parametrize("phase", ["wake_up:weights", "wake_up:kv_cache"])
def test_an_engine_killed_while_waking_rejoins_in_the_same_push(run, phase, monkeypatch):
    """Killed as the wake reaches it: before its weights' memory comes back (the call fails on the dead
    process), or after the sync filled it and before its KV cache wakes, restarted by the time the wake is
    sent (the call runs on the new process and fails nothing: its answer, the policy version it holds, gives
    it away). The push waits for the restart, and is made again."""
    g, weights, model_path = run
    weights.sleep()
    _update(g, model_path)
    victim, tags = g.rollout.actors[1], [phase.split(":")[1]]
    calls, killed = weights._all_rollouts, []

    def all_rollouts(method, *args):
        if method == "wake_up" and list(args[0]) == tags and not killed:
            killed.append(_kill(victim, restarted=phase == "wake_up:kv_cache"))
        return calls(method, *args)

    monkeypatch.setattr(weights, "_all_rollouts", all_rollouts)
    figures = weights.push()
    assert killed and "timing/wake_and_sync" in figures and not weights.asleep and not weights.lost
    assert weights.wake_trace[-1] == "wake_up:kv_cache"  # the push made again, whole
    assert ray.get(victim.pid.remote()) != killed[0]
    _check_policy_and_samples(g, weights, model_path, step=2)
