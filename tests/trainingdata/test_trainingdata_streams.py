"""The run's streams: shuffled epochs, one prompt order per stage, the benchmarks' prompts."""

from __future__ import annotations

import pytest

from trainingdata.streams import batches


def test_batches_cover_each_epoch_once():
    it = batches(list(range(10)), 5, seed=0)
    first_epoch = next(it) + next(it)
    assert sorted(first_epoch) == list(range(10))


def test_stages_on_one_pool_draw_different_prompt_orders():
    import toyworld
    from contract.config import DataConfig
    from curricula.stage import Stage
    from tinylm import build_tokenizer
    from trainingdata.streams import StageStreams

    train = toyworld.generate("mixed", 64, seed=0)
    streams = StageStreams(DataConfig(), train, build_tokenizer([p.prompt for p in train]), seed=0)
    a, b = Stage("easy_rl", "rl", 4), Stage("acc_rl", "rl", 4)
    first_a = [p.uid for p in streams.next(a, 8)]
    assert first_a != [p.uid for p in streams.next(b, 8)]
    again = StageStreams(DataConfig(), train, build_tokenizer([p.prompt for p in train]), seed=0)
    assert [p.uid for p in again.next(a, 8)] == first_a  # deterministic per (seed, stage)


def test_benchmark_prompts_are_the_papers_prompt_in_the_chat_template(lm):
    from contract.config import DataConfig
    from trainingdata.streams import benchmark_prompts

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
