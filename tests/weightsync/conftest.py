"""A small learner state dict for the weight-sync tests: every dtype the plan handles, and a tied pair."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(50, 8, generator=g)
    return {"embed.weight": emb, "norm.weight": torch.randn(8, generator=g).to(torch.bfloat16),
            "steps": torch.tensor([3, -7], dtype=torch.int64), "big.weight": torch.randn(64, 8, generator=g),
            "lm_head.weight": emb}  # tied: the same storage as embed.weight
