"""The curriculum slice: stages, reward schedules (phases of slot cycles), early-end predicates.

`CurriculumConfig.build` turns it into the `curricula` state machine; the registered curricula fill
the stages when the config gives none.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from parallax.contract.errors import MISSING, ConfigError, _check, _check_reward


@dataclass
class SlotConfig:
    # One entry of a reward cycle: this reward (registry name) for `steps` consecutive steps.
    reward: str = MISSING
    params: dict[str, Any] = field(default_factory=dict)
    steps: int = 1


@dataclass
class PhaseConfig:
    # Phase length in stage steps; null: until the stage ends (last phase only).
    steps: int | None = None
    # Rewards repeated in order through the phase (window = sum of slot steps).
    cycle: list[SlotConfig] = field(default_factory=list)


@dataclass
class PredicateConfig:
    # End the stage early when `metric op value` holds for `patience` consecutive steps.
    metric: str = MISSING
    op: str = ">="
    value: float = MISSING
    min_steps: int = 0
    patience: int = 1


def _stage_config() -> type:
    """`StageConfig`, the Hydra schema of one stage: `curricula.Stage`'s fields but its name (their meaning and
    ranges are stated there), each as the config holds it: a schedule a list of `PhaseConfig`, early ends a list
    of `PredicateConfig`; `kind` defaults to rl and `steps` to 0."""
    import typing

    from curricula.stage import Stage

    hints, fields = typing.get_type_hints(Stage), []
    as_config = {"schedule": list[PhaseConfig], "until": list[PredicateConfig]}
    for f in dataclasses.fields(Stage):
        if f.name == "name":
            continue
        if f.name in as_config:
            fields.append((f.name, as_config[f.name], field(default_factory=list)))
        elif f.default_factory is not dataclasses.MISSING:
            fields.append((f.name, hints[f.name], field(default_factory=f.default_factory)))
        else:
            default = {"kind": "rl", "steps": 0}.get(f.name, f.default)
            fields.append((f.name, hints[f.name], field(default=default)))
    cls = dataclasses.make_dataclass("StageConfig", fields)
    cls.__module__ = __name__  # where it is found by name (pickling, OmegaConf's errors)
    return cls


StageConfig = _stage_config()


@dataclass
class CurriculumConfig:
    # Curriculum by registry name; the state machine owns stage order and reward schedules.
    # With `stages` given, the name only labels the curriculum (checkpoints compare it).
    name: str = "sft_then_rl"
    # Stages in order, keyed by stage name (the one home of step budgets); empty: the registered
    # builder `name` with its own defaults.
    stages: dict[str, StageConfig] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from curricula import curriculum_names

        if not self.stages:
            _check(self.name in curriculum_names(), "curriculum.name",
                   f"unknown curriculum {self.name!r}; registered: {curriculum_names()}, or give curriculum.stages")
            return
        built = self.build(None)
        for s in built.stages:
            for choice in _stage_choices(s):
                _check_reward(f"curriculum.stages.{s.name}.{'schedule' if s.schedule else 'reward'}",
                              choice.name, choice.params)

    def build(self, reward):
        """The curriculum this config describes (a `curricula.Curriculum`).

        RL stages without their own reward use the run's `reward` (name and merged params).
        """
        from curricula import build_curriculum, curriculum_from_dict

        default = (reward.name, dict(reward.params)) if reward else None
        try:
            if self.stages:
                plain = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else dict(v)
                         for k, v in self.stages.items()}
                return curriculum_from_dict(self.name, plain, default)
            return build_curriculum(self.name, reward=default[0] if default else None,
                                    reward_params=default[1] if default else None)
        except ValueError as e:
            raise ConfigError(f"curriculum.stages: {e}") from None


def _stage_choices(stage):
    """Every (reward, params) a stage can resolve to: its reward, or each slot of its schedule."""
    from curricula import RewardChoice

    if stage.schedule:
        return [RewardChoice(s.reward, s.params) for p in stage.schedule for s in p.cycle]
    return [RewardChoice(stage.reward, stage.reward_params)] if stage.reward else []
