"""A curriculum stage: what one phase of training runs, and when it ends.

A stage names its learner mode (SFT or RL), its data source, its reward (one name, or a
schedule of rewards over its steps), its rollout and optimiser settings, and its transitions
(a step budget, an epoch count, metric predicates). ``None`` for a setting means "the run's
config value" (``trainer.*``, ``learner.*``, ``rollout.*``), so CPU-scale experiments can leave
them unset and paper-scale ones state the paper's numbers per stage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from curricula.bounds import AT_LEAST_0, AT_LEAST_1, Bound, broken
from curricula.schedule import (
    Phase,
    RewardChoice,
    check_schedule,
    parse_schedule,
    reward_at,
    schedule_rewards,
)
from curricula.transitions import Predicate, parse_predicate

KINDS = ("sft", "rl")
LR_SCHEDULES = ("constant", "cosine")


# Each numeric setting's range, (lo, hi, lo_open, hi_open) with None unbounded: the stage checks itself against
# it, and the config's schema (`parallax.contract.ranges`, `curriculum.stages.*.<key>`) reads it from here.
STAGE_RANGES: dict[str, Bound] = {
    "steps": AT_LEAST_0, "epochs": (0, None, True, False), "batch_size": AT_LEAST_1, "rollout_n": AT_LEAST_1,
    "lr": (0, None, True, False), "weight_decay": AT_LEAST_0, "warmup_ratio": (0, 1, False, True),
}


@dataclass(frozen=True)
class Stage:
    """One stage. Its fields but `name` are also the config's (`curriculum.stages.<name>.<field>`): the Hydra
    schema `parallax.contract.curriculum.StageConfig` is made from them, so each is stated here once."""

    name: str
    kind: str  # "sft" | "rl"
    # Step budget: the stage ends after this many steps at the latest (0: skipped).
    steps: int
    # Registry name (RL stages); None with no schedule: the run's `reward` config. Read through
    # `Curriculum.stage`, which resolves a schedule to the reward of the current step.
    reward: str | None = None
    reward_params: dict[str, Any] = field(default_factory=dict)
    # Reward schedule over the stage's steps (S2 alternation, scaffold switch); excludes `reward`.
    schedule: tuple[Phase, ...] = ()
    # Data source (a loader name: toyworld, gsm8k_train, dapo_math_17k, parallel_gsm8k; for an SFT stage also a
    # trajectories file, .jsonl/.json/.parquet: builder output or verl's SFT parquet); None: the run's `data`.
    data: str | None = None
    # Earlier ends: after this many epochs of `data` (metric data/epoch), or when a predicate fires.
    epochs: float | None = None
    until: tuple[Predicate, ...] = ()
    # Per-stage hyperparameters; None: the run's config (trainer/learner/rollout).
    batch_size: int | None = None  # SFT examples or RL prompts per step
    rollout_n: int | None = None  # RL samples per prompt (the GRPO group size)
    lr: float | None = None
    weight_decay: float | None = None
    warmup_ratio: float | None = None
    lr_schedule: str | None = None  # constant | cosine

    def __post_init__(self) -> None:
        object.__setattr__(self, "schedule", tuple(self.schedule))
        object.__setattr__(self, "until", tuple(self.until))
        object.__setattr__(self, "reward_params", dict(self.reward_params))
        for problem in _problems(self):
            raise ValueError(f"stage {self.name!r}: {problem}")
        check_schedule(self.schedule)

    def at(self, stage_step: int) -> Stage:
        """This stage with `reward`/`reward_params` resolved for 0-based ``stage_step`` (and the
        schedule dropped: the resolved stage is what the driver runs at that one step)."""
        if not self.schedule:
            return self
        choice = reward_at(self.schedule, stage_step)
        return dataclasses.replace(self, reward=choice.name, reward_params=dict(choice.params), schedule=())

    def reward_choice(self, stage_step: int) -> RewardChoice | None:
        """The reward at ``stage_step`` (None: SFT, or the run's reward config)."""
        if self.schedule:
            return reward_at(self.schedule, stage_step)
        return RewardChoice(self.reward, dict(self.reward_params)) if self.reward else None

    def reward_names(self) -> list[str]:
        """Every reward this stage can use (for one-hot logging and config validation)."""
        return schedule_rewards(self.schedule) if self.schedule else ([self.reward] if self.reward else [])

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (lists, not tuples): what checkpoints store and compare."""
        return _plain(dataclasses.asdict(self))


def _problems(s: Stage) -> list[str]:
    """Every reason the stage is invalid, each naming the field."""
    out = []
    if not s.name:
        out.append("a stage needs a name")
    if s.kind not in KINDS:
        out.append(f"kind must be 'sft' or 'rl', got {s.kind!r}")
    if s.reward and s.schedule:
        out.append("give either reward or schedule, not both")
    if s.kind == "sft" and (s.reward or s.schedule or s.rollout_n is not None):
        out.append("an sft stage takes no reward, schedule or rollout_n")
    if s.reward_params and not s.reward:
        out.append("reward_params given without a reward name")
    out += [p for key, bound in STAGE_RANGES.items() if (p := broken(key, getattr(s, key), bound))]
    if s.lr_schedule is not None and s.lr_schedule not in LR_SCHEDULES:
        out.append(f"lr_schedule must be one of {LR_SCHEDULES}, got {s.lr_schedule!r}")
    return out


_FIELDS = {f.name for f in dataclasses.fields(Stage)}


def stage_from_dict(name: str, raw: Mapping[str, Any]) -> Stage:
    """A stage from plain data (a YAML mapping); unknown keys are an error naming them."""
    unknown = set(raw) - _FIELDS
    if unknown:
        raise ValueError(f"stage {name!r}: unknown key(s) {sorted(unknown)}; valid: {sorted(_FIELDS - {'name'})}")
    kw = {k: v for k, v in raw.items() if k != "name"}
    try:
        kw["schedule"] = parse_schedule(kw.get("schedule"))
        kw["until"] = tuple(parse_predicate(p) for p in kw.get("until") or ())
    except ValueError as e:
        raise ValueError(f"stage {name!r}: {e}") from None
    kw["reward_params"] = dict(kw.get("reward_params") or {})
    return Stage(name=name, kind=kw.pop("kind", "rl"), steps=int(kw.pop("steps", 0)), **kw)


def _plain(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x
