"""SFT packing: several examples per row, each attending only to itself, with the unpacked loss.

Unit tests of first-fit-decreasing bins and the packed layout, then the real tiny model (fp32,
CPU): the packed loss and gradient equal the unpacked ones within 1e-5 for both layouts, and an
example's logprobs in a packed row equal those it gets alone (no cross-example attention, positions
restarting per example); two broken layouts show that comparison would catch a leak.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from actors.scoring import score_logprobs, sft_loss, sft_micro_batches
from parallax.contract.batch import SFTBatch
from parallax.contract.config import LearnerConfig
from parallax.layouts import masks
from parallax.layouts.causal import sft_batch
from parallax.layouts.packing import pack_bins, pack_sft_batch
from parallax.layouts.structured import structured_sft_batch


# ---- bins and layout -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("lengths", "capacity", "want"),
    [
        ([3, 5, 2, 4], 6, [[1], [3], [0, 2]]),  # FFD needs 3 rows; dealt evenly the widest is 5, not 6
        ([2, 2, 2], 6, [[0, 1, 2]]),  # ties keep index order
        ([9, 1, 4], 6, [[0], [2, 1]]),  # oversize 9 gets its own row, nothing joins it
        ([6, 6], 6, [[0], [1]]),
        ([4, 4, 3, 3, 2], 8, [[0, 1], [2, 3, 4]]),  # a deal overflows 2 rows, 3 rows x 6 > FFD's 2 x 8
        ([6, 5, 5, 2], 12, [[0, 3], [1, 2]]),  # FFD 6+5 | 5+2 (2 x 11); dealt 6+2 | 5+5 (2 x 10)
        ([], 8, []),
    ],
)
def test_pack_bins_fewest_rows_dealt_evenly(lengths, capacity, want) -> None:
    assert pack_bins(lengths, capacity) == want


def _toy_batch() -> SFTBatch:
    """Three right-padded causal examples of lengths 3, 5, 2 (ids = example*10 + column)."""
    lengths = [3, 5, 2]
    ids = torch.zeros(3, 5, dtype=torch.long)
    att = torch.zeros(3, 5, dtype=torch.long)
    loss = torch.zeros(3, 5)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.arange(n) + 10 * (b + 1)
        att[b, :n] = 1
        loss[b, 1:n] = 1.0
    return SFTBatch(ids, att, loss)


def test_packed_causal_rows_are_block_diagonal_with_restarting_positions() -> None:
    packed = pack_sft_batch(_toy_batch(), 6)  # bins: [5] | [3, 2]
    assert packed.input_ids.tolist() == [[20, 21, 22, 23, 24], [10, 11, 12, 30, 31]]
    assert packed.attention_mask.tolist() == [[1] * 5, [1] * 5]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 0, 1]]
    assert packed.segment_ids.tolist() == [[0] * 5, [0, 0, 0, 1, 1]]
    assert float(packed.loss_mask.sum()) == float(_toy_batch().loss_mask.sum())
    mask = masks.sdpa_mask(packed.segment_ids, packed.segment_visible)[1, 0]  # [L, L]
    assert not mask[3:, :3].any()  # the second example never sees the first
    assert mask[4, 3] and mask[2, 0]  # each sees its own past
    pred = masks.predictor_index(packed.segment_ids, packed.segment_visible)[1]
    assert pred.tolist() == [-1, 0, 1, -1, 3]  # no logits predict an example's first token


def test_oversize_example_gets_its_own_row_untruncated() -> None:
    packed = pack_sft_batch(_toy_batch(), 4)  # 5 > 4; 3 + 2 > 4 too: three rows
    assert packed.input_ids.shape == (3, 5)
    assert packed.input_ids[0].tolist() == [20, 21, 22, 23, 24]
    assert int(packed.attention_mask.sum()) == 10


# ---- the real tiny model -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def lm(tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls; kind to a shared 2-core machine
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    with torch.no_grad():  # a random init predicts near-uniformly; spread the logits so leaks show
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    yield model, AutoTokenizer.from_pretrained(tiny_model_path)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def problems():
    from parallax import toyworld

    return toyworld.generate("mixed", 10, seed=4, difficulty=2)  # 2-3 branches: several segments each


def _batch(layout: str, problems, tok) -> SFTBatch:
    if layout == "structured":
        return structured_sft_batch(problems, "parallel_r1", tok, mode="executed")
    return sft_batch(problems, "parallel_r1", tok)


def _loss_and_grads(model, batch: SFTBatch, cfg: LearnerConfig) -> tuple[float, dict[str, torch.Tensor]]:
    """What LearnerWorker.sft_step accumulates, without DeepSpeed: sum of micro-batch losses, grads."""
    model.zero_grad(set_to_none=True)
    tokens, total = int(batch.loss_mask.sum()), 0.0
    for mb in sft_micro_batches(batch, cfg):
        loss = sft_loss(model, mb, tokens)
        loss.backward()
        total += float(loss.detach())
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return total, grads


@pytest.mark.parametrize("layout", ["causal", "structured"])
def test_packed_loss_and_gradient_equal_unpacked(lm, problems, layout) -> None:
    model, tok = lm
    batch = _batch(layout, problems, tok)
    plain = LearnerConfig(micro_batch_size=4)
    packed_cfg = dataclasses.replace(plain, sft_packing=True, sft_pack_length=256)
    packed = sft_micro_batches(batch, packed_cfg)
    assert sum(len(mb.input_ids) for mb in packed) < len(batch.input_ids)  # it did pack
    # ... within each micro-batch: the same examples (loss tokens) per micro-batch as unpacked
    unpacked = [float(mb.loss_mask.sum()) for mb in sft_micro_batches(batch, plain)]
    assert [float(mb.loss_mask.sum()) for mb in packed] == unpacked
    loss0, grad0 = _loss_and_grads(model, batch, plain)
    loss1, grad1 = _loss_and_grads(model, batch, packed_cfg)
    assert abs(loss1 - loss0) < 1e-5, (loss0, loss1)
    assert grad0.keys() == grad1.keys()
    worst = max(float((grad0[k] - grad1[k]).abs().max()) for k in grad0)
    assert worst < 1e-5, worst


def _alone(model, batch: SFTBatch, b: int) -> torch.Tensor:
    """[n] logprobs of example b scored on its own, through the unpacked learner path."""
    n = int(batch.attention_mask[b].sum())
    pos, seg, vis = batch.structure()
    k = None if seg is None else int(seg[b].max()) + 1
    one = SFTBatch(
        batch.input_ids[b : b + 1, :n],
        batch.attention_mask[b : b + 1, :n],
        batch.loss_mask[b : b + 1, :n],
        *((None,) * 3 if seg is None else (pos[b : b + 1, :n], seg[b : b + 1, :n], vis[b : b + 1, :k, :k])),
    )
    with torch.no_grad():
        return score_logprobs(model, one.input_ids, one.attention_mask, 1.0, one.structure(), "cpu")[0]


def _row_logprobs(model, packed: SFTBatch) -> torch.Tensor:
    with torch.no_grad():
        return score_logprobs(model, packed.input_ids, packed.attention_mask, 1.0, packed.structure(), "cpu")


def _worst_example_diff(model, batch: SFTBatch, packed: SFTBatch, got: torch.Tensor, bins) -> float:
    worst, lengths = 0.0, batch.attention_mask.sum(-1).tolist()
    for r, members in enumerate(bins):
        at = 0
        for i in members:
            n = lengths[i]
            worst = max(worst, float((got[r, at : at + n] - _alone(model, batch, i)).abs().max()))
            at += n
    return worst


@pytest.mark.parametrize("layout", ["causal", "structured"])
def test_example_in_packed_row_scores_as_alone(lm, problems, layout) -> None:
    model, tok = lm
    batch = _batch(layout, problems, tok)
    lengths = batch.attention_mask.sum(-1).tolist()
    bins = pack_bins(lengths, 4 * max(lengths))
    packed = pack_sft_batch(batch, 4 * max(lengths))
    assert max(len(b) for b in bins) >= 3  # several examples share a row
    assert _worst_example_diff(model, batch, packed, _row_logprobs(model, packed), bins) < 1e-4
    # The check has teeth: a mask letting examples see the earlier ones of their row moves them.
    leak = dataclasses.replace(packed, segment_visible=torch.ones_like(packed.segment_visible).tril())
    assert _worst_example_diff(model, batch, packed, _row_logprobs(model, leak), bins) > 1e-3
    # Positions are checked directly: RoPE scores depend on position differences only, so under a
    # correct mask a shifted example scores the same and logprobs cannot tell; the restart matters
    # for absolute-position models and for staying under max_position_embeddings.
    own = batch.position_ids
    if own is None:
        own = torch.arange(batch.input_ids.shape[1]).expand_as(batch.input_ids)
    for r, members in enumerate(bins):
        at = 0
        for i in members:
            assert packed.position_ids[r, at : at + lengths[i]].tolist() == own[i, : lengths[i]].tolist()
            at += lengths[i]
