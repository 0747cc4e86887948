"""The weight-sync group: a real gloo broadcast to every receiver, its timeouts and refusals."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import torch

from weightsync.group import SyncGroup, loopback_only
from weightsync.plan import plan_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("store", ["file", "tcp"])
def test_gloo_broadcast_reaches_every_receiver(store, tmp_path, state):
    """Rank 0 and two receivers in threads of this process (each its own gloo group member), over a
    FileStore (one node) and a TCPStore (several)."""
    address = f"file://{tmp_path / 'store'}" if store == "file" else f"tcp://127.0.0.1:{_free_port()}"
    plan = plan_for(state, bucket_bytes=600)
    got: dict[int, dict] = {}

    def receiver(rank: int) -> None:
        g = SyncGroup(address, rank, 3, "gloo", 30)
        got[rank] = {k: v.clone() for k, v in g.receive(plan)}

    threads = [threading.Thread(target=receiver, args=(r,)) for r in (1, 2)]
    for t in threads:
        t.start()
    sent = SyncGroup(address, 0, 3, "gloo", 30).send(plan, state)
    for t in threads:
        t.join(30)
    assert sent == plan.nbytes and len(plan.buckets) > 1
    for rank in (1, 2):
        assert set(got[rank]) == set(state)  # the tied alias too
        assert all(torch.equal(got[rank][k], state[k]) for k in got[rank])


def test_a_rank_that_never_joins_fails_within_the_timeout():
    start = time.monotonic()
    with pytest.raises(Exception, match="(?i)timed? ?out|timeout"):
        SyncGroup(f"tcp://127.0.0.1:{_free_port()}", 0, 2, "gloo", timeout_s=3)
    assert time.monotonic() - start < 30


def test_bad_backend_world_and_address_are_refused():
    with pytest.raises(ValueError, match="gloo or nccl"):
        SyncGroup(f"tcp://127.0.0.1:{_free_port()}", 0, 2, "mpi", 1)
    with pytest.raises(ValueError, match="sender and a receiver"):
        SyncGroup(f"tcp://127.0.0.1:{_free_port()}", 0, 1, "gloo", 1)
    with pytest.raises(ValueError, match="file:///PATH or tcp://HOST:PORT"):
        SyncGroup("127.0.0.1", 0, 2, "gloo", 1)


def test_one_node_stores_keep_to_loopback():
    assert loopback_only("file:///tmp/x.store") and loopback_only("tcp://127.0.0.1:5")
    assert not loopback_only("tcp://10.0.0.3:5")
