"""Shared inputs of the learner tests."""

from __future__ import annotations

import pytest

from parallax.contract.batch import with_advantages


@pytest.fixture(scope="session")
def grpo_batch():
    """`make(model_path, max_new_tokens) -> (TrainBatch, completions)`: two hf-engine samples of each of
    three toy prompts, advantages +0.707 / -0.707 in each group (rewards 1, 0)."""

    def make(model_path: str, max_new_tokens: int):
        from actors import algo
        from parallax import toyworld
        from parallax.contract.batch import SamplingParams, Trajectory
        from parallax.engines.hf import HFEngine
        from parallax.layouts.causal import train_batch

        engine = HFEngine(model_path)
        tok = engine.tokenizer
        flat = [tok(p.prompt)["input_ids"] for p in toyworld.generate("mixed", 3, seed=5) for _ in range(2)]
        comps = engine.generate(flat, SamplingParams(max_new_tokens=max_new_tokens, seed=3))
        trajs = [Trajectory(uid=str(i // 2), prompt_ids=p, response_ids=c.token_ids, logprobs=c.logprobs,
                            finish_reason=c.finish_reason, text="") for i, (p, c) in enumerate(zip(flat, comps))]
        adv = algo.grpo_advantages([1.0, 0.0] * 3, [t.uid for t in trajs])
        return train_batch(with_advantages(trajs, adv), tok.pad_token_id), comps

    return make
