"""The collective weight-sync transport: bucket plans, byte-exact packing, a real gloo broadcast."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import torch

from engines.collective import (
    Bucket,
    SyncGroup,
    TensorMeta,
    pack,
    plan_buckets,
    plan_for,
    plan_from_wire,
    plan_to_wire,
    unique_tensors,
    unpack,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(50, 8, generator=g)
    return {"embed.weight": emb, "norm.weight": torch.randn(8, generator=g).to(torch.bfloat16),
            "steps": torch.tensor([3, -7], dtype=torch.int64), "big.weight": torch.randn(64, 8, generator=g),
            "lm_head.weight": emb}  # tied: the same storage as embed.weight


def test_plan_groups_consecutive_tensors_up_to_the_bucket_size():
    metas = [TensorMeta(f"t{i}", "float32", (n,)) for i, n in enumerate([10, 10, 30, 5, 100])]  # 40,40,120,20,400 B
    plan = plan_buckets(metas, bucket_bytes=100)
    # 40+40 fit; +120 would not; 120 alone; 20 then 400 is larger than a bucket: its own
    assert [[m.name for m in b.tensors] for b in plan] == [["t0", "t1"], ["t2"], ["t3"], ["t4"]]
    assert [b.nbytes for b in plan] == [80, 120, 20, 400]
    with pytest.raises(ValueError, match="bucket_bytes"):
        plan_buckets(metas, 0)


def test_tied_weights_are_sent_once_and_received_under_both_names():
    state = _state()
    assert list(unique_tensors(state)) == ["embed.weight", "norm.weight", "steps", "big.weight"]
    plan = plan_for(state, 1 << 20)
    assert plan.nbytes == 50 * 8 * 4 + 8 * 2 + 2 * 8 + 64 * 8 * 4
    assert plan.aliases == (("lm_head.weight", "embed.weight"),)


def test_pack_then_unpack_is_byte_exact_for_every_dtype():
    state = _state()
    for bucket in plan_for(state, bucket_bytes=600).buckets:
        got = dict(unpack(bucket, pack(bucket, state)))
        for name, t in got.items():
            assert t.dtype == state[name].dtype and torch.equal(t, state[name]), name
    assert plan_from_wire(plan_to_wire(plan_for(state, 600))) == plan_for(state, 600)


def test_tensors_back_to_back_in_one_storage_are_sent_from_their_own_memory():
    flat = torch.arange(24, dtype=torch.float32)  # as DeepSpeed flattens a module's parameters
    state = {"a": flat[:6].view(2, 3), "b": flat[6:10], "c": flat[10:24].view(7, 2)}
    (bucket,) = plan_for(state, 1 << 20).buckets
    buf = pack(bucket, state)
    assert buf.data_ptr() == flat.data_ptr() and buf.numel() == 24 * 4  # a view: no copy
    assert all(torch.equal(t, state[k]) for k, t in unpack(bucket, buf.clone()))
    state["b"] = flat[7:11]  # a gap: packed by copy, still byte-exact
    (bucket,) = plan_for(state, 1 << 20).buckets
    buf = pack(bucket, state)
    assert buf.data_ptr() != flat.data_ptr()
    assert all(torch.equal(t, state[k]) for k, t in unpack(bucket, buf))


def test_a_tensor_that_disagrees_with_the_plan_is_refused():
    bucket = Bucket((TensorMeta("norm.weight", "float32", (8,)),))
    with pytest.raises(ValueError, match="norm.weight is torch.bfloat16"):
        pack(bucket, _state())
    with pytest.raises(ValueError, match="received 3 bytes"):
        list(unpack(bucket, torch.zeros(3, dtype=torch.uint8)))


@pytest.mark.parametrize("store", ["file", "tcp"])
def test_gloo_broadcast_reaches_every_receiver(store, tmp_path):
    """Rank 0 and two receivers in threads of this process (each its own gloo group member), over a
    FileStore (one node) and a TCPStore (several)."""
    state = _state()
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
    from engines.collective import loopback_only

    assert loopback_only("file:///tmp/x.store") and loopback_only("tcp://127.0.0.1:5")
    assert not loopback_only("tcp://10.0.0.3:5")
