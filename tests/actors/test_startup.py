"""Start-up never hangs silently: actors that fail or stall at start are named, and a torch extension
build lock left by a killed run is waited on while young and cleared once stale (actors/locks.py)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from actors.group import ActorGroup, BundleSpec, reserve
from actors.locks import build_locks, clear_stale_build_locks


def _lock(root, name="deepspeed_shm_comm", age_s=0.0):
    d = root / "py311_cpu" / name
    d.mkdir(parents=True, exist_ok=True)
    lock = d / "lock"
    lock.write_text("")
    t = time.time() - age_s
    os.utime(lock, (t, t))
    return lock


def test_a_stale_lock_is_removed_and_said(tmp_path):
    stale = _lock(tmp_path, age_s=3600)
    said = []
    assert clear_stale_build_locks(tmp_path, stale_s=300, log=said.append) == [stale]
    assert not stale.exists() and "stale torch extension build lock" in said[0] and str(stale) in said[0]


def test_a_young_lock_is_waited_on_until_the_build_releases_it(tmp_path):
    young = _lock(tmp_path, age_s=0)
    threading.Timer(1.0, young.unlink).start()  # the other process's build finishes
    t0 = time.perf_counter()
    assert clear_stale_build_locks(tmp_path, stale_s=300, poll_s=0.1, log=lambda s: None) == []
    assert 0.9 < time.perf_counter() - t0 < 10 and build_locks(tmp_path) == []


def test_a_young_lock_that_never_goes_is_cleared_once_it_is_stale(tmp_path):
    lock = _lock(tmp_path, age_s=0)
    t0 = time.perf_counter()
    assert clear_stale_build_locks(tmp_path, stale_s=1.5, poll_s=0.1, log=lambda s: None) == [lock]
    assert time.perf_counter() - t0 < 10


def test_an_actor_that_fails_or_stalls_at_start_is_named(ray_cluster):
    from ray.util import remove_placement_group

    class _Fails:  # defined here: shipped to the actor by value (this test module is not importable there)
        def __init__(self, rank: int):
            if rank == 1:
                raise ValueError("no such model directory: /nope")

    class _Stalls:
        def __init__(self, rank: int):
            import time

            time.sleep(60 if rank == 0 else 0)

    pg, off = reserve([BundleSpec("x", 2, 0.25, 0.0)], "PACK", name="startup-probe")
    try:
        bad = ActorGroup("reward", _Fails, 2, pg, off["x"], 0.25, 0.0, lambda i: {"rank": i}, "startup")
        with pytest.raises(RuntimeError, match="reward actor 1 failed to start: .*no such model directory"):
            bad.wait_ready(60)
        for a in bad.actors:
            ray_cluster.kill(a)
        slow = ActorGroup("learner", _Stalls, 2, pg, off["x"], 0.25, 0.0, lambda i: {"rank": i}, "startup2")
        # rank 1 is up first (a worker process takes seconds to start on a loaded machine): only rank 0 stalls
        ray_cluster.get(slow.actors[1].__ray_ready__.remote(), timeout=120)
        t0 = time.perf_counter()
        with pytest.raises(RuntimeError, match=r"learner actor\(s\) \[0\] not started after 3 s .*lock"):
            slow.wait_ready(3, "DeepSpeed init; a stale build lock")
        assert time.perf_counter() - t0 < 20
        for a in slow.actors:
            ray_cluster.kill(a)
    finally:
        remove_placement_group(pg)


def test_the_driver_never_chooses_the_actors_accelerator(ray_cluster):
    """DS_ACCELERATOR was set to cpu in the whole job's runtime env whenever the *driver* had no CUDA (a
    cluster's head node): every GPU learner would then have built DeepSpeed on the CPU. Each learner now
    sets it from what it sees (actors/learner.py); the job's env carries none. (Not compared with this
    process's own variable: a learner built in this process earlier set it here, for itself.)"""
    @ray_cluster.remote(num_cpus=0)
    def job_env() -> dict:
        return dict(ray_cluster.get_runtime_context().runtime_env.get("env_vars") or {})

    env = ray_cluster.get(job_env.remote())
    assert "PYTHONPATH" in env and "DS_ACCELERATOR" not in env, env  # the job's env is set, without it


def test_the_run_summary_names_an_actor_lost_as_the_run_ends(ray_cluster):
    """A soak's kill can land between the last step and the summary (clean-clone CI): the finished run's
    placement names the lost actor instead of failing the run on it."""
    from types import SimpleNamespace

    from orchestrator.setup import Groups

    @ray_cluster.remote(num_cpus=0)
    class Worker:
        model_path = "/m"

    live, lost = Worker.remote(), Worker.options(max_restarts=0).remote()
    # both up before the kill, as in a run: an actor killed while its creation is still pending can leave
    # the call unanswered instead of dead (a clean-clone CI failure under load)
    ray_cluster.get([live.__ray_ready__.remote(), lost.__ray_ready__.remote()])
    ray_cluster.kill(lost)
    group = lambda role, actors: SimpleNamespace(role=role, actors=actors)
    groups = Groups(group("rollout", [live]), group("reward", [lost]), group("learner", []), None, None)
    placed = groups.placement(timeout_s=20)
    assert placed["rollout_0"]["model_path"] == "/m" and placed["rollout_0"]["ip"]
    assert set(placed["reward_0"]) == {"unavailable"} and "dead" in placed["reward_0"]["unavailable"]
    ray_cluster.kill(live)
