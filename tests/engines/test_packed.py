"""Prepacked bf16 linear weights in the CPU engine (`parallax/engines/packed.py`, issue 52 item 3): the engine
samples the tokens and logprobs the plain one does, bit for bit; a packed copy follows every change of its
weight; a product that differs from `F.linear` turns packing off rather than change a token."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from parallax.contract.batch import SamplingParams
from parallax.engines import make_engine, packed
from parallax.weightsync.handoff import share, unlink
from parallax.weightsync.plan import pack, plan_named, plan_to_wire

pytestmark = pytest.mark.skipif(not packed.available(), reason="needs oneDNN's bf16 linear on this CPU")


@pytest.fixture(scope="module")
def engines(tiny_model_path):
    torch.set_num_threads(1)
    return {p: make_engine("hf", model_path=tiny_model_path, dtype="bfloat16", max_batch_size=8, pack=p)
            for p in (True, False)}


def _sample(engine, seed: int = 0, n: int = 6):
    prompts = [engine.tokenizer.encode(f"Q: {i}*7+{i + 2}\nA:") for i in range(n)]
    out = engine.generate(prompts, SamplingParams(max_new_tokens=24, seed=seed))
    return [(c.token_ids, c.logprobs) for c in out]


def test_the_packed_engine_samples_what_the_plain_one_does_bit_for_bit(engines):
    on, off = engines[True], engines[False]
    assert on.packed is not None and off.packed is None
    assert _sample(on) == _sample(off)
    assert on.packed.on and on.packed.packed_bytes > 0  # it ran packed, every product checked equal
    layers = on.packed.layers
    assert len(layers) >= 4 and {tuple(m.weight.shape) for m in layers} <= {tuple(s[0]) for s in on.packed._checked}


def test_a_packed_copy_follows_every_change_of_its_weight(engines):
    on, off = engines[True], engines[False]
    sd = on.parameters_dict()
    try:
        for change in ("load_weights", "in place", "new tensor", "sleep"):
            new = {k: (v * 1.25 if k.endswith("proj.weight") else v) for k, v in sd.items()}
            off.load_weights(new)
            if change == "load_weights":
                on.load_weights(new)
            elif change == "in place":  # the collective sync copies into the parameters: their version moves
                with torch.no_grad():
                    for k, p in on.model.named_parameters():
                        p.copy_(new[k])
            elif change == "new tensor":
                for k, p in on.model.named_parameters():
                    p.data = new[k].clone()
            else:
                on.sleep(level=2)
                assert on.packed.packed_bytes == 0  # asleep, the packed copies are freed with the weights
                on.wake_up()
                on.load_weights(new)
            assert _sample(on, seed=1) == _sample(off, seed=1), change
            sd = new
    finally:
        base = engines[False].parameters_dict()
        on.load_weights(base)


def test_a_write_its_version_counter_cannot_see_is_why_the_hand_off_drops_the_packed_copies(engines):
    """Another process rewriting the shared buffer the engine's parameters are bound to (the same-device hand-off's
    double buffer) moves neither their address nor their version: the engine drops its packed copies on every
    load, and the hand-off's second push is sampled with its own weights."""
    on, off = engines[True], engines[False]
    base = on.parameters_dict()
    layer = on.packed.layers[0]
    w = layer.weight
    x = torch.randn(3, w.shape[1], dtype=torch.bfloat16)
    with torch.no_grad():
        layer(x)
        alias = torch.empty(0, dtype=w.dtype).set_(w.untyped_storage(), w.storage_offset(), w.shape, w.stride())
        alias.mul_(2)  # the other process's write: a tensor of its own over the same bytes
        stale = layer(x)
        assert not torch.equal(stale, F.linear(x, w))  # what the drop is for
        on.packed.drop()
        assert torch.equal(layer(x), F.linear(x, w))
    on.load_weights(base)

    def push(state):
        plan = plan_named(state.items(), bucket_bytes=1 << 16)
        bufs = [pack(b, state, "cpu", view=False) for b in plan.buckets]
        return plan, bufs, [share(b) for b in bufs]

    second = {k: (v * 0.75 if k.endswith("proj.weight") else v) for k, v in base.items()}
    plan, bufs, handles = push(base)
    try:
        on.receive_shared(handles, plan_to_wire(plan))
        assert _sample(on, seed=2) == _sample(off, seed=2)
        for buf, fresh in zip(bufs, [pack(b, second, "cpu", view=False) for b in plan.buckets]):
            buf.copy_(fresh)  # the rank writes the same buffers again
        on.receive_shared(handles, plan_to_wire(plan))
        off.load_weights(second)
        assert _sample(on, seed=2) == _sample(off, seed=2)
    finally:
        unlink(handles)
        on.load_weights(base)
        off.load_weights(base)


def test_a_product_that_differs_turns_packing_off_and_returns_the_plain_one(engines, monkeypatch, caplog):
    on, off = engines[True], engines[False]
    real = packed._linear
    monkeypatch.setattr(packed, "_linear", lambda x, w, b: real(x, w, b) * 1.0078125)  # one bf16 ulp at 1.0
    checked = set(on.packed._checked)
    on.packed._checked.clear()
    try:
        with caplog.at_level(logging.WARNING, logger="parallax.engines.packed"):
            assert _sample(on, seed=3) == _sample(off, seed=3)
        assert not on.packed.on and on.packed.packed_bytes == 0
        assert "packing is off" in caplog.text
    finally:
        on.packed.on = True
        on.packed._checked |= checked


def test_training_runs_plain_linear_and_packs_nothing(engines, tiny_model_path):
    on = engines[True]
    layer = on.packed.layers[0]
    on.packed.drop()
    x = torch.randn(2, layer.weight.shape[1], dtype=torch.bfloat16)
    with torch.enable_grad():
        y = layer(x)
    assert y.requires_grad and torch.equal(y, F.linear(x, layer.weight)) and on.packed.packed_bytes == 0
    assert make_engine("hf", model_path=tiny_model_path, dtype="float32").packed is None  # bf16 only
