"""Padding and alignment of the learner's tensors (`parallax.layouts.causal`)."""

from __future__ import annotations

import pytest

from parallax.contract.batch import Trajectory, with_advantages
from parallax.layouts.causal import sft_batch, train_batch


def _traj(p, r, lp):
    return Trajectory(uid="u", prompt_ids=p, response_ids=r, logprobs=lp, finish_reason="stop", text="")


def test_train_batch_aligns_response_columns():
    trajs = [_traj([5, 6], [7, 8, 9], [-0.1, -0.2, -0.3]), _traj([5], [7], [-0.5])]
    b = train_batch(with_advantages(trajs, [2.0, -1.0]), pad_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 7, 0, 0, 0]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert b.response_mask.tolist() == [[0, 0, 1, 1, 1], [0, 1, 0, 0, 0]]
    assert b.old_logprobs[0].tolist() == pytest.approx([0, 0, -0.1, -0.2, -0.3])
    assert b.advantages.tolist() == [[0, 0, 2, 2, 2], [0, -1, 0, 0, 0]]


def test_shard_and_split_keep_rows_together():
    b = train_batch(with_advantages([_traj([i], [i + 1], [0.0]) for i in range(5)], list(range(5))), pad_id=0)
    s = b.shard(1, 2)
    assert s.input_ids[:, 0].tolist() == [1, 3]
    assert [len(m) for m in b.split(2)] == [2, 2, 1]


class _Tok:
    """A whitespace tokenizer with the HF call signature (enough for the builder)."""
    eos_token_id, pad_token_id = 99, 0

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [[len(w) for w in t.split()] for t in texts]}


class _P:
    def __init__(self, prompt, trace):
        self.prompt, self.traces = prompt, {"serial": trace}


def test_sft_batch_loss_covers_completion_and_eos_only():
    b = sft_batch([_P("a bb", "ccc"), _P("a", "bb ccc dddd")], "serial", _Tok())
    assert b.input_ids.tolist() == [[1, 2, 3, 99, 0], [1, 2, 3, 4, 99]]
    assert b.loss_mask.tolist() == [[0, 0, 1, 1, 0], [0, 1, 1, 1, 1]]
