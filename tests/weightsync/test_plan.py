"""The weight-sync plan: bucket plans, tied aliases, byte-exact packing, the wire form."""

from __future__ import annotations

import pytest
import torch

from parallax.weightsync.plan import (
    Bucket,
    TensorMeta,
    pack,
    plan_buckets,
    plan_from_wire,
    plan_named,
    plan_to_wire,
    unpack,
)


def test_plan_groups_consecutive_tensors_up_to_the_bucket_size():
    metas = [TensorMeta(f"t{i}", "float32", (n,)) for i, n in enumerate([10, 10, 30, 5, 100])]  # 40,40,120,20,400 B
    plan = plan_buckets(metas, bucket_bytes=100)
    # 40+40 fit; +120 would not; 120 alone; 20 then 400 is larger than a bucket: its own
    assert [[m.name for m in b.tensors] for b in plan] == [["t0", "t1"], ["t2"], ["t3"], ["t4"]]
    assert [b.nbytes for b in plan] == [80, 120, 20, 400]
    with pytest.raises(ValueError, match="bucket_bytes"):
        plan_buckets(metas, 0)


def test_tied_weights_are_sent_once_and_received_under_both_names(state):
    plan = plan_named(state.items(), 1 << 20)
    assert [m.name for b in plan.buckets for m in b.tensors] == ["embed.weight", "norm.weight", "steps", "big.weight"]
    assert plan.nbytes == 50 * 8 * 4 + 8 * 2 + 2 * 8 + 64 * 8 * 4
    assert plan.aliases == (("lm_head.weight", "embed.weight"),)


def test_pack_then_unpack_is_byte_exact_for_every_dtype(state):
    for bucket in plan_named(state.items(), bucket_bytes=600).buckets:
        got = dict(unpack(bucket, pack(bucket, state)))
        for name, t in got.items():
            assert t.dtype == state[name].dtype and torch.equal(t, state[name]), name
    assert plan_from_wire(plan_to_wire(plan_named(state.items(), 600))) == plan_named(state.items(), 600)


def test_tensors_back_to_back_in_one_storage_are_sent_from_their_own_memory():
    flat = torch.arange(24, dtype=torch.float32)  # as DeepSpeed flattens a module's parameters
    state = {"a": flat[:6].view(2, 3), "b": flat[6:10], "c": flat[10:24].view(7, 2)}
    (bucket,) = plan_named(state.items(), 1 << 20).buckets
    buf = pack(bucket, state)
    assert buf.data_ptr() == flat.data_ptr() and buf.numel() == 24 * 4  # a view: no copy
    assert all(torch.equal(t, state[k]) for k, t in unpack(bucket, buf.clone()))
    state["b"] = flat[7:11]  # a gap: packed by copy, still byte-exact
    (bucket,) = plan_named(state.items(), 1 << 20).buckets
    buf = pack(bucket, state)
    assert buf.data_ptr() != flat.data_ptr()
    assert all(torch.equal(t, state[k]) for k, t in unpack(bucket, buf))


def test_a_tensor_that_disagrees_with_the_plan_is_refused(state):
    with pytest.raises(ValueError, match=r"norm.weight is torch.bfloat16\(8,\), the plan says float32\(4,\)"):
        pack(Bucket((TensorMeta("norm.weight", "float32", (4,)),)), state)  # another shape
    with pytest.raises(ValueError, match="steps is torch.int64"):
        pack(Bucket((TensorMeta("steps", "float32", (2,)),)), state)  # an integer tensor is never cast
    with pytest.raises(ValueError, match="received 3 bytes"):
        list(unpack(Bucket((TensorMeta("norm.weight", "float32", (8,)),)), torch.zeros(3, dtype=torch.uint8)))


def test_a_module_plan_names_a_tied_tensor_once_and_reads_zero3_full_shapes():
    """The learner's plan comes from its module's own tensors: one object under two names is an alias,
    and a partitioned ZeRO-3 parameter (its own shape empty) is planned at its full `ds_shape`."""
    emb, norm, part = torch.zeros(50, 8), torch.zeros(8, dtype=torch.bfloat16), torch.empty(0)
    part.ds_shape = torch.Size([64, 8])
    plan = plan_named([("embed.weight", emb), ("norm.weight", norm), ("big.weight", part), ("lm_head.weight", emb)],
                      bucket_bytes=1 << 20)
    assert [(m.name, m.dtype, m.shape) for b in plan.buckets for m in b.tensors] == [
        ("embed.weight", "float32", (50, 8)), ("norm.weight", "bfloat16", (8,)), ("big.weight", "float32", (64, 8))]
    assert plan.aliases == (("lm_head.weight", "embed.weight"),)


def test_a_plan_in_the_engines_dtype_casts_floating_tensors_on_the_way(state):
    """A bf16 engine fed by an fp32 learner (`rollout.dtype`): the plan names bf16 for every floating
    tensor, `pack` casts into the buffer (half the bytes), and each received tensor is exactly the
    learner's cast to bf16 -- what the engine's own cast on load would give. Integers keep their dtype."""
    named = [(k, v) for k, v in state.items()]
    plan = plan_named(named, bucket_bytes=600, dtype="bfloat16")
    assert {m.name: m.dtype for b in plan.buckets for m in b.tensors} == {
        "embed.weight": "bfloat16", "norm.weight": "bfloat16", "steps": "int64", "big.weight": "bfloat16"}
    assert plan.nbytes == (50 * 8 + 8 + 64 * 8) * 2 + 2 * 8  # fp32 would be (400 + 512) * 4 + 16 + 16
    assert plan_named(named, 600, "float32").nbytes == plan_named(named, 600).nbytes + 8 * 2  # norm up to fp32
    for bucket in plan.buckets:
        for name, t in unpack(bucket, pack(bucket, state).clone()):
            want = state[name].to(torch.bfloat16) if state[name].is_floating_point() else state[name]
            assert t.dtype == want.dtype and torch.equal(t, want), name
