"""Right padding of token rows: the helpers every learner layout builds its tensors with."""

from __future__ import annotations

import torch

from parallax.contract.batch import SFTBatch, TrainBatch


def right_pad(rows: list[list], value, dtype) -> torch.Tensor:
    """[len(rows), longest row] tensor of `rows`, right-padded with `value`."""
    out = torch.full((len(rows), max(len(r) for r in rows)), value, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=dtype)
    return out


def padded_train_batch(ids: list[list[int]], loss: list[list[float]], old: list[list[float]],
                       adv: list[list[float]], pad_id: int) -> TrainBatch:
    """A `TrainBatch` of right-padded rows: token ids, loss mask, engine logprobs, advantages (per token)."""
    return TrainBatch(
        input_ids=right_pad(ids, pad_id, torch.long),  # [B, L]
        attention_mask=right_pad([[1] * len(r) for r in ids], 0, torch.long),
        response_mask=right_pad(loss, 0.0, torch.float32),
        old_logprobs=right_pad(old, 0.0, torch.float32),
        advantages=right_pad(adv, 0.0, torch.float32),
    )


def padded_sft_batch(ids: list[list[int]], loss: list[list[float]], pad_id: int) -> SFTBatch:
    """An `SFTBatch` of right-padded rows: token ids and loss mask."""
    return SFTBatch(right_pad(ids, pad_id, torch.long), right_pad([[1] * len(r) for r in ids], 0, torch.long),
                    right_pad(loss, 0.0, torch.float32))
