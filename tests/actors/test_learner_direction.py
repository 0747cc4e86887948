"""GRPO updates through the real learner: each sequence moves with its advantage; old logprobs can be the
learner's own."""

from __future__ import annotations

import socket

import pytest

from parallax.contract.batch import with_advantages

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("zero_stage,adam_impl", [(0, "foreach"), (1, "fused"), (3, "fused")])
def test_grpo_step_follows_advantage_sign(tiny_model_path, grpo_batch, zero_stage, adam_impl):
    """Each sequence moves with its advantage, under either AdamW kernel (`learner.adam_impl`; torch's fused
    one also steps DeepSpeed's ZeRO partitions)."""
    from actors.learner import LearnerWorker
    from parallax.contract.config import LearnerConfig

    batch, _ = grpo_batch(tiny_model_path, 16)  # advantages +0.707 / -0.707 in each group
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = LearnerConfig(micro_batch_size=4, torch_threads=1, zero_stage=zero_stage, adam_impl=adam_impl)
    learner = LearnerWorker(cfg, tiny_model_path, "float32", 0, 1, f"tcp://127.0.0.1:{port}", port)
    before = learner.compute_logprobs(batch).sum(-1)  # [B] sequence logprob
    # The learner scores exactly what the engine sampled (fp32, same weights).
    assert (before - batch.old_logprobs.sum(-1)).abs().max() < 1e-4
    stats = learner.grpo_step(batch, int(batch.response_mask.sum()), len(batch), lr=1e-4)
    assert stats["actor/grad_norm"] > 0  # two micro-batches: the norm of the accumulated gradient
    delta = (learner.compute_logprobs(batch).sum(-1) - before).tolist()
    assert all(d > 0 for d in delta[0::2]), delta  # positive advantage: more likely
    assert all(d < 0 for d in delta[1::2]), delta  # negative advantage: less likely


def test_one_zero0_rank_skips_deepspeeds_all_reduce_with_the_same_update(tiny_model_path, grpo_batch):
    """One rank at ZeRO-0 has nothing to reduce: the learner turns DeepSpeed's gradient all-reduce (a copy
    of every gradient into a flat buffer and back) off. The update is bit-equal to the one with it on."""
    import torch

    from actors.learner import LearnerWorker
    from parallax.contract.config import LearnerConfig

    batch, _ = grpo_batch(tiny_model_path, 8)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    learner = LearnerWorker(LearnerConfig(micro_batch_size=4, torch_threads=1, zero_stage=0), tiny_model_path,
                            "float32", 0, 1, f"tcp://127.0.0.1:{port}", port)
    assert learner.engine.enable_backward_allreduce is False
    init = {k: v.clone() for k, v in learner.engine.module.state_dict().items()}

    def step(allreduce: bool):
        learner.engine.module.load_state_dict(init)
        learner.engine.optimizer.state.clear()
        learner.engine.enable_backward_allreduce = allreduce
        norm = learner.grpo_step(batch, int(batch.response_mask.sum()), len(batch), lr=1e-2)["actor/grad_norm"]
        return norm, {k: v.clone() for k, v in learner.engine.module.state_dict().items()}

    (skipped, after), (reduced, after_reduced) = step(False), step(True)
    assert skipped == reduced > 0
    assert any(not torch.equal(after[k], init[k]) for k in init)
    assert all(torch.equal(after[k], after_reduced[k]) for k in init)


def test_bf16_autocast_trains_in_the_advantages_direction_with_fp32_weights(tiny_model_path, grpo_batch):
    """learner.autocast=bf16: the forward runs in bf16 (its logprobs differ from the fp32 engine's), the
    weights stay fp32, and with the learner's own old logprobs the first ratio is still 1."""
    import torch

    from actors.learner import LearnerWorker
    from parallax.contract.config import LearnerConfig

    batch, comps = grpo_batch(tiny_model_path, 16)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = LearnerConfig(micro_batch_size=4, torch_threads=1, zero_stage=0, autocast="bf16", recompute_old_logprobs=True)
    learner = LearnerWorker(cfg, tiny_model_path, "float32", 0, 1, f"tcp://127.0.0.1:{port}", port)
    before = learner.compute_logprobs(batch).sum(-1)
    gap = (before - batch.old_logprobs.sum(-1)).abs()
    assert 1e-4 < gap.max() < 0.5 * len(comps[0].token_ids), gap  # bf16's rounding: near the engine's, not equal
    stats = learner.grpo_step(batch, int(batch.response_mask.sum()), len(batch), lr=1e-4)
    assert abs(stats["actor/ppo_kl"]) < 1e-4 and stats["actor/engine_logprob_gap"] > 1e-6
    assert all(p.dtype == torch.float32 for p in learner.engine.module.parameters())
    delta = (learner.compute_logprobs(batch).sum(-1) - before).tolist()
    assert all(d > 0 for d in delta[0::2]) and all(d < 0 for d in delta[1::2]), delta


def test_recomputed_old_logprobs_replace_the_engines(tiny_model_path):
    """learner.recompute_old_logprobs: the PPO ratio's denominator is the learner's own score of the
    batch (the engine's numbers only feed actor/engine_logprob_gap). Engine logprobs that are off by
    0.3 per token (as a bf16 or grammar-masked engine's could be) then do not bias the first ratio."""
    from actors.learner import LearnerWorker
    from parallax.contract.batch import SamplingParams, Trajectory
    from parallax.contract.config import LearnerConfig
    from parallax.engines.hf import HFEngine
    from parallax.layouts.causal import train_batch

    engine = HFEngine(tiny_model_path)
    tok = engine.tokenizer
    prompts = [tok("Q: 1+2\nA:")["input_ids"], tok("Q: 3*4\nA:")["input_ids"]]
    comps = engine.generate(prompts, SamplingParams(max_new_tokens=12, seed=2))
    trajs = [Trajectory(uid=str(i), prompt_ids=p, response_ids=c.token_ids, logprobs=[lp - 0.3 for lp in c.logprobs],
                        finish_reason=c.finish_reason, text="") for i, (p, c) in enumerate(zip(prompts, comps))]
    batch = train_batch(with_advantages(trajs, [0.5, -0.5]), tok.pad_token_id)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = LearnerConfig(micro_batch_size=2, torch_threads=1, recompute_old_logprobs=True)
    learner = LearnerWorker(cfg, tiny_model_path, "float32", 0, 1, f"tcp://127.0.0.1:{port}", port)
    on = learner.grpo_step(batch, int(batch.response_mask.sum()), len(batch), lr=1e-6)
    assert abs(on["actor/engine_logprob_gap"] - 0.3) < 1e-3  # the engine was 0.3 below the learner
    assert abs(on["actor/ppo_kl"]) < 1e-4  # the ratio starts at 1: the learner's own old logprobs
    cfg.recompute_old_logprobs = False
    off = learner.grpo_step(batch, int(batch.response_mask.sum()), len(batch), lr=1e-6)
    assert abs(off["actor/ppo_kl"]) > 0.2 and "actor/engine_logprob_gap" not in off  # the engine's numbers


def test_one_epoch_of_one_mini_batch_scores_the_behaviour_policy_in_the_updates_own_forward(tiny_model_path,
                                                                                          grpo_batch):
    """recompute_old_logprobs with one PPO epoch of one mini-batch: the weights have not moved when the update's
    forward runs, so its logprobs (detached) are the behaviour policy's score and no pass of its own is made:
    one forward per micro-batch, not two. The step equals one whose old logprobs were scored beforehand, and
    the engine-gap and IS metrics (token means over micro-batches) equal those of the separate pass that two
    mini-batches take; the IS weights (MIS, here masking the rows the engine scored 0.1 low) are applied."""
    import dataclasses

    import torch

    from actors.learner import LearnerWorker
    from parallax.contract.config import LearnerConfig

    batch, _ = grpo_batch(tiny_model_path, 12)  # 6 rows of unequal lengths
    low = torch.tensor([1, 1, 1, 0, 0, 0.0])[:, None] * batch.response_mask  # rows 0-2: the engine 0.1 low
    engine = batch.old_logprobs - 0.1 * low
    batch = dataclasses.replace(batch, old_logprobs=engine)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = LearnerConfig(micro_batch_size=4, torch_threads=1, zero_stage=0, recompute_old_logprobs=True,
                        rollout_is="token", rollout_is_mode="mask", rollout_is_cap=1.05)
    learner = LearnerWorker(cfg, tiny_model_path, "float32", 0, 1, f"tcp://127.0.0.1:{port}", port)
    init = {k: v.clone() for k, v in learner.engine.module.state_dict().items()}
    forwards = []
    learner.engine.module.register_forward_hook(lambda *_: forwards.append(1))

    def step(**change):
        learner.engine.module.load_state_dict(init)
        learner.engine.optimizer.state.clear()
        for k, v in change.items():
            setattr(cfg, k, v)
        forwards.clear()
        stats = learner.grpo_step(b, int(b.response_mask.sum()), len(b), lr=1e-3)
        return stats, len(forwards), {k: v.clone() for k, v in learner.engine.module.state_dict().items()}

    b = batch
    fused, n_fused, after = step()
    assert n_fused == 2  # two micro-batches, one forward each
    assert fused["actor/ppo_kl"] == 0.0 and fused["actor/pg_clipfrac"] == 0.0  # the ratio is exactly 1
    share = float(low.sum() / batch.response_mask.sum())  # of the response tokens, those the engine scored low
    assert abs(fused["actor/engine_logprob_gap"] - 0.1 * share) < 1e-4
    assert abs(fused["actor/is_ratio"] - (1 + share * (float(torch.tensor(0.1).exp()) - 1))) < 1e-4
    assert abs(fused["actor/is_capped"] - share) < 1e-6
    separate, n_separate, _ = step(ppo_mini_batches=2)  # scored by a pass of its own, then two steps
    assert n_separate == 2 + 2
    for k in ("actor/engine_logprob_gap", "actor/is_ratio", "actor/is_capped"):
        assert abs(fused[k] - separate[k]) < 1e-6, (k, fused[k], separate[k])
    # the same step as one given old logprobs the learner scored beforehand, and MIS's weights: rows 0-2 masked
    learner.engine.module.load_state_dict(init)
    b = dataclasses.replace(batch, old_logprobs=learner.compute_logprobs(batch),
                            is_weights=batch.response_mask.float() - low)
    _, _, scored = step(ppo_mini_batches=1, recompute_old_logprobs=False)
    moved = sum(float((after[k] - init[k]).abs().sum()) for k in init)
    apart = sum(float((after[k] - scored[k]).abs().sum()) for k in init)
    # equal but for Adam's first step turning a ~1e-7 gradient difference into a sign on near-zero gradients
    # (without the IS weights applied, half the step)
    assert moved > 0 and apart < 1e-3 * moved, (apart, moved)


def _sft_grad_norm(tiny_model_path, zero_stage: int) -> float:
    from transformers import AutoTokenizer

    from actors.learner import LearnerWorker
    from parallax import toyworld
    from parallax.contract.config import LearnerConfig
    from parallax.layouts.causal import sft_batch

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    batch = sft_batch(toyworld.make_splits(8, 1, 0, 1)[0], "parallel_r1", tok)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # micro-batches of 4: the norm must be the accumulated gradient's, at the boundary
    learner = LearnerWorker(LearnerConfig(micro_batch_size=4, torch_threads=1, zero_stage=zero_stage),
                            tiny_model_path, "float32", 0, 1, f"tcp://127.0.0.1:{port}", port, seed=0)
    return learner.sft_step(batch, int(batch.loss_mask.sum()), lr=1e-4)["sft/grad_norm"]


def test_grad_norm_is_reported_at_zero_stage_0(tiny_model_path):
    """DeepSpeed reports no gradient norm at ZeRO-0 (it was logged as 0.0): the learner computes it,
    and it equals ZeRO-1's for the same batch and weights (both before clipping)."""
    at0, at1 = _sft_grad_norm(tiny_model_path, 0), _sft_grad_norm(tiny_model_path, 1)
    assert at0 > 1.0  # clip is 1.0: a norm below it would hide a post-clip value
    assert abs(at0 - at1) < 1e-3 * at1, (at0, at1)


def test_the_attention_kernel_is_flex_on_cuda_and_block_sparse_sdpa_elsewhere():
    """learner.attn_implementation: auto takes FlexAttention on a CUDA learner only; a CPU learner asked
    for it is refused with the reason (FlexAttention has no backward on CPU) before any model loads."""
    from actors.learner import attention_kernel

    assert attention_kernel("auto", cuda=True) == "flex_attention"
    assert attention_kernel("auto", cuda=False) == "sdpa"
    assert attention_kernel("sdpa", cuda=True) == "sdpa"
    assert attention_kernel("flex_attention", cuda=True) == "flex_attention"
    with pytest.raises(ValueError, match="flex_attention needs a CUDA learner: FlexAttention has no backward on CPU"):
        attention_kernel("flex_attention", cuda=False)
