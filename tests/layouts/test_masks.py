"""parallax/layouts/masks.py against brute-force O(L²) Python references on random execution records."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from parallax.contract.batch import ExecutionRecord
from parallax.layouts import masks


@st.composite
def records(draw, max_segments: int = 6, max_len: int = 5) -> ExecutionRecord:
    """A random valid record: contiguous segments, each seeing a random subset of earlier ones."""
    n_seg = draw(st.integers(1, max_segments))
    lens = draw(st.lists(st.integers(1, max_len), min_size=n_seg, max_size=n_seg))
    seg = [s for s, n in enumerate(lens) for _ in range(n)]
    visible = [sorted(draw(st.sets(st.integers(0, s - 1), max_size=s))) if s else [] for s in range(n_seg)]
    pos = draw(st.lists(st.integers(0, 50), min_size=len(seg), max_size=len(seg)))
    sampled = draw(st.lists(st.booleans(), min_size=len(seg), max_size=len(seg)))
    return ExecutionRecord(pos, seg, visible, [-1] * n_seg, sampled)


def brute_visible(rec: ExecutionRecord, i: int, j: int) -> bool:
    si, sj = rec.segment_ids[i], rec.segment_ids[j]
    return j <= i and (si == sj or sj in rec.segment_visible[si])


def brute_predictor(rec: ExecutionRecord, t: int) -> int:
    """The last token before t that t's request saw (its own segment or a visible one)."""
    for j in range(t - 1, -1, -1):
        if brute_visible(rec, t, j):
            return j
    return -1


@settings(max_examples=60, deadline=None)
@given(st.lists(records(), min_size=1, max_size=4), st.integers(0, 3))
def test_mask_and_predictor_match_brute_force(recs: list[ExecutionRecord], extra_pad: int) -> None:
    width = max(len(r.segment_ids) for r in recs) + extra_pad
    pos, seg, vis = masks.pack_records(recs, width=width)
    mask = masks.sdpa_mask(seg, vis)  # [B, 1, L, L]: block fills per pair of segment runs
    saved = masks.MAX_RUN_PAIRS
    try:
        masks.MAX_RUN_PAIRS = 0  # the fallback for rows of many short runs: one gather per row
        assert torch.equal(masks.sdpa_mask(seg, vis), mask)
    finally:
        masks.MAX_RUN_PAIRS = saved
    pred = masks.predictor_index(seg, vis)  # [B, L]
    assert mask.shape == (len(recs), 1, width, width) and mask.dtype == torch.bool
    for b, rec in enumerate(recs):
        n = len(rec.segment_ids)
        want = torch.eye(width, dtype=torch.bool)  # padding rows see themselves only
        for i in range(n):
            for j in range(n):
                want[i, j] = brute_visible(rec, i, j)
        assert torch.equal(mask[b, 0], want)
        assert pred[b, :n].tolist() == [brute_predictor(rec, t) for t in range(n)]
        assert pred[b, n:].eq(-1).all()
        assert pos[b, :n].tolist() == rec.position_ids


def test_sequential_record_is_causal_and_shift_by_one() -> None:
    rec = ExecutionRecord(list(range(7)), [0, 0, 0, 1, 1, 1, 1], [[], [0]], [-1, 0], [False] * 3 + [True] * 4)
    _, seg, vis = masks.pack_records([rec])
    assert torch.equal(masks.sdpa_mask(seg, vis)[0, 0], torch.ones(7, 7, dtype=torch.bool).tril())
    assert masks.predictor_index(seg, vis)[0].tolist() == [-1, 0, 1, 2, 3, 4, 5]


def test_branch_first_token_is_predicted_by_the_prefix() -> None:
    # prompt(2) | branch A(2) | branch B(2) | join(1): B's first token reads the prompt's last logits.
    rec = ExecutionRecord(
        [0, 1, 2, 3, 2, 3, 4],
        [0, 0, 1, 1, 2, 2, 3],
        [[], [0], [0], [0, 1, 2]],
        [-1, 0, 1, 2],
        [False, False] + [True] * 5,
    )
    _, seg, vis = masks.pack_records([rec])
    assert masks.predictor_index(seg, vis)[0].tolist() == [-1, 0, 1, 2, 1, 4, 5]
    m = masks.sdpa_mask(seg, vis)[0, 0]
    assert not m[4, 2] and not m[5, 3] and m[6, :].all()


def test_structured_token_logprobs_equals_shift_by_one_on_sequential_rows() -> None:
    from parallax.layouts.logprobs import token_logprobs

    g = torch.Generator().manual_seed(0)
    logits, ids = torch.randn(2, 6, 11, generator=g), torch.randint(0, 11, (2, 6), generator=g)
    pred = torch.arange(-1, 5).expand(2, 6)
    got = masks.structured_token_logprobs(logits, ids, pred, temperature=0.7)
    assert torch.allclose(got, token_logprobs(logits, ids, 0.7), atol=1e-6)


def test_additive_mask_blocks_with_dtype_min() -> None:
    m = torch.tensor([[True, False]])
    add = masks.additive_mask(m, torch.float32)
    assert add[0, 0] == 0 and add[0, 1] == torch.finfo(torch.float32).min


@pytest.mark.parametrize(
    ("seg", "visible", "match"),
    [
        ([0, 2], [[], [], []], "step by 0 or 1"),
        ([1, 1], [[], []], "start at 0"),
        ([0, 1], [[], [1]], "only earlier segments"),
        ([0, 1], [[]], "2 segments"),
    ],
)
def test_bad_records_are_refused_with_a_clear_error(seg, visible, match) -> None:
    rec = ExecutionRecord([0] * len(seg), seg, visible, [-1] * len(visible), [False] * len(seg))
    with pytest.raises(ValueError, match=match):
        masks.pack_records([rec])


def test_width_smaller_than_a_record_is_refused() -> None:
    rec = ExecutionRecord([0, 1, 2], [0, 0, 0], [[]], [-1], [False] * 3)
    with pytest.raises(ValueError, match="batch width"):
        masks.pack_records([rec], width=2)


def _flex_vs_sdpa(device: str, compiled: bool) -> float:
    """Max |flex_attention(BlockMask) - SDPA(dense mask)| on a 4-segment layout (L=300 padded to 320)."""
    from torch.nn.attention.flex_attention import flex_attention

    rec = ExecutionRecord(
        list(range(300)),
        [0] * 100 + [1] * 90 + [2] * 70 + [3] * 40,
        [[], [0], [0], [0, 1, 2]],
        [-1, 0, 1, 2],
        [True] * 300,
    )
    _, seg, vis = masks.pack_records([rec], width=320)
    seg, vis = seg.to(device), vis.to(device)
    block = masks.flex_block_mask(seg, vis, compile_mask=compiled)
    q, k, v = torch.randn(3, 1, 2, 320, 16, generator=torch.Generator().manual_seed(0)).to(device).unbind(0)
    attend = torch.compile(flex_attention) if compiled else flex_attention
    out = attend(q, k, v, block_mask=block)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=masks.sdpa_mask(seg, vis))
    return float((out - ref).abs().max())


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_block_mask_attends_like_the_dense_mask_on_cpu() -> None:
    assert _flex_vs_sdpa("cpu", compiled=False) < 1e-5


@pytest.mark.gpu
def test_flex_block_mask_attends_like_the_dense_mask_on_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    assert _flex_vs_sdpa("cuda", compiled=True) < 1e-4


def test_block_sparse_sdpa_equals_dense_masked_sdpa_across_chunks() -> None:
    # Two rows (one padded), 600 tokens: several query chunks, sibling-branch columns dropped, GQA heads.
    recs = []
    for n in (600, 530):
        seg = [0] * 100 + [1] * 150 + [2] * 150 + [3] * (n - 400)
        recs.append(
            ExecutionRecord(list(range(n)), seg, [[], [0], [0], [0, 1, 2]], [-1, 0, 1, 2], [True] * n)
        )
    _, seg, vis = masks.pack_records(recs)
    mask = masks.sdpa_mask(seg, vis)  # [2, 1, 600, 600]
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 4, 600, 8, generator=g),
        torch.randn(2, 2, 600, 8, generator=g),
        torch.randn(2, 2, 600, 8, generator=g),
    )

    class Attn(torch.nn.Module):
        num_key_value_groups = 2

    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, _ = masks.block_sparse_sdpa(Attn(), *leaves, mask, scaling=0.3)  # [B, L, H, D]
    dense = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(
        dense[0], dense[1].repeat_interleave(2, 1), dense[2].repeat_interleave(2, 1), attn_mask=mask, scale=0.3
    ).transpose(1, 2)
    assert out.shape == ref.shape and (out - ref).abs().max() < 1e-5
    w = torch.randn(out.shape, generator=g)
    (out * w).sum().backward()
    (ref * w).sum().backward()
    for got, want in zip(leaves, dense):  # the backward through the chunks and gathered columns too
        assert (got.grad - want.grad).abs().max() < 1e-5
    # a second mask of the same shape (the chunk plan is per mask, never reused for another one)
    causal = torch.ones(600, 600, dtype=torch.bool).tril().expand(2, 1, 600, 600).clone()
    out2, _ = masks.block_sparse_sdpa(Attn(), q, k, v, causal, scaling=0.3)
    ref2 = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True, scale=0.3
    ).transpose(1, 2)
    assert (out2 - ref2).abs().max() < 1e-5
