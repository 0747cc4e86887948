"""Curricula by name, and curricula written as data (the `curriculum.stages` config).

Two ways to get a curriculum:
* `build_curriculum(name, **kwargs)`: a registered builder (a plugin boundary, like rewards);
* `curriculum_from_dict(name, stages, default_reward)`: stages as YAML writes them, in order.

    >>> c = curriculum_from_dict("demo", {"sft": {"kind": "sft", "steps": 1},
    ...                                   "rl": {"steps": 2, "reward": "accuracy"}})
    >>> [s.name for s in c.stages], c.total_steps
    (['sft', 'rl'], 3)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from curricula.machine import Curriculum
from curricula.stage import Stage, stage_from_dict

_BUILDERS: dict[str, Callable[..., Curriculum]] = {}


def register_curriculum(name: str):
    """Register a builder under ``name``; a second registration of a name is refused."""
    def deco(fn: Callable[..., Curriculum]) -> Callable[..., Curriculum]:
        if name in _BUILDERS:
            raise ValueError(f"curriculum {name!r} is already registered")
        _BUILDERS[name] = fn
        return fn

    return deco


def curriculum_names() -> list[str]:
    return sorted(_BUILDERS)


def build_curriculum(name: str, **kwargs: Any) -> Curriculum:
    if name not in _BUILDERS:
        raise ValueError(f"unknown curriculum {name!r}; registered: {curriculum_names()} "
                         f"(or write the stages in the config: curriculum.stages)")
    return _BUILDERS[name](**kwargs)


def curriculum_from_dict(name: str, stages: Mapping[str, Mapping[str, Any]],
                         default_reward: tuple[str, Mapping[str, Any]] | None = None) -> Curriculum:
    """Stages in mapping order, keyed by stage name. RL stages without a reward or schedule
    take ``default_reward`` (the run's `reward` config), so every RL step names its reward."""
    if not stages:
        raise ValueError(f"curriculum {name!r} has no stages")
    built = [_with_default(stage_from_dict(k, v), default_reward) for k, v in stages.items()]
    return Curriculum(built, name=name)


def _with_default(stage: Stage, default: tuple[str, Mapping[str, Any]] | None) -> Stage:
    if stage.kind != "rl" or stage.reward or stage.schedule or default is None:
        return stage
    return dataclasses.replace(stage, reward=default[0], reward_params=dict(default[1]))


@register_curriculum("sft_then_rl")
def sft_then_rl(sft_steps: int = 60, rl_steps: int = 20, reward: str | None = None,
                reward_params: Mapping[str, Any] | None = None) -> Curriculum:
    """Cold-start SFT, then RL with one reward (Parallel-R1's recipe without the GSM8K stage)."""
    return Curriculum([Stage("sft", "sft", sft_steps),
                       Stage("rl", "rl", rl_steps, reward=reward, reward_params=dict(reward_params or {}))],
                      name="sft_then_rl")
