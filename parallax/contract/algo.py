"""GRPO math, taken from verl's core algorithms and wrapped in one small module.

verl provides the group-normalised advantage, the clipped policy loss (separate low/high
clip, dual-clip for negative advantages), loss aggregation across data-parallel ranks and
the KL estimators; this module adapts them to Parallax's batch shapes. Note verl's GRPO
std is the unbiased sample std (torch.std) within each uid group.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch


def grpo_advantages(rewards: list[float], uids: list[str] | list[int], norm_by_std: bool = True) -> list[float]:
    """Group-normalised outcome advantages, one per trajectory; `uids` names each one's group.

    >>> [round(a, 4) for a in grpo_advantages([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"])]
    [0.7071, -0.7071, 0.0, 0.0]
    """
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    scores = torch.tensor(rewards, dtype=torch.float32)[:, None]  # [B, 1]: one outcome per sequence
    adv, _ = compute_grpo_outcome_advantage(
        scores, torch.ones_like(scores), np.asarray(uids, dtype=object), norm_adv_by_std_in_grpo=norm_by_std
    )
    return adv[:, 0].tolist()


@lru_cache(maxsize=8)
def _actor_config(clip_low: float, clip_high: float, agg: str):
    from verl.workers.config.actor import ActorConfig

    # Only the clip and aggregation fields are read by the loss; the rest are required placeholders.
    return ActorConfig(strategy="fsdp", rollout_n=1, clip_ratio=clip_low, clip_ratio_low=clip_low,
                       clip_ratio_high=clip_high, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=agg)


def policy_loss(
    logprobs: torch.Tensor,  # [b, L] current policy, response positions
    old_logprobs: torch.Tensor,  # [b, L] engine's sampling logprobs
    advantages: torch.Tensor,  # [b, L]
    response_mask: torch.Tensor,  # [b, L]
    *,
    clip_low: float,
    clip_high: float,
    agg: str,
    global_tokens: int,
    global_seqs: int,
    dp_size: int,
    is_weights: torch.Tensor | None = None,  # [b, L] off-policy correction (rollout_is_weights)
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's vanilla clipped PPO/GRPO loss for one micro-batch (times `is_weights` per token, if given).

    The loss is normalised by the *global* token (or sequence) count and multiplied by the
    data-parallel size, so that summing micro-batch losses and averaging over ranks yields
    exactly the global token-mean — independent of how the batch was split.
    """
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    cfg = _actor_config(clip_low, clip_high, agg)
    # The config is frozen but its global_batch_info dict is the documented per-step channel.
    cfg.global_batch_info.update(dp_size=dp_size, batch_num_tokens=global_tokens, global_batch_size=global_seqs)
    return get_policy_loss_fn("vanilla")(old_logprobs, logprobs, advantages, response_mask, agg, cfg,
                                         rollout_is_weights=is_weights)


def kl_loss(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, response_mask: torch.Tensor, *, kind: str, agg: str,
    global_tokens: int, global_seqs: int, dp_size: int,
) -> torch.Tensor:
    """KL(pi || pi_ref) estimate (verl's `kl_penalty`), aggregated like the policy loss."""
    from verl.trainer.ppo.core_algos import agg_loss, kl_penalty

    kl = kl_penalty(logprobs, ref_logprobs, kl_penalty=kind)  # [b, L]
    return agg_loss(kl, response_mask, agg, dp_size=dp_size, batch_num_tokens=global_tokens,
                    global_batch_size=global_seqs)


# Positions per chunk of the fp32 log-softmax: the learner never holds an fp32 [B, L, V] copy of the
# logits (at Qwen3's 151,936-token vocabulary, micro-batch 4 and 4k tokens that copy is ~10 GB), only
# one [B, LOGIT_CHUNK, V] chunk at a time (bench/bench_learner_memory.py).
LOGIT_CHUNK = 512


def _chunk_lse(chunk: torch.Tensor, temperature: float) -> torch.Tensor:
    return (chunk.float() / temperature).logsumexp(-1)  # [B, c]


def logsumexp_chunked(logits: torch.Tensor, temperature: float = 1.0, chunk: int | None = None) -> torch.Tensor:
    """logsumexp(logits / T) over the vocabulary at every position, fp32, a chunk of positions at a
    time; no gradient (`picked_logprobs` owns the backward). Shapes: [B, L, V] -> [B, L]."""
    chunk = chunk or LOGIT_CHUNK
    with torch.no_grad():
        parts = [_chunk_lse(logits[:, s:s + chunk], temperature) for s in range(0, logits.shape[1], chunk)]
    return torch.cat(parts, 1) if parts else logits.new_zeros(logits.shape[:2], dtype=torch.float32)


def _picked(logits, rows, targets, temperature, lse):
    b = torch.arange(logits.shape[0], device=logits.device)[:, None]
    return logits[b, rows, targets].float() / temperature - lse.gather(1, rows)  # [B, T]


class _PickedLogprobs(torch.autograd.Function):
    """out[b, t] = logits[b, rows[b, t], targets[b, t]] / T - lse[b, rows[b, t]], whose backward writes
    the logits' gradient one chunk of positions at a time into one tensor of the logits' dtype:
    d out[b, t] / d logits[b, rows[b, t], v] = (1[v = targets[b, t]] - softmax(logits / T)[v]) / T.
    Alive at once: the logits, their gradient, one fp32 chunk (autograd's own slice-by-slice
    backward allocated a full-size gradient per chunk)."""

    @staticmethod
    def forward(ctx, logits, rows, targets, temperature, lse):
        ctx.save_for_backward(logits, rows, targets, lse)
        ctx.temperature = temperature
        return _picked(logits, rows, targets, temperature, lse)

    @staticmethod
    def backward(ctx, grad_out):
        logits, rows, targets, lse = ctx.saved_tensors
        temperature, chunk = ctx.temperature, LOGIT_CHUNK
        g = grad_out.float() / temperature  # [B, T]
        per_row = torch.zeros(lse.shape, dtype=torch.float32, device=g.device).scatter_add_(1, rows, g)  # [B, L]
        grad = torch.empty_like(logits)
        b_all = torch.arange(logits.shape[0], device=logits.device)[:, None].expand_as(rows)
        for s in range(0, logits.shape[1], chunk):
            e = min(s + chunk, logits.shape[1])
            probs = (logits[:, s:e].float() / temperature - lse[:, s:e, None]).exp_()  # softmax, [B, c, V]
            part = probs.mul_(per_row[:, s:e, None]).neg_()
            hit = (rows >= s) & (rows < e)  # the picked logits whose row is in this chunk
            part.index_put_((b_all[hit], rows[hit] - s, targets[hit]), g[hit], accumulate=True)
            grad[:, s:e] = part
        return grad, None, None, None, None


def picked_logprobs(logits: torch.Tensor, rows: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                    lse: torch.Tensor | None = None) -> torch.Tensor:
    """log softmax(logits / T)[b, rows[b, t], targets[b, t]] without a [B, L, V] log-softmax: the one
    logit picked, minus the chunked logsumexp of its row; the backward is chunked too
    (`_PickedLogprobs`). Shapes: logits [B, L, V], rows and targets [B, T] -> [B, T] fp32."""
    if lse is None:
        lse = logsumexp_chunked(logits, temperature)  # [B, L]
    if torch.is_grad_enabled() and logits.requires_grad:
        return _PickedLogprobs.apply(logits, rows, targets, temperature, lse)
    return _picked(logits, rows, targets, temperature, lse)


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-probability of each token given its prefix, aligned to the token: out[:, j] = log p(x_j | x_<j).

    Position 0 has no prefix and gets 0. Shapes: logits [B, L, V], input_ids [B, L] -> [B, L].
    """
    B, L = input_ids.shape
    rows = torch.arange(L - 1, device=logits.device).expand(B, L - 1)  # row j-1 predicts token j
    picked = picked_logprobs(logits, rows, input_ids[:, 1:], temperature)  # [B, L-1] (the last row predicts nothing)
    return torch.nn.functional.pad(picked, (1, 0))  # [B, L]


@torch.no_grad()
def logits_entropy(logits: torch.Tensor, temperature: float = 1.0, chunk: int = LOGIT_CHUNK) -> torch.Tensor:
    """Entropy (nats) of the sampling distribution softmax(logits / T) at every position; no gradient;
    a chunk of positions at a time (no fp32 [B, L, V] copy).

    Shapes: logits [B, L, V] -> [B, L] fp32.

    >>> round(float(logits_entropy(torch.zeros(1, 1, 4))[0, 0]), 4)  # uniform over 4: ln 4
    1.3863
    """
    out = []
    for s in range(0, logits.shape[1], chunk):
        logp = (logits[:, s:s + chunk].float() / temperature).log_softmax(-1)  # [B, c, V]
        out.append(-(logp.exp() * logp).sum(-1))  # [B, c]
    return torch.cat(out, 1) if out else logits.new_zeros(logits.shape[:2], dtype=torch.float32)


def warmup_cosine(step: int, total: int, base_lr: float, warmup_ratio: float) -> float:
    """Linear warm-up over `warmup_ratio * total` steps, then cosine decay to 0 (the paper's SFT schedule).

    >>> [round(warmup_cosine(s, 10, 1.0, 0.2), 3) for s in (0, 1, 2, 6, 9)]
    [0.5, 1.0, 1.0, 0.5, 0.038]
    """
    import math

    warm = max(1, round(warmup_ratio * total)) if warmup_ratio > 0 else 0
    if step < warm:
        return base_lr * (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def rollout_is_weights(learner_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, response_mask: torch.Tensor,
                       *, level: str = "token", mode: str = "truncate", cap: float = 2.0
                       ) -> tuple[torch.Tensor, dict[str, float]]:
    """Off-policy correction weights for the policy loss: pi_learner / pi_behaviour per token (or per
    sequence, their product), through verl's `compute_rollout_correction_weights`. `truncate` (TIS)
    clamps them at `cap`; `mask` (MIS, verl's IcePop bounds) zeroes those outside [1/cap, cap].
    Detached, 0 off-response. Metrics: the mean raw ratio and the share of tokens the cap changed.

    >>> w, m = rollout_is_weights(torch.tensor([[0.0, -1.0, -1.0]]), torch.tensor([[0.0, -2.0, -1.0]]),
    ...                           torch.tensor([[0.0, 1.0, 1.0]]))
    >>> [round(x, 4) for x in w[0].tolist()], round(m["actor/is_ratio"], 4), m["actor/is_capped"]
    ([0.0, 2.0, 1.0], 1.8591, 0.5)
    """
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    if mode not in ("truncate", "mask"):
        raise ValueError(f"rollout IS mode must be truncate or mask, got {mode!r}")
    mask = response_mask.to(learner_logprobs.dtype)
    log_ratio = (learner_logprobs - engine_logprobs) * mask
    threshold = cap if mode == "truncate" else f"{1.0 / cap}_{cap}"
    weights, _ = compute_rollout_correction_weights(log_ratio, mask, rollout_is=level, rollout_is_threshold=threshold)
    raw = log_ratio.sum(-1, keepdim=True).exp().expand_as(log_ratio) if level == "sequence" else log_ratio.exp()
    on = mask.bool()
    metrics = {"actor/is_ratio": float(raw[on].mean()) if on.any() else 1.0,
               "actor/is_capped": float((weights[on] != raw[on]).float().mean()) if on.any() else 0.0}
    return weights * mask, metrics
