"""Parallel-R1 reward family: format, accuracy (S1), R_parallel x R_acc, tiered, S2.

Every value is a config param.  Defaults follow the paper:

* ``format``        -- 1.0 if the whole trajectory is well formed (``formats`` parser), else 0.0.
* ``accuracy``/``s1`` -- +1 correct, -1 wrong (S1 = accuracy only).
* ``parallel_acc``  -- the Stage-1 product R_parallel x R_acc: 1.0 only if the answer is
  correct AND at least one well-formed parallel unit exists, else 0.0 (product, not sum).
* ``tiered``        -- parallel-and-correct 1.2, correct without parallel 1.0, else -1.0.
* ``s2``            -- alternating schedule over the 0-based global step ``ctx.step``: in
  each window of 10 steps, steps 0-7 use accuracy +-1, steps 8-9 use ``tiered``.

Example:
    >>> from rewards.types import RewardContext, Analysis, TrajStats
    >>> par = TrajStats(total_tokens=10, critical_tokens=6, n_blocks=1)
    >>> g = [Analysis(correct=True, stats=par), Analysis(correct=True), Analysis(correct=False, stats=par)]
    >>> tiered(g, RewardContext(), TieredParams()).rewards
    [1.2, 1.0, -1.0]
    >>> s2_uses_tiered(7, S2Params()), s2_uses_tiered(8, S2Params())
    (False, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rewards.registry import register
from rewards.types import Analysis, BaseParams, GroupScore, RewardContext

__all__ = [
    "AccuracyParams",
    "FormatParams",
    "ParallelAccParams",
    "S2Params",
    "TieredParams",
    "s2_uses_tiered",
    "tiered",
]


def _common(samples: Sequence[Analysis]) -> dict[str, list[float]]:
    """Components every Parallel-R1 reward logs."""
    return {
        "acc": [float(s.correct) for s in samples],
        "format_valid": [float(s.format_valid) for s in samples],
        "parallel": [float(s.has_parallel) for s in samples],
    }


def _score(samples: Sequence[Analysis], rewards: list[float], **extra: list[float]) -> GroupScore:
    return GroupScore(rewards, [s.correct for s in samples], {**_common(samples), **extra})


@dataclass(frozen=True)
class FormatParams(BaseParams):
    """``valid``/``invalid`` values; ``require_parallel``: also demand >= 1 parallel block."""

    valid: float = 1.0
    invalid: float = 0.0
    require_parallel: bool = False


@register("format", params=FormatParams, needs_accuracy=False, needs_parse=True)
def format_reward(samples: Sequence[Analysis], ctx: RewardContext, p: FormatParams) -> GroupScore:
    """Well-formedness only: ``valid`` if the trajectory parses (and has a parallel block
    when ``require_parallel``), else ``invalid``.  No answer verification."""
    ok = [s.format_valid and (s.has_parallel or not p.require_parallel) for s in samples]
    return _score(samples, [p.valid if o else p.invalid for o in ok])


@dataclass(frozen=True)
class AccuracyParams(BaseParams):
    """Reward for a correct / wrong final answer."""

    correct: float = 1.0
    wrong: float = -1.0


def _accuracy(samples: Sequence[Analysis], p: AccuracyParams) -> GroupScore:
    return _score(samples, [p.correct if s.correct else p.wrong for s in samples])


@register("accuracy", params=AccuracyParams, needs_accuracy=True, needs_parse=False)
def accuracy(samples: Sequence[Analysis], ctx: RewardContext, p: AccuracyParams) -> GroupScore:
    """Answer correctness only: ``correct`` (+1) or ``wrong`` (-1).  With
    ``verifier=dapo`` this is DAPO's +-1 reward."""
    return _accuracy(samples, p)


@register("s1", params=AccuracyParams, needs_accuracy=True, needs_parse=True)
def s1(samples: Sequence[Analysis], ctx: RewardContext, p: AccuracyParams) -> GroupScore:
    """Parallel-R1 Unseen S1: accuracy only (+1 / -1); parses so that the parallel ratio
    is logged."""
    return _accuracy(samples, p)


@dataclass(frozen=True)
class ParallelAccParams(BaseParams):
    """``hit``: correct AND >= 1 well-formed parallel unit; ``miss``: anything else."""

    hit: float = 1.0
    miss: float = 0.0


@register("parallel_acc", params=ParallelAccParams, needs_accuracy=True, needs_parse=True)
def parallel_acc(samples: Sequence[Analysis], ctx: RewardContext, p: ParallelAccParams) -> GroupScore:
    """Stage-1 reward R_parallel x R_acc: ``hit`` (1) only when correct and at least one
    well-formed parallel unit exists, else ``miss`` (0)."""
    return _score(samples, [p.hit if (s.correct and s.has_parallel) else p.miss for s in samples])


@dataclass(frozen=True)
class TieredParams(BaseParams):
    """Tiered values: parallel and correct / correct without parallel / anything else."""

    parallel_correct: float = 1.2
    correct: float = 1.0
    wrong: float = -1.0


def _tiered_values(samples: Sequence[Analysis], pc: float, c: float, w: float) -> list[float]:
    return [(pc if s.has_parallel else c) if s.correct else w for s in samples]


@register("tiered", params=TieredParams, needs_accuracy=True, needs_parse=True)
def tiered(samples: Sequence[Analysis], ctx: RewardContext, p: TieredParams) -> GroupScore:
    """Tiered reward: 1.2 parallel-and-correct, 1.0 correct, -1.0 otherwise."""
    return _score(samples, _tiered_values(samples, p.parallel_correct, p.correct, p.wrong))


@dataclass(frozen=True)
class S2Params(BaseParams):
    """Alternating schedule: per ``window`` steps, the first ``acc_steps`` use accuracy
    (``acc_correct``/``acc_wrong``), the rest the tiered values."""

    window: int = 10
    acc_steps: int = 8
    acc_correct: float = 1.0
    acc_wrong: float = -1.0
    parallel_correct: float = 1.2
    correct: float = 1.0
    wrong: float = -1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.window < 1 or not (0 <= self.acc_steps <= self.window):
            raise ValueError(
                f"need window >= 1 and 0 <= acc_steps <= window, got {self.window}, {self.acc_steps}"
            )


def s2_uses_tiered(step: int, p: S2Params) -> bool:
    """Whether 0-based global ``step`` is a tiered step of the S2 schedule."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return step % p.window >= p.acc_steps


@register("s2", params=S2Params, needs_accuracy=True, needs_parse=True)
def s2(samples: Sequence[Analysis], ctx: RewardContext, p: S2Params) -> GroupScore:
    """Parallel-R1 Unseen S2: accuracy +-1 on 8 of every 10 steps, tiered on the other 2.
    The step comes from ``ctx.step``; component ``s2_tiered`` says which one applied."""
    use_tiered = s2_uses_tiered(ctx.step, p)
    if use_tiered:
        rewards = _tiered_values(samples, p.parallel_correct, p.correct, p.wrong)
    else:
        rewards = [p.acc_correct if s.correct else p.acc_wrong for s in samples]
    return _score(samples, rewards, s2_tiered=[float(use_tiered)] * len(samples))
