"""Parason reward family: PA-GRPO and the acceleration term alone.

The formula and its choices (std, f, missing stats) are documented in
:mod:`rewards.pa_grpo`; here they are wired to analysed samples.  Default values: the seed
reports beta_sub, beta_trial in {0.05, 0.1} and alpha in {0, 0.1}; it gives no rho, so
``rho = 0`` (term off) in PA-GRPO unless configured.  The acceleration reward's defaults
(rho = 1.0, rho_clip = 0.2) are ours, not the paper's.

Example:
    >>> from rewards.types import RewardContext, Analysis, TrajStats
    >>> fast = TrajStats(total_tokens=100, critical_tokens=70, eta=0.3, n_blocks=1)
    >>> g = [Analysis(correct=True, stats=fast), Analysis(correct=False, stats=fast)]
    >>> acceleration_reward(g, RewardContext(), AccelerationParams(rho=1.0, rho_clip=0.2)).rewards
    [0.2, 0.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rewards.pa_grpo import F_NAMES, acceleration, pa_grpo_rewards
from rewards.registry import register
from rewards.types import Analysis, BaseParams, GroupScore, RewardContext

__all__ = ["AccelerationParams", "PAGRPOParams", "acceleration_reward", "pa_grpo"]


def _stat(samples: Sequence[Analysis], attr: str) -> list[float | None]:
    """Per-sample stat, None for samples without a well-formed trajectory: they are left out
    of the group's z-statistics (their numbers describe only a valid prefix)."""
    return [float(getattr(s.stats, attr)) if s.format_valid else None for s in samples]


def _base(samples: Sequence[Analysis]) -> dict[str, list[float]]:
    return {
        "acc": [float(s.correct) for s in samples],
        "format_valid": [float(s.format_valid) for s in samples],
        "parallel": [float(s.has_parallel) for s in samples],
    }


@dataclass(frozen=True)
class PAGRPOParams(BaseParams):
    """PA-GRPO weights; ``std``: ``population`` (ddof 0, default) or ``sample`` (ddof 1);
    ``require_valid_format``: a correct answer in a malformed trajectory counts as wrong."""

    format: str = "parason"
    alpha: float = 0.0
    beta_sub: float = 0.05
    beta_trial: float = 0.05
    rho: float = 0.0
    rho_clip: float = 0.2
    f: str = "linear"
    std: str = "population"
    require_valid_format: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.f not in F_NAMES:
            raise ValueError(f"f must be one of {F_NAMES}, got {self.f!r}")
        if self.std not in ("population", "sample"):
            raise ValueError(f"std must be 'population' or 'sample', got {self.std!r}")


@register("pa_grpo", params=PAGRPOParams, needs_accuracy=True, needs_parse=True)
def pa_grpo(samples: Sequence[Analysis], ctx: RewardContext, p: PAGRPOParams) -> GroupScore:
    """Parason PA-GRPO: -1 + 2*1[correct]*(1 - a f(zT) + b_sub f(zR_sub) + b_trial f(zR_trial)
    + min(rho eta, rho_clip)), z within the group."""
    correct = [s.correct and (s.format_valid or not p.require_valid_format) for s in samples]
    T = _stat(samples, "critical_tokens")
    rewards, comp = pa_grpo_rewards(
        correct,
        T,
        _stat(samples, "sub_share"),
        _stat(samples, "trial_share"),
        _stat(samples, "eta"),
        alpha=p.alpha,
        beta_sub=p.beta_sub,
        beta_trial=p.beta_trial,
        rho=p.rho,
        rho_clip=p.rho_clip,
        f=p.f,
        ddof=0 if p.std == "population" else 1,
    )
    comp["latency_T"] = [0.0 if t is None else t for t in T]
    return GroupScore(rewards, correct, {**_base(samples), **comp})


@dataclass(frozen=True)
class AccelerationParams(BaseParams):
    """``min(rho * eta, rho_clip)`` for correct samples, ``wrong`` (0) otherwise."""

    format: str = "parason"
    rho: float = 1.0
    rho_clip: float = 0.2
    wrong: float = 0.0


@register("acceleration", params=AccelerationParams, needs_accuracy=True, needs_parse=True)
def acceleration_reward(samples: Sequence[Analysis], ctx: RewardContext, p: AccelerationParams) -> GroupScore:
    """ThreadWeaver-style acceleration term alone: min(rho*eta, rho_clip) if correct."""
    eta = [s.stats.eta if s.format_valid else 0.0 for s in samples]
    accel = [acceleration(e, p.rho, p.rho_clip) for e in eta]
    rewards = [a if s.correct else p.wrong for a, s in zip(accel, samples)]
    return GroupScore(rewards, [s.correct for s in samples], {**_base(samples), "accel": accel, "eta": eta})
