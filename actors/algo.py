"""GRPO math, taken from verl's core algorithms and wrapped in one small module.

verl provides the group-normalised advantage, the clipped policy loss (separate low/high
clip, dual-clip for negative advantages), loss aggregation across data-parallel ranks and
the KL estimators; this module adapts them to Parallax's batch shapes. Note verl's GRPO
std is the unbiased sample std (torch.std) within each uid group.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import numpy as np
import torch

from parallax.contract.batch import ScoredGroup, StepSamples


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


def group_advantages(rewards: list[float], norm_by_std: bool = True, epsilon: float = 1e-6) -> list[float]:
    """One group's GRPO advantages as `grpo_advantages` defines them (verl's: a lone sample's mean 0 and std
    1, the unbiased std, `epsilon` 1e-6), with exact sums (`math.fsum`), so the order of the group's samples
    changes no bit of any (verl's float32 sums in sample order move the last bits: 0.8728696 and 0.8728697
    for one sample of a group of three).

    >>> [round(a, 4) for a in group_advantages([1.0, 0.0])]
    [0.7071, -0.7071]
    """
    n = len(rewards)
    if n == 1:
        mean, std = 0.0, 1.0
    else:
        mean = math.fsum(rewards) / n
        std = math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [(r - mean) / (std + epsilon) if norm_by_std else r - mean for r in rewards]


def set_advantages(samples: StepSamples, norm_by_std: bool = True) -> StepSamples:
    """The step with each sample's GRPO advantage set on its record: a fold over the groups, each
    normalised by its own rewards alone (`group_advantages`), so neither the groups' order, nor a group's
    place in the step, nor its samples' order changes any sample's advantage."""
    groups = [ScoredGroup(g.prompt, [replace(x, advantage=a) for x, a in
                                     zip(g.samples, group_advantages(g.rewards, norm_by_std))])
              for g in samples.groups]
    return replace(samples, groups=groups)


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
