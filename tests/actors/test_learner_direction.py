"""A GRPO update moves each sequence's log-probability in the direction of its advantage."""

from __future__ import annotations

import socket

import pytest

pytestmark = pytest.mark.slow


def test_grpo_step_follows_advantage_sign(tiny_model_path):
    import toyworld
    from actors.hf_engine import HFEngine
    from actors.learner import LearnerWorker
    from orchestrator import algo
    from orchestrator.batch import SamplingParams, Trajectory
    from orchestrator.config import LearnerConfig
    from orchestrator.data import train_batch

    engine = HFEngine(tiny_model_path)
    tok = engine.tokenizer
    prompts = [tok(p.prompt)["input_ids"] for p in toyworld.generate("mixed", 3, seed=5)]
    flat = [p for p in prompts for _ in range(2)]
    comps = engine.generate(flat, SamplingParams(max_new_tokens=16, seed=3))
    trajs = [Trajectory(uid=str(i // 2), prompt_ids=p, response_ids=c.token_ids, logprobs=c.logprobs,
                        finish_reason=c.finish_reason, text="") for i, (p, c) in enumerate(zip(flat, comps))]
    adv = algo.grpo_advantages([1.0, 0.0] * 3, [t.uid for t in trajs])  # +0.707 / -0.707 in each group
    batch = train_batch(trajs, adv, tok.pad_token_id)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    learner = LearnerWorker(LearnerConfig(micro_batch_size=4, torch_threads=1), tiny_model_path, "float32",
                            0, 1, "127.0.0.1", port)
    before = learner.compute_logprobs(batch).sum(-1)  # [B] sequence logprob
    # The learner scores exactly what the engine sampled (fp32, same weights).
    assert (before - batch.old_logprobs.sum(-1)).abs().max() < 1e-4
    learner.grpo_step(batch, int(batch.response_mask.sum()), len(batch), lr=1e-4)
    delta = (learner.compute_logprobs(batch).sum(-1) - before).tolist()
    assert all(d > 0 for d in delta[0::2]), delta  # positive advantage: more likely
    assert all(d < 0 for d in delta[1::2]), delta  # negative advantage: less likely
