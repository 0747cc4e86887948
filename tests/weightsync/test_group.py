"""The weight-sync group: a real gloo broadcast to every receiver, its timeouts and refusals."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import torch

from parallax.weightsync.plan import plan_named
from parallax.weightsync.sync_group import SyncGroup, loopback_only


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


def test_delta_pushes_leave_every_receiver_bit_equal_to_the_senders_cast(tmp_path):
    """An fp32 learner sent as bf16 over five pushes, each after an update that moves a few weights: from
    the second push on, the wire carries only the bf16 elements that changed (indices and values), and
    every receiver still holds exactly the learner's bf16 cast, the tied alias and the int64 buffer too.
    A bucket where most elements changed goes whole."""
    from parallax.weightsync.sync_group import grain

    g = torch.Generator().manual_seed(1)
    emb = torch.randn(300, 16, generator=g)
    state = {"embed.weight": emb, "norm.weight": torch.randn(16, generator=g),
             "steps": torch.tensor([3, -7], dtype=torch.int64), "big.weight": torch.randn(400, 16, generator=g),
             "lm_head.weight": emb}
    plan = plan_named(state.items(), bucket_bytes=4096, dtype="bfloat16")
    assert len(plan.buckets) == 3 and [grain(b) for b in plan.buckets] == [2, 2, 2]
    address = f"file://{tmp_path / 'store'}"
    pushes, got = 5, {1: [], 2: []}
    ready = threading.Barrier(3)

    def receiver(rank: int) -> None:
        group = SyncGroup(address, rank, 3, "gloo", 30)
        for _ in range(pushes):
            got[rank].append(({k: v.clone() for k, v in group.receive(plan)}, group.received))
            ready.wait(30)

    threads = [threading.Thread(target=receiver, args=(r,)) for r in (1, 2)]
    for t in threads:
        t.start()
    sender, sent, casts = SyncGroup(address, 0, 3, "gloo", 30), [], []
    for push in range(pushes):
        if push == 3:  # an update that moves nearly everything: those buckets go whole
            state["big.weight"].add_(0.5)
        elif push:  # an RL-sized update: a few weights move enough to change their bf16 cast
            for w in (state["embed.weight"], state["big.weight"]):
                flat = w.view(-1)
                flat[torch.randint(0, flat.numel(), (7,), generator=g)] += 0.25
        casts.append({k: v.to(torch.bfloat16) if v.is_floating_point() else v.clone() for k, v in state.items()})
        sent.append(sender.send(plan, state, delta=True))
        ready.wait(30)
    for t in threads:
        t.join(30)
    assert sent[0] == plan.nbytes  # the first push is whole
    assert all(0 < s < plan.nbytes / 10 for s in (sent[1], sent[2], sent[4])), sent
    assert sent[4] < sent[3] < plan.nbytes, sent
    for rank in (1, 2):
        assert [n for _, n in got[rank]] == sent  # what came is what went
        for push, (weights, _) in enumerate(got[rank]):
            assert set(weights) == set(state)
            for k, want in casts[push].items():
                assert weights[k].dtype == want.dtype and torch.equal(weights[k], want), (rank, push, k)


def test_a_change_for_a_rank_without_the_first_push_is_refused(tmp_path):
    state = {"w": torch.randn(64, 4)}
    plan = plan_named(state.items(), bucket_bytes=1 << 20)
    address = f"file://{tmp_path / 'store'}"
    errors = []

    def receiver() -> None:
        group = SyncGroup(address, 1, 2, "gloo", 30)
        dict(group.receive(plan))
        group._kept = None  # as a rank that joined after the first push would be
        try:
            dict(group.receive(plan))
        except RuntimeError as e:
            errors.append(str(e))

    t = threading.Thread(target=receiver)
    t.start()
    sender = SyncGroup(address, 0, 2, "gloo", 30)
    sender.send(plan, state, delta=True)  # the first push, whole
    sender._header(torch.tensor([1, 1], dtype=torch.int64))  # then a change of one element is announced
    t.join(30)
    assert errors and "holds no earlier push" in errors[0]


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
from parallax.weightsync.sync_group import SyncGroup
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
