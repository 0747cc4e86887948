"""The curriculum state machine: ordered stages, each ending on its budget or a transition.

The driver reads `curriculum.stage` (what to run now, with the reward of this very step
resolved from the stage's schedule), runs one step, logs `curriculum.metrics()` with the
step's metrics, then calls `update(metrics)`. `state_dict()` / `load_state_dict()` carry
everything needed to resume mid-stage, and refuse a checkpoint written by another curriculum.
Pure: no I/O, no clocks, no randomness.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from curricula.schedule import RewardChoice
from curricula.stage import Stage
from curricula.transitions import EPOCH_METRIC, Predicate

STATE_VERSION = 2


class Curriculum:
    """Stages run in order; stages with a zero budget are skipped."""

    def __init__(self, stages: Sequence[Stage], name: str = "custom"):
        if not stages:
            raise ValueError("a curriculum needs at least one stage")
        names = [s.name for s in stages]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            # The driver detects a stage change by name, so names must be unique.
            raise ValueError(f"curriculum {name!r}: duplicate stage name(s) {dupes}")
        self.name = name
        self.stages = list(stages)
        self.index = 0  # current stage
        self.stage_step = 0  # steps done in the current stage
        self.global_step = 0
        self.streaks: list[int] = []  # consecutive steps each `until` predicate of this stage held
        self.history: list[dict[str, Any]] = []  # finished stages: name, steps, ended_by, global_step
        self._enter(0)

    # ---- what to run now ---------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.index >= len(self.stages)

    @property
    def definition(self) -> Stage:
        """The current stage as configured (its schedule unresolved)."""
        if self.done:
            raise IndexError("curriculum finished")
        return self.stages[self.index]

    @property
    def stage(self) -> Stage:
        """The current stage with `reward` / `reward_params` resolved for the current step."""
        return self.definition.at(self.stage_step)

    def reward_for_step(self) -> RewardChoice | None:
        """The reward of the current step (None: SFT, or the run's reward config)."""
        return self.definition.reward_choice(self.stage_step)

    def surely_in_stage(self, ahead: int) -> bool:
        """Whether the step `ahead` steps from now is surely in the current stage: its budget has room
        and nothing a metric decides (`until`, `epochs`) can end the stage before (the driver's
        pipeline only runs such steps ahead)."""
        if self.done:
            return False
        stage = self.stages[self.index]
        return not stage.until and stage.epochs is None and self.stage_step + ahead < stage.steps

    @property
    def total_steps(self) -> int:
        """Upper bound on the run's steps (transitions can end stages earlier)."""
        return sum(s.steps for s in self.stages)

    def metrics(self) -> dict[str, Any]:
        """Log with each step: stage index and step, the reward name, and a one-hot
        `curriculum/reward/<name>` per reward of the curriculum so a switch shows in plots."""
        out: dict[str, Any] = {"curriculum/stage": self.index, "curriculum/stage_step": self.stage_step}
        choice = None if self.done else self.reward_for_step()
        out["curriculum/reward"] = choice.name if choice else ("none" if self.done else self.definition.kind)
        for name in self.reward_names():
            out[f"curriculum/reward/{name}"] = float(choice is not None and choice.name == name)
        return out

    def reward_names(self) -> list[str]:
        return list(dict.fromkeys(n for s in self.stages for n in s.reward_names()))

    # ---- transitions ---------------------------------------------------------------------------
    def update(self, metrics: Mapping[str, Any]) -> Stage | None:
        """Record one finished step with its metrics; returns the next step's stage (None when done)."""
        if self.done:
            raise IndexError("update() after the curriculum finished")
        stage = self.stages[self.index]
        self.stage_step += 1
        self.global_step += 1
        reason = self._end_reason(stage, metrics)
        if reason:
            self.history.append({"stage": stage.name, "steps": self.stage_step, "ended_by": reason,
                                 "global_step": self.global_step})
            self._enter(self.index + 1)
        return None if self.done else self.stage

    def _end_reason(self, stage: Stage, metrics: Mapping[str, Any]) -> str | None:
        """Why the stage ends after this step, or None. Every predicate is updated each step so
        patience counts stay exact even when the budget ends the stage at the same step."""
        fired = None
        for i, p in enumerate(stage.until):
            if self.stage_step >= p.min_steps:
                self.streaks[i] = self.streaks[i] + 1 if p.holds(metrics) else 0
                if self.streaks[i] >= p.patience and fired is None:
                    fired = f"metric {p}"
        if stage.epochs is not None and Predicate(EPOCH_METRIC, ">=", stage.epochs).holds(metrics):
            fired = fired or f"epochs {stage.epochs:g}"
        if self.stage_step >= stage.steps:
            return "steps"
        return fired

    def _enter(self, index: int) -> None:
        """Start stage ``index``, skipping zero-budget stages (recorded as skipped)."""
        self.index, self.stage_step = index, 0
        while not self.done and self.stages[self.index].steps == 0:
            self.history.append({"stage": self.stages[self.index].name, "steps": 0, "ended_by": "skipped",
                                 "global_step": self.global_step})
            self.index += 1
        self.streaks = [0] * (0 if self.done else len(self.stages[self.index].until))

    # ---- serialisation -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-able state: the definition (to refuse a different curriculum) and position."""
        return {"version": STATE_VERSION, "name": self.name, "stages": [s.to_dict() for s in self.stages],
                "index": self.index, "stage_step": self.stage_step, "global_step": self.global_step,
                "streaks": list(self.streaks), "history": [dict(h) for h in self.history]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state``; raises ValueError (changing nothing) if it does not fit."""
        _check_compatible(self, state)
        self.index, self.stage_step = int(state["index"]), int(state["stage_step"])
        self.global_step = int(state["global_step"])
        self.streaks = [int(x) for x in state["streaks"]]
        self.history = [dict(h) for h in state["history"]]


def _check_compatible(c: Curriculum, state: Mapping[str, Any]) -> None:
    missing = {"version", "name", "stages", "index", "stage_step", "global_step", "streaks", "history"} - set(state)
    if missing:
        raise ValueError(f"curriculum state lacks {sorted(missing)}; written by an older version?")
    if state["version"] != STATE_VERSION:
        raise ValueError(f"curriculum state version {state['version']} != {STATE_VERSION}")
    mine = [s.to_dict() for s in c.stages]
    if state["name"] != c.name or state["stages"] != mine:
        raise ValueError(f"checkpoint was written by a different curriculum ({state['name']!r}: "
                         f"{_first_difference(state['stages'], mine)}); refusing to resume into {c.name!r}")
    index, stage_step = state["index"], state["stage_step"]
    if not (0 <= index <= len(c.stages)) or stage_step < 0 or (index < len(c.stages)
                                                                and stage_step >= c.stages[index].steps):
        raise ValueError(f"curriculum state out of range: index {index}, stage_step {stage_step}")
    expected = 0 if index == len(c.stages) else len(c.stages[index].until)
    if len(state["streaks"]) != expected:
        raise ValueError(f"curriculum state has {len(state['streaks'])} predicate streaks, stage needs {expected}")


def _first_difference(theirs: list[dict], mine: list[dict]) -> str:
    if len(theirs) != len(mine):
        return f"{len(theirs)} stages vs {len(mine)}"
    for a, b in zip(theirs, mine):
        keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        if keys:
            k = keys[0]
            return f"stage {b.get('name')!r} {k}: checkpoint {a.get(k)!r} vs config {b.get(k)!r}"
    return "different name"
