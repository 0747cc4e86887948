"""Padding and alignment of the learner's tensors."""

from __future__ import annotations

import pytest

from contract.batch import Trajectory
from layouts.causal import sft_batch, train_batch
from orchestrator.data import batches


def _traj(p, r, lp):
    return Trajectory(uid="u", prompt_ids=p, response_ids=r, logprobs=lp, finish_reason="stop", text="")


def test_train_batch_aligns_response_columns():
    b = train_batch([_traj([5, 6], [7, 8, 9], [-0.1, -0.2, -0.3]), _traj([5], [7], [-0.5])], [2.0, -1.0], pad_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 7, 0, 0, 0]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert b.response_mask.tolist() == [[0, 0, 1, 1, 1], [0, 1, 0, 0, 0]]
    assert b.old_logprobs[0].tolist() == pytest.approx([0, 0, -0.1, -0.2, -0.3])
    assert b.advantages.tolist() == [[0, 0, 2, 2, 2], [0, -1, 0, 0, 0]]


def test_shard_and_split_keep_rows_together():
    b = train_batch([_traj([i], [i + 1], [0.0]) for i in range(5)], [float(i) for i in range(5)], pad_id=0)
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


def test_batches_cover_each_epoch_once():
    it = batches(list(range(10)), 5, seed=0)
    first_epoch = next(it) + next(it)
    assert sorted(first_epoch) == list(range(10))


def test_stages_on_one_pool_draw_different_prompt_orders():
    import toyworld
    from contract.config import DataConfig
    from curricula.stage import Stage
    from orchestrator.data import StageStreams
    from tinylm import build_tokenizer

    train = toyworld.generate("mixed", 64, seed=0)
    streams = StageStreams(DataConfig(), train, build_tokenizer([p.prompt for p in train]), seed=0)
    a, b = Stage("easy_rl", "rl", 4), Stage("acc_rl", "rl", 4)
    first_a = [p.uid for p in streams.next(a, 8)]
    assert first_a != [p.uid for p in streams.next(b, 8)]
    again = StageStreams(DataConfig(), train, build_tokenizer([p.prompt for p in train]), seed=0)
    assert [p.uid for p in again.next(a, 8)] == first_a  # deterministic per (seed, stage)


def test_benchmark_prompts_are_the_papers_prompt_in_the_chat_template(lm):
    from contract.config import DataConfig
    from orchestrator.data import benchmark_prompts

    _, tok = lm
    prompts = benchmark_prompts("gsm8k", DataConfig(), tok, limit=3)
    assert [p.meta["benchmark"] for p in prompts] == ["gsm8k"] * 3
    assert all(p.text.startswith("Solve the following problem step by step.") for p in prompts)  # no template
    assert prompts[0].ground_truth == "18"  # GSM8K test 1: Janet's ducks, the number after ####

    class Chat:  # a tokenizer with a chat template wraps the same prompt as a user turn
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return f"<user>{messages[-1]['content']}</user><assistant>"

        def __call__(self, texts, add_special_tokens):
            return {"input_ids": [[1]] * len(texts)}

    (p,) = benchmark_prompts("gsm8k", DataConfig(), Chat(), limit=1)
    assert p.text == f"<user>{prompts[0].text}</user><assistant>"
    with pytest.raises(ValueError, match="unknown benchmark 'gsm9k'"):
        benchmark_prompts("gsm9k", DataConfig(), tok)
