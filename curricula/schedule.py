"""Reward schedules: which reward (name, params) a stage uses at each of its steps.

A schedule is a tuple of phases run in order. A phase lasts ``steps`` steps (``None``: until
the stage ends; only the last phase may) and repeats its ``cycle`` of slots, each slot naming
a reward for ``steps`` consecutive steps. Steps count from the start of the stage, so a
schedule behaves the same whatever came before it (SFT steps do not shift the S2 window).

    Parallel-R1 S2 (window 10: 8 accuracy, then 2 tiered):
        (Phase((Slot("accuracy", steps=8), Slot("tiered", steps=2))),)
    Exploration scaffold (S2 for 200 steps, then accuracy only):
        (Phase(S2_CYCLE, steps=200), Phase((Slot("accuracy"),)))

    >>> s2 = (Phase((Slot("accuracy", steps=8), Slot("tiered", steps=2))),)
    >>> [reward_at(s2, i).name for i in (0, 7, 8, 9, 10)]
    ['accuracy', 'accuracy', 'tiered', 'tiered', 'accuracy']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from curricula.bounds import AT_LEAST_1, Bound, broken


@dataclass(frozen=True)
class RewardChoice:
    """A reward by registry name (see `python -m rewards list`) and its parameters."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)


# the config's schema reads these (curricula/bounds.py)
SLOT_RANGES: dict[str, Bound] = {"steps": AT_LEAST_1}
PHASE_RANGES: dict[str, Bound] = {"steps": AT_LEAST_1}


@dataclass(frozen=True)
class Slot:
    """One entry of a cycle: ``reward`` with ``params`` for ``steps`` consecutive steps."""

    reward: str
    params: dict[str, Any] = field(default_factory=dict)
    steps: int = 1

    def __post_init__(self) -> None:
        if not self.reward:
            raise ValueError("a schedule slot needs a reward name")
        if problem := broken("steps", self.steps, SLOT_RANGES["steps"]):
            raise ValueError(f"schedule slot {self.reward!r}: {problem}")


@dataclass(frozen=True)
class Phase:
    """Repeat ``cycle`` for ``steps`` steps (``None``: until the stage ends)."""

    cycle: tuple[Slot, ...]
    steps: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "cycle", tuple(self.cycle))
        if not self.cycle:
            raise ValueError("a schedule phase needs at least one slot in its cycle")
        if problem := broken("steps", self.steps, PHASE_RANGES["steps"]):
            raise ValueError(f"schedule phase: {problem} (or null: until the stage ends)")

    @property
    def window(self) -> int:
        return sum(s.steps for s in self.cycle)


def check_schedule(phases: Sequence[Phase]) -> None:
    """Only the last phase may be open-ended: an open phase in the middle would hide the rest."""
    for p in phases[:-1]:
        if p.steps is None:
            raise ValueError("only the last schedule phase may omit steps (run until the stage ends)")


def reward_at(phases: Sequence[Phase], step: int) -> RewardChoice:
    """The reward of 0-based stage step ``step``; past a closed last phase its last slot holds."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if not phases:
        raise ValueError("empty schedule")
    start = 0
    for phase in phases:
        if phase.steps is None or step < start + phase.steps:
            return _in_cycle(phase.cycle, (step - start) % phase.window)
        start += phase.steps
    last = phases[-1].cycle[-1]  # the schedule is shorter than the stage: keep the final reward
    return RewardChoice(last.reward, dict(last.params))


def _in_cycle(cycle: Sequence[Slot], offset: int) -> RewardChoice:
    for slot in cycle:
        if offset < slot.steps:
            return RewardChoice(slot.reward, dict(slot.params))
        offset -= slot.steps
    raise AssertionError("offset beyond the cycle window")  # unreachable: offset < window


def schedule_rewards(phases: Sequence[Phase]) -> list[str]:
    """Every reward name a schedule can produce, in first-use order."""
    names = [s.reward for p in phases for s in p.cycle]
    return list(dict.fromkeys(names))


def parse_schedule(raw: Sequence[Mapping[str, Any]] | None) -> tuple[Phase, ...]:
    """Phases from plain data, as YAML writes them::

        - steps: 200
          cycle: [{reward: accuracy, steps: 8}, {reward: tiered, steps: 2}]
        - cycle: [{reward: accuracy}]
    """
    phases = []
    for i, p in enumerate(raw or ()):
        if isinstance(p, Phase):
            phases.append(p)
            continue
        unknown = set(p) - {"steps", "cycle"}
        if unknown:
            raise ValueError(f"schedule phase {i}: unknown key(s) {sorted(unknown)}; valid: cycle, steps")
        slots = [s if isinstance(s, Slot) else _slot(s, i) for s in p.get("cycle") or ()]
        phases.append(Phase(tuple(slots), p.get("steps")))
    out = tuple(phases)
    check_schedule(out)
    return out


def _slot(raw: Mapping[str, Any], phase: int) -> Slot:
    unknown = set(raw) - {"reward", "params", "steps"}
    if unknown:
        raise ValueError(f"schedule phase {phase}: unknown slot key(s) {sorted(unknown)}; valid: reward, params, steps")
    return Slot(raw.get("reward") or "", dict(raw.get("params") or {}), int(raw.get("steps", 1)))
