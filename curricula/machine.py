"""The curriculum state machine: an ordered list of stages, each ending after a step count.

The driver reads `curriculum.stage` (what to run now: SFT or RL, which reward), runs one
step, then calls `update(metrics)`. `state_dict()` / `load_state_dict()` make runs resumable.
Stages name their reward by registry name, so reward schedules live here, not in the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Stage:
    name: str
    kind: str  # "sft" | "rl"
    steps: int
    reward: str | None = None  # registry name (RL stages); None: the run's reward config
    reward_params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in ("sft", "rl"):
            raise ValueError(f"stage {self.name!r}: kind must be 'sft' or 'rl', got {self.kind!r}")
        if self.steps < 0:
            raise ValueError(f"stage {self.name!r}: steps must be >= 0, got {self.steps}")


class Curriculum:
    """Stages run in order; empty stages are skipped. Pure: no I/O, no clocks."""

    def __init__(self, stages: list[Stage]):
        if not stages:
            raise ValueError("a curriculum needs at least one stage")
        self.stages = stages
        self.index = 0  # current stage
        self.stage_step = 0  # steps done in the current stage
        self.global_step = 0
        self._skip_empty()

    @property
    def done(self) -> bool:
        return self.index >= len(self.stages)

    @property
    def stage(self) -> Stage:
        if self.done:
            raise IndexError("curriculum finished")
        return self.stages[self.index]

    @property
    def total_steps(self) -> int:
        return sum(s.steps for s in self.stages)

    def update(self, metrics: dict[str, float]) -> Stage | None:
        """Record one finished step; returns the stage of the next step (None when done)."""
        del metrics  # step-count transitions only, for now; metric predicates come with issue 7
        self.stage_step += 1
        self.global_step += 1
        if self.stage_step >= self.stage.steps:
            self.index += 1
            self.stage_step = 0
            self._skip_empty()
        return None if self.done else self.stage

    def _skip_empty(self) -> None:
        while not self.done and self.stages[self.index].steps == 0:
            self.index += 1

    def state_dict(self) -> dict[str, Any]:
        return {"index": self.index, "stage_step": self.stage_step, "global_step": self.global_step,
                "stages": [asdict(s) for s in self.stages]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if [asdict(s) for s in self.stages] != state["stages"]:
            raise ValueError("checkpoint was written by a different curriculum; refusing to resume into this one")
        self.index, self.stage_step, self.global_step = state["index"], state["stage_step"], state["global_step"]


_BUILDERS: dict[str, Callable[..., Curriculum]] = {}


def register_curriculum(name: str):
    def deco(fn):
        if name in _BUILDERS:
            raise ValueError(f"curriculum {name!r} is already registered")
        _BUILDERS[name] = fn
        return fn

    return deco


def curriculum_names() -> list[str]:
    return sorted(_BUILDERS)


def build_curriculum(name: str, **kwargs) -> Curriculum:
    if name not in _BUILDERS:
        raise ValueError(f"unknown curriculum {name!r}; registered: {curriculum_names()}")
    return _BUILDERS[name](**kwargs)


@register_curriculum("sft_then_rl")
def sft_then_rl(sft_steps: int, rl_steps: int, reward: str | None = None) -> Curriculum:
    """Cold-start SFT, then RL with one reward (Parallel-R1's recipe without the GSM8K stage)."""
    return Curriculum([Stage("sft", "sft", sft_steps), Stage("rl", "rl", rl_steps, reward=reward)])
