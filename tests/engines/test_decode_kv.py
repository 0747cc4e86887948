"""The copy-free decode step (`parallax.engines.decode_kv`) computes what transformers' own path computes."""

from __future__ import annotations

import pytest
import torch

from parallax.engines.decode_kv import GrowingLayer, KVDecoder, decode_sdpa


def test_growing_layer_keeps_every_column_across_growth():
    torch.manual_seed(0)
    k0, v0 = torch.randn(3, 2, 5, 4), torch.randn(3, 2, 5, 4)
    layer = GrowingLayer(k0, v0, capacity=6)
    ks, vs = [k0], [v0]
    for q in (1, 1, 3, 1, 9):  # crosses the capacity (6) twice
        k, v = torch.randn(3, 2, q, 4), torch.randn(3, 2, q, 4)
        keys, values = layer.update(k, v)
        ks.append(k)
        vs.append(v)
        assert torch.equal(keys, torch.cat(ks, dim=2)) and torch.equal(values, torch.cat(vs, dim=2))
    assert layer.get_seq_length() == 20 and layer._k.shape[2] >= 20


def test_growing_layer_initialises_from_its_first_update():
    layer = GrowingLayer()
    k, v = torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 4)
    keys, values = layer.update(k, v)
    assert torch.equal(keys, k) and torch.equal(values, v) and layer._k.shape[2] >= 14


def test_growing_layer_writes_into_buffers_it_was_given():
    K, V = torch.zeros(2, 1, 8, 4), torch.zeros(2, 1, 8, 4)
    K[..., :5, :] = 1.0
    layer = GrowingLayer(K, V, filled=5)
    k, v = torch.randn(2, 1, 1, 4), torch.randn(2, 1, 1, 4)
    keys, values = layer.update(k, v)
    assert keys.shape[2] == 6 and keys.data_ptr() == K.data_ptr()  # no copy at load or step
    assert torch.equal(K[..., 5:6, :], k) and torch.equal(values[..., 5:, :], v) and (keys[..., :5, :] == 1).all()


class _Heads(torch.nn.Module):
    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_decode_sdpa_matches_transformers_sdpa_under_a_padding_mask(groups):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(groups)
    R, Hkv, W, D = 3, 2, 9, 8
    q = torch.randn(R, Hkv * groups, 1, D)
    k, v = torch.randn(R, Hkv, W, D), torch.randn(R, Hkv, W, D)
    mask = torch.ones(R, 1, 1, W, dtype=torch.bool)
    mask[1, ..., :4] = False  # left padding of row 1
    mask[2, ..., :8] = False
    ours, _ = decode_sdpa(_Heads(groups), q, k, v, mask, scaling=0.3)
    ref, _ = sdpa_attention_forward(_Heads(groups), q, k, v, mask, scaling=0.3)
    assert ours.shape == ref.shape == (R, 1, Hkv * groups, D)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-6)
    # row 2 sees only its last column: the output is that column's value, per head
    torch.testing.assert_close(ours[2, 0], v[2, :, -1].repeat_interleave(groups, 0), rtol=0, atol=1e-6)


def _reference_logits(model, seq: list[int]) -> torch.Tensor:
    """Last-position logits of the unpadded sequence, no cache."""
    out = model(input_ids=torch.tensor([seq]), position_ids=torch.arange(len(seq))[None])
    return out.logits[0, -1].float()


@pytest.mark.parametrize(("impl", "lengths"), [("sdpa", (7, 2, 4)), ("sdpa", (5, 5, 5)), ("eager", (7, 2, 4))])
@torch.no_grad()
def test_kv_decoder_matches_uncached_forward_across_steps_and_reload(lm, impl, lengths):
    model, _ = lm
    saved = model.config._attn_implementation
    model.config._attn_implementation = impl
    try:
        dec = KVDecoder(model)
        assert dec.fast == (impl == "sdpa")
        seqs = [[(11 * b + 5 * i) % 90 + 3 for i in range(n)] for b, n in enumerate(lengths)]
        W = max(map(len, seqs))
        ids = torch.zeros(3, W, dtype=torch.long)
        mask = torch.zeros(3, W, dtype=torch.long)
        for b, s in enumerate(seqs):
            ids[b, W - len(s):], mask[b, W - len(s):] = torch.tensor(s), 1
        logits = dec.prefill(ids, mask, (mask.cumsum(-1) - 1).clamp(min=0))
        assert dec._padded == (len(set(lengths)) > 1)  # equal lengths decode without a mask
        for step in range(70):  # past the fast mask's and cache's first capacity (W + 64 / 2W)
            for b, s in enumerate(seqs):
                torch.testing.assert_close(logits[b], _reference_logits(model, s), rtol=0, atol=2e-5)
            nxt = [(3 * step + 7 * b) % 200 + 3 for b in range(len(seqs))]
            for s, t in zip(seqs, nxt):
                s.append(t)
            logits = dec.step(torch.tensor(nxt)[:, None], torch.tensor([[len(s) - 1] for s in seqs]))
            if step == 30:  # regroup: rows 2 and 0, reloaded from their own columns
                kv = [(layer.keys[[2, 0]].clone(), layer.values[[2, 0]].clone()) for layer in dec.layers]
                W = kv[0][0].shape[2]
                m = torch.zeros(2, W, dtype=torch.long)
                for i, b in enumerate((2, 0)):
                    m[i, W - len(seqs[b]):] = 1
                seqs = [seqs[2], seqs[0]]
                dec.load(kv, m)
                assert dec._padded == (len(set(lengths)) > 1)
                logits = logits[[2, 0]]
        assert model.config._attn_implementation == impl  # the swap is undone after each step
    finally:
        model.config._attn_implementation = saved
