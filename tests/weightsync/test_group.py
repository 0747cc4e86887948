"""The weight-sync group: a real gloo broadcast to every receiver, its timeouts and refusals."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import torch

from parallax.weightsync.group import SyncGroup, loopback_only
from parallax.weightsync.plan import plan_named


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("store", ["file", "tcp"])
def test_gloo_broadcast_reaches_every_receiver(store, tmp_path, state):
    """Rank 0 and two receivers in threads of this process (each its own gloo group member), over a
    FileStore (one node) and a TCPStore (several)."""
    address = f"file://{tmp_path / 'store'}" if store == "file" else f"tcp://127.0.0.1:{_free_port()}"
    plan = plan_named(state.items(), bucket_bytes=600)
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


_NCCL_MEMBER = """
import sys, torch
from parallax.weightsync.group import SyncGroup
from parallax.weightsync.plan import plan_named
rank, address = int(sys.argv[1]), sys.argv[2]
torch.cuda.set_device(0)  # both members on the one GPU, as a colocated engine and learner rank 0 would be
state = {"w": torch.arange(12.0, device="cuda").reshape(3, 4)}
plan = plan_named(state.items(), bucket_bytes=1 << 20)
group = SyncGroup(address, rank, 2, "nccl", 20)
if rank == 0:
    group.send(plan, state)
else:
    got = dict(group.receive(plan))
    assert torch.equal(got["w"], state["w"]), got
torch.cuda.synchronize()
print("SYNCED")
"""


@pytest.mark.gpu
def test_nccl_refuses_two_ranks_on_one_gpu(tmp_path):
    """The premise of `orchestrator.weights.shared_devices` and of the same-device hand-off: NCCL cannot hold two
    members of the sync group on one device, so an engine on a learner rank's GPU is handed its weights
    there (`parallax.weightsync.handoff`). Should a NCCL ever accept it, this fails, and the colocated path could
    take the collective."""
    import subprocess
    import sys
    from pathlib import Path

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    root = str(Path(__file__).resolve().parents[2])
    address = f"file://{tmp_path / 'store'}"
    members = [subprocess.Popen([sys.executable, "-c", _NCCL_MEMBER, str(rank), address], cwd=root,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    outs, deadline = [], time.monotonic() + 45  # both members together: a hang costs 45 s, not 90
    for p in members:
        try:
            outs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append(p.communicate()[0] + "\n[killed after 45 s]")
    text = "\n".join(outs)
    print(text[-1500:])  # what NCCL said (the GPU check shows it: -rP)
    assert not all(p.returncode == 0 and "SYNCED" in out for p, out in zip(members, outs)), text
    assert any(w in text for w in ("Duplicate GPU", "invalid usage", "ncclInvalidUsage", "killed")), text[-3000:]
