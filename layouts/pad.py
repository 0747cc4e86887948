"""Right padding of token rows: the one helper every learner layout builds its tensors with."""

from __future__ import annotations

import torch


def right_pad(rows: list[list], value, dtype) -> torch.Tensor:
    """[len(rows), longest row] tensor of `rows`, right-padded with `value`."""
    out = torch.full((len(rows), max(len(r) for r in rows)), value, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=dtype)
    return out
