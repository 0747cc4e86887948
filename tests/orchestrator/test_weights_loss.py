"""A member killed mid-broadcast: the live learner's collective error arrives first, the lost member is named.

Found by `bench/soak.py --rl-steps 60 --kill-every 4`: learner rank 0's `send_weights` failed with gloo's
"Connection closed by peer" before Ray reported the killed rollout actor, and the run ended instead of
re-forming the group (a lost rollout member is recovered; any other error ends the run).
"""

from __future__ import annotations

import threading
import time

import pytest

from actors.faults import ActorLost
from orchestrator import weights

pytestmark = pytest.mark.slow


def _actors(ray):
    @ray.remote(num_cpus=0)
    class Member:
        def fail_after(self, seconds: float) -> None:
            time.sleep(seconds)
            raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:2466")

        def block(self, seconds: float) -> int:
            time.sleep(seconds)
            return 1

    members = Member.remote(), Member.remote()
    ray.get([m.block.remote(0) for m in members])  # both running before the clock starts
    return members


def test_a_peer_killed_after_the_learner_failed_is_the_error(ray_cluster):
    learner, rollout = _actors(ray_cluster)
    refs = {"learner": [learner.fail_after.remote(0.5)], "rollout_0": [rollout.block.remote(60)]}
    killer = threading.Timer(1.5, lambda: ray_cluster.kill(rollout, no_restart=True))
    killer.start()
    t0 = time.monotonic()
    with pytest.raises(ActorLost) as got:
        weights._wait(refs, 60, "broadcast")
    killer.join()
    assert (got.value.role, got.value.rank) == ("rollout", 0), got.value
    assert "Connection closed by peer" in str(got.value.__cause__)  # the learner's own error stays attached
    assert time.monotonic() - t0 < 15, "the loss should be reported as soon as Ray knows, not after the grace"


def test_without_a_loss_the_collective_error_stands_after_the_grace(ray_cluster, monkeypatch):
    monkeypatch.setattr(weights, "LOSS_GRACE_S", 1.0)
    learner, rollout = _actors(ray_cluster)
    refs = {"learner": [learner.fail_after.remote(0.2)], "rollout_0": [rollout.block.remote(30)]}
    t0 = time.monotonic()
    with pytest.raises(Exception, match="Connection closed by peer") as got:
        weights._wait(refs, 60, "broadcast")
    assert not isinstance(got.value, ActorLost)
    assert time.monotonic() - t0 < 10  # the grace, not the sync timeout
    ray_cluster.kill(rollout)


def test_a_member_lost_while_the_group_forms_frees_the_others_within_seconds(ray_cluster, tmp_path):
    """A rollout actor that died while the sync group formed left learner rank 0 in gloo's rendezvous
    until rollout.weight_sync.timeout_s (300 s): deaf to the restart's next calls all that time."""
    ray = ray_cluster

    @ray.remote(num_cpus=0, max_restarts=0)
    class Former:  # what learner rank 0 and an engine do in open_sync: join a real gloo group
        def join(self, address: str, rank: int, world: int) -> int:
            from actors.faults import abandonable
            from parallax.weightsync.sync_group import SyncGroup

            self.group = abandonable(lambda: SyncGroup(address, rank, world, "gloo", 300), "weight-sync rendezvous")
            return rank

        def ping(self) -> str:
            return "free"

    learner, rollout = Former.remote(), Former.remote()
    ray.get([learner.ping.remote(), rollout.ping.remote()])
    # world 3: the third member never comes, so the group cannot form before the rollout actor dies
    address = f"file://{tmp_path}/sync.store"
    refs = {"learner": [learner.join.remote(address, 0, 3)], "rollout_0": [rollout.join.remote(address, 1, 3)]}
    killer = threading.Timer(1.5, lambda: ray.kill(rollout, no_restart=True))
    killer.start()
    t0 = time.monotonic()
    with pytest.raises(ActorLost) as got:
        weights._form(refs, 300, "opening a gloo group of 3 ranks")
    killer.join()
    assert (got.value.role, got.value.rank) == ("rollout", 0)
    assert ray.get(learner.ping.remote(), timeout=20) == "free"  # the learner takes its next call
    assert time.monotonic() - t0 < 20, "the rendezvous was waited out"
    ray.kill(learner)
