"""Every wait on a group of actors has a bound and names what it waited for (actors/faults.py): an actor
that is alive but never answers (a hung engine, a stuck collective) ends the wait as a lost actor, which
the supervisor handles (`trainer.max_failures`), instead of holding the driver forever."""

from __future__ import annotations

import time

import pytest

from actors.faults import ActorLost, Redispatch, get_all

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sleepers(ray_cluster):
    @ray_cluster.remote(num_cpus=0)
    class Sleeper:
        def nap(self, seconds: float) -> float:
            time.sleep(seconds)
            return seconds

    actors = [Sleeper.remote(), Sleeper.remote()]
    ray_cluster.get([a.__ray_ready__.remote() for a in actors])  # started: only the naps are timed
    yield actors
    for a in actors:
        ray_cluster.kill(a)


def test_get_all_names_the_actors_that_never_answered(sleepers):
    t0 = time.monotonic()
    with pytest.raises(ActorLost, match=r"learner actor 1 was lost: learner actors \[1\] returned nothing within 1 s"):
        get_all([sleepers[0].nap.remote(0), sleepers[1].nap.remote(600)], "learner", timeout_s=1)
    assert time.monotonic() - t0 < 10


def test_redispatch_names_the_hung_actors_and_their_chunks(sleepers):
    work = Redispatch("rollout", sleepers, lambda actor, key, seconds: actor.nap.remote(seconds),
                      recover=lambda ranks: None, max_retries=1, stall_s=1)
    work.submit("quick", 0, 0)
    work.submit("hung", 600, 1)
    got = []
    with pytest.raises(ActorLost, match=r"rollout actors \[1\] returned nothing within 1 s \(chunks \['hung'\]"):
        for key, result in work.completed():
            got.append(key)
    assert got == ["quick"]
