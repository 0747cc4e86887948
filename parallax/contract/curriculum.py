"""The curriculum slice: stages, reward schedules (phases of slot cycles), early-end predicates.

`CurriculumConfig.build` turns it into the `curricula` state machine; the registered curricula fill
the stages when the config gives none.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from parallax.contract.errors import MISSING, ConfigError, _check, _check_reward


def schema(runtime: type, nested: dict[str, Any] | None = None, defaults: dict[str, Any] | None = None,
           skip: tuple[str, ...] = ()) -> type:
    """The Hydra schema of a `curricula` dataclass, made from its own fields (their meaning and checks are stated
    there, once): the same names, types and defaults, but `nested` (a tuple of runtime records -> a list of
    their schema, empty by default), `defaults` (where the config gives one the runtime class does not), and
    without `skip`; a field with no default stays required (MISSING)."""
    import typing

    hints, fields = typing.get_type_hints(runtime), []
    for f in dataclasses.fields(runtime):
        if f.name in skip:
            continue
        if f.name in (nested or {}):
            fields.append((f.name, nested[f.name], field(default_factory=list)))
        elif f.default_factory is not dataclasses.MISSING:
            fields.append((f.name, hints[f.name], field(default_factory=f.default_factory)))
        else:
            default = (defaults or {}).get(f.name, MISSING if f.default is dataclasses.MISSING else f.default)
            fields.append((f.name, hints[f.name], field(default=default)))
    cls = dataclasses.make_dataclass(f"{runtime.__name__}Config", fields)
    cls.__module__ = __name__  # where it is found by name (pickling, OmegaConf's errors)
    return cls


def _schemas() -> tuple[type, type, type, type]:
    from curricula.schedule import Phase, Slot
    from curricula.stage import Stage
    from curricula.transitions import Predicate

    slot = schema(Slot)  # one entry of a reward cycle: a reward for `steps` consecutive steps
    phase = schema(Phase, nested={"cycle": list[slot]})  # a cycle repeated for `steps` (null: to the end)
    predicate = schema(Predicate, defaults={"op": ">="})  # an early end: `metric op value` for `patience` steps
    stage = schema(Stage, nested={"schedule": list[phase], "until": list[predicate]},
                   defaults={"kind": "rl", "steps": 0}, skip=("name",))  # the stage's name is its key
    return slot, phase, predicate, stage


SlotConfig, PhaseConfig, PredicateConfig, StageConfig = _schemas()


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
