"""`learner.sft_tag_lr_mult`: the format tags' embedding rows step at a multiple of the SFT learning rate,
exactly as a parameter group of their own would (actors/row_lr.py), and every other weight as before."""

from __future__ import annotations

import socket

import pytest
import torch

pytestmark = pytest.mark.slow


def _one_sft_step(model_path: str, zero_stage: int, mult: float):
    """(embedding before, after) one SFT step of one rank from `model_path`."""
    from transformers import AutoTokenizer

    from actors.learner import LearnerWorker
    from parallax import toyworld
    from parallax.contract.config import LearnerConfig
    from parallax.layouts.causal import sft_batch

    tok = AutoTokenizer.from_pretrained(model_path)
    batch = sft_batch(toyworld.generate("mixed", 8, seed=3), "parallel_r1", tok)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = LearnerConfig(micro_batch_size=4, torch_threads=1, zero_stage=zero_stage, sft_tag_lr_mult=mult)
    learner = LearnerWorker(cfg, model_path, "float32", 0, 1, f"tcp://127.0.0.1:{port}", port, seed=0)
    emb = learner.engine.module.get_input_embeddings().weight
    before = emb.detach().clone()
    learner.sft_step(batch, int(batch.loss_mask.sum()), lr=1e-3, weight_decay=0.1)
    after = emb.detach().clone()
    if zero_stage:  # the optimizer's fp32 master copy holds the amplified rows too: the next step starts from them
        from deepspeed.utils import safe_get_full_fp32_param

        assert torch.equal(safe_get_full_fp32_param(emb), after)
    return before, after


@pytest.mark.parametrize("zero_stage", [0, 1])
def test_tag_rows_take_mult_times_the_step_and_nothing_else_changes(tiny_model_path, zero_stage):
    from actors.learner import tag_ids

    ids = tag_ids(tiny_model_path)
    assert len(ids) >= 6  # the tiny model holds every tag as one token
    w0, plain = _one_sft_step(tiny_model_path, zero_stage, 1.0)
    w0b, fast = _one_sft_step(tiny_model_path, zero_stage, 10.0)
    assert torch.equal(w0, w0b)
    rest = torch.ones(len(w0), dtype=torch.bool)
    rest[ids] = False
    assert torch.equal(plain[rest], fast[rest])  # the first step's gradients are the same: so are the other rows
    step, big = plain[ids] - w0[ids], fast[ids] - w0[ids]
    assert step.abs().max() > 1e-4  # the tags did move at lr (AdamW's first step is ~lr per coordinate)
    torch.testing.assert_close(big, 10.0 * step, rtol=1e-4, atol=1e-6)  # AdamW at 10 x lr, decay included


def test_zero3_is_refused_at_config_time():
    from parallax.contract.config import ConfigError, LearnerConfig

    with pytest.raises(ConfigError, match="learner.sft_tag_lr_mult"):
        LearnerConfig(zero_stage=3, sft_tag_lr_mult=10.0)
    LearnerConfig(zero_stage=3)  # the default needs nothing
