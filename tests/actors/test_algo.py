"""GRPO math (through verl) against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from actors import algo
from parallax.layouts import logprobs as lp


def test_grpo_advantages_by_hand():
    # group a: rewards (1, 0): mean 0.5, sample std sqrt(0.5) -> +-0.5/0.7071 = +-0.7071
    # group b: (1, 1): zero spread -> 0; group c: (2, 0, 1): mean 1, std 1 -> (1, -1, 0)
    adv = algo.grpo_advantages([1, 0, 1, 1, 2, 0, 1], list("aabbccc"))
    assert adv == pytest.approx([0.70710, -0.70710, 0, 0, 1, -1, 0], abs=1e-4)


def test_grpo_advantages_without_std_norm_is_centred_only():
    assert algo.grpo_advantages([3, 1], ["a", "a"], norm_by_std=False) == pytest.approx([1, -1])


def _loss(logp, old, adv, mask, **kw):
    t = lambda x: torch.tensor([x], dtype=torch.float32)
    args = {"clip_low": 0.2, "clip_high": 0.28, "agg": "token-mean", "global_tokens": int(sum(mask)), "global_seqs": 1,
                "dp_size": 1} | kw
    return algo.policy_loss(t(logp), t(old), t(adv), t(mask), **args)


def test_policy_loss_asymmetric_clip_by_hand():
    # token 1: ratio 1.5, A=+1 -> max(-1.5, -clip(1.5, 0.8, 1.28)) = -1.28
    # token 2: ratio 0.5, A=-1 -> max(0.5, 0.8) = 0.8, dual clip min(3.0, 0.8) = 0.8
    loss, m = _loss([math.log(1.5), math.log(0.5)], [0, 0], [1, -1], [1, 1])
    assert float(loss) == pytest.approx((-1.28 + 0.8) / 2, abs=1e-6)
    assert m["actor/pg_clipfrac"] == pytest.approx(1.0)


def test_policy_loss_global_normalisation_matches_split():
    # The same 2 tokens scored as one micro-batch or as two halves summed must agree:
    # each half is divided by the global token count (2), not its own (1).
    whole, _ = _loss([0.1, -0.2], [0, 0], [1, -1], [1, 1])
    h1, _ = _loss([0.1], [0], [1], [1], global_tokens=2)
    h2, _ = _loss([-0.2], [0], [-1], [1], global_tokens=2)
    assert float(whole) == pytest.approx(float(h1 + h2), abs=1e-6)


def test_masked_tokens_do_not_count():
    loss, _ = _loss([math.log(1.1), 5.0], [0, 0], [1, 1], [1, 0])
    assert float(loss) == pytest.approx(-1.1, abs=1e-5)


def test_token_logprobs_alignment():
    # vocabulary of 3; logits favour token (t+1) % 3 at every position
    ids = torch.tensor([[0, 1, 2, 0]])
    logits = torch.zeros(1, 4, 3)
    for t in range(4):
        logits[0, t, (t + 1) % 3] = math.log(4.0)  # p = 4/6 for the favoured token, 1/6 others
    out = lp.token_logprobs(logits, ids)
    assert out[0, 0] == 0.0  # no prefix
    assert out[0, 1:].tolist() == pytest.approx([math.log(4 / 6)] * 3, abs=1e-6)
    # temperature 2 halves the logit gap: p = 2/4
    out_t = lp.token_logprobs(logits, ids, temperature=2.0)
    assert out_t[0, 1].item() == pytest.approx(math.log(2 / 4), abs=1e-6)


def test_kl_low_var_is_zero_at_reference():
    x = torch.tensor([[0.3, -0.7]])
    kl = algo.kl_loss(x, x.clone(), torch.ones(1, 2), kind="low_var_kl", agg="token-mean", global_tokens=2,
                      global_seqs=1, dp_size=1)
    assert float(kl) == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("step,expected", [(0, 0.5), (1, 1.0), (2, 1.0), (6, 0.5), (9, 0.0380602)])
def test_warmup_cosine_by_hand(step, expected):
    # 10 steps, warm-up 2: linear 0.5, 1.0; cosine over the remaining 8: 0.5*(1+cos(pi*k/8))
    assert algo.warmup_cosine(step, 10, 1.0, 0.2) == pytest.approx(expected, abs=1e-6)


def test_rollout_is_weights_truncate_and_mask_by_hand():
    """ratio = exp(learner - engine): e^1 = 2.718 (over the cap of 2), e^0 = 1, e^-1 = 0.368 (under 1/2)."""
    import math

    import torch

    from actors.algo import rollout_is_weights

    learner = torch.tensor([[0.0, -1.0, -1.0, -2.0]])
    engine = torch.tensor([[0.0, -2.0, -1.0, -1.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    w, m = rollout_is_weights(learner, engine, mask, mode="truncate", cap=2.0)
    assert w[0].tolist() == pytest.approx([0.0, 2.0, 1.0, math.exp(-1)], abs=1e-5)
    assert m["actor/is_ratio"] == pytest.approx((math.e + 1 + math.exp(-1)) / 3, abs=1e-5)
    assert m["actor/is_capped"] == pytest.approx(1 / 3)
    w, _ = rollout_is_weights(learner, engine, mask, mode="mask", cap=2.0)  # outside [0.5, 2] -> 0
    assert w[0].tolist() == pytest.approx([0.0, 0.0, 1.0, 0.0], abs=1e-6)
    w, _ = rollout_is_weights(learner, engine, mask, level="sequence", mode="truncate", cap=2.0)
    assert w[0].tolist() == pytest.approx([0.0, 1.0, 1.0, 1.0], abs=1e-5)  # product e^(1+0-1) = 1
    with pytest.raises(ValueError, match="truncate or mask"):
        rollout_is_weights(learner, engine, mask, mode="clip")


def test_train_batch_pieces_are_contiguous_and_cover_every_row():
    import torch

    from parallax.contract.batch import TrainBatch

    t = torch.arange(5)[:, None].repeat(1, 3)
    batch = TrainBatch(t, t, t.float(), t.float(), t.float(), is_weights=t.float())
    pieces = batch.pieces(2)
    assert [p.input_ids[:, 0].tolist() for p in pieces] == [[0, 1, 2], [3, 4]]
    assert pieces[1].is_weights[:, 0].tolist() == [3.0, 4.0]
    assert [len(p) for p in batch.shard(1, 2).pieces(3)] == [1, 1]  # rows 1, 3: empty pieces dropped


def _dense_token_logprobs(logits, ids, t):  # the path before chunking: an fp32 [B, L, V] log-softmax
    logp = (logits[:, :-1].float() / t).log_softmax(-1)
    return torch.nn.functional.pad(logp.gather(-1, ids[:, 1:, None]).squeeze(-1), (1, 0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_logprobs_equal_the_dense_log_softmax_values_and_gradients(dtype, monkeypatch):
    monkeypatch.setattr(lp, "LOGIT_CHUNK", 7)  # many chunks, a ragged last one
    torch.manual_seed(0)
    logits = (torch.randn(2, 30, 53) * 3).to(dtype).requires_grad_()
    ids = torch.randint(0, 53, (2, 30))
    dense, chunked = _dense_token_logprobs(logits, ids, 0.7), lp.token_logprobs(logits, ids, 0.7)
    assert chunked.dtype == torch.float32 and (dense - chunked).abs().max() < 1e-5
    g_dense, = torch.autograd.grad(dense.sum(), logits)
    g_chunked, = torch.autograd.grad(chunked.sum(), logits)
    assert (g_dense.float() - g_chunked.float()).abs().max() < (1e-5 if dtype == torch.float32 else 1e-2)  # bf16 grads
    ref = (logits.detach().float() / 0.7).log_softmax(-1)
    assert (-(ref.exp() * ref).sum(-1) - lp.logits_entropy(logits, 0.7)).abs().max() < 1e-5


def test_structured_logprobs_read_the_chunked_rows_they_point_at(monkeypatch):
    from parallax.layouts.masks import structured_token_logprobs

    monkeypatch.setattr(lp, "LOGIT_CHUNK", 4)
    torch.manual_seed(1)
    logits, ids = torch.randn(2, 11, 17).requires_grad_(), torch.randint(0, 17, (2, 11))
    # rows predicting several tokens (a fork's first tokens), across chunk borders
    pred = torch.tensor([[-1, 0, 1, 1, 3, 4, 2, 6, 7, 9, 9], [-1, 0, 0, 2, 3, 3, 5, 6, 8, 8, 9]])
    dense = (logits / 1.3).log_softmax(-1)
    want = torch.where(pred >= 0, dense[torch.arange(2)[:, None], pred.clamp(min=0), ids], torch.zeros(2, 11))
    got = structured_token_logprobs(logits, ids, pred, 1.3)
    assert (got - want).abs().max() < 1e-5
    weights = torch.randn(2, 11)  # a policy-gradient-shaped loss: the chunked backward, repeated rows summed
    g_want, = torch.autograd.grad((want * weights).sum(), logits)
    g_got, = torch.autograd.grad((got * weights).sum(), logits)
    assert (g_want - g_got).abs().max() < 1e-5
