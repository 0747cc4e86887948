"""The `data` config group's schema: the toy world's problems and teacher, and the trajectory format."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from parallax.contract.errors import _check
from parallax.contract.ranges import check_section


@dataclass
class FormatOptions:
    """The `data.format_options` slice: how the run writes and reads its trajectory format
    (parallax.formats.FormatSpec fields; the defaults follow the public Parallel-R1 / Parason data)."""

    # where teachers, the toy world, prompts, the grammar and the executors write the Parallel-R1
    # summary: after (right after </Parallel>, the public convention) | inside (before </Parallel>)
    summary_placement: str = "after"
    # the placements the parser (rewards, metrics, evaluation) accepts
    summary_accept: list = field(default_factory=lambda: ["after", "inside"])
    # read the Parason release's <Outline> entries and <Conclusion>
    aliases: bool = True
    # what an untyped <Outline> entry counts as: outline (neither subtask nor trial) | subtask | trial
    outline_kind: str = "outline"


def _levels_ok(value: Any) -> bool:
    """An int in 1..7 or a non-empty list of them (data.difficulty, or one family's entry)."""
    levels = [value] if isinstance(value, int) else list(value or []) if not isinstance(value, (str, Mapping)) else []
    return bool(levels) and all(isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= 7 for d in levels)


@dataclass
class DataConfig:
    # toyworld (synthetic, CPU scale); real datasets come with the data loaders.
    source: str = "toyworld"
    family: str = "mixed"
    # An int (1..7: 1 + d branches), or a list: each problem's difficulty drawn from it; or either per
    # family of the cycle ({subtask: 1, trial: 7}: short sums beside long searches). On the command line
    # also as text, which replaces an experiment's mapping: data.difficulty='subtask:1,mul:2/3'.
    difficulty: Any = 1
    n_train: int = 2000
    n_test: int = 128
    seed: int = 0
    # Probability that a train problem's teacher trace has a slip in its merge (a wrong answer),
    # as a model-written cold start has; the reward still checks the true answer.
    teacher_error: float = 0.0
    # Probability that a train problem's teacher trace stops before its final "#### answer" line
    # (a teacher that forgot it): SFT copies the habit, the reward finds no answer there.
    teacher_no_answer: float = 0.0
    # Probability that a train problem's teacher trace is serial instead of parallel (a cold start
    # that forks only sometimes, as Parallel-SFT's 95.6% #Parallel): RL then can move #Parallel.
    teacher_serial: float = 0.0
    # Where teacher_serial's coin falls: "problem" (once per train problem: every SFT draw of it shows the
    # same form, so SFT over a small pool teaches a form per prompt) or "draw" (each time SFT draws it: the
    # cold start forks on a problem as often as the teacher does, and RL's groups mix both forms).
    teacher_serial_per: str = "problem"
    # Probabilities that a train problem's parallel traces fork late: after the whole serial solution
    # (a parallel verification), or after its first part (mid-solution); otherwise at the first token.
    # They give the first-<Parallel> position room to move (Parallel-R1 Figure 3).
    teacher_verify: float = 0.0
    teacher_midfork: float = 0.0
    # Share of the distinct toy train problems kept for the RL stages and out of SFT (0: every stage draws
    # from all of them). SFT memorises the problems it sees ~30 times (0.93 train vs 0.79 held-out
    # accuracy); RL on those learns nothing that carries to new problems. Kept apart, RL's prompts are
    # as new to the model as the held-out ones (docs/results.md, "Where RL has room").
    rl_holdout: float = 0.0
    # Which teacher trace the SFT stage imitates: serial | parallel_r1 | parason.
    trace: str = "parallel_r1"
    # Solved toy problems shown before each toy prompt, as earlier turns of the model's chat (serial
    # solutions; an instruct model's chat template is needed): 0 feeds the prompt raw. Training, the
    # held-out evaluation and `python -m parallax.evaluation checkpoint --toy-fewshot` show the same examples.
    fewshot: int = 0
    # Format options (parallax.formats.FormatSpec fields; the defaults follow the public projects).
    format_options: FormatOptions = field(default_factory=lambda: FormatOptions())

    def __post_init__(self) -> None:
        check_section(self, "data")
        if isinstance(self.difficulty, str):  # the command line's text form: "2", "1,2,3", "subtask:1,mul:2/3"
            from parallax.toyworld import as_difficulty

            try:
                self.difficulty = as_difficulty(self.difficulty)
            except ValueError as e:
                _check(False, "data.difficulty", str(e))
        per_family = self.difficulty if isinstance(self.difficulty, Mapping) else {"": self.difficulty}
        _check(bool(per_family) and all(_levels_ok(v) for v in per_family.values()), "data.difficulty",
               f"must be an int in 1..7, a non-empty list of them, or one of those per family "
               f"({{subtask: 1, trial: 7}}), got {self.difficulty!r}")
        for key in ("teacher_error", "teacher_no_answer", "teacher_serial", "teacher_verify", "teacher_midfork",
                    "rl_holdout"):
            p = getattr(self, key)
            _check(isinstance(p, (int, float)) and not isinstance(p, bool) and 0 <= p < 1, f"data.{key}",
                   f"must be in [0, 1), got {p!r}")
        _check(self.teacher_verify + self.teacher_midfork <= 1, "data.teacher_verify",
               "teacher_verify + teacher_midfork must be at most 1, "
               f"got {self.teacher_verify} + {self.teacher_midfork}")
        _check(self.trace in ("serial", "parallel_r1", "parason"), "data.trace", f"unknown trace {self.trace!r}")
        _check(self.teacher_serial_per in ("problem", "draw"), "data.teacher_serial_per",
               f"must be problem or draw, got {self.teacher_serial_per!r}")
        _check(isinstance(self.fewshot, int) and not isinstance(self.fewshot, bool), "data.fewshot",
               f"must be an int (solved examples before each prompt), got {self.fewshot!r}")
        try:
            self.spec  # noqa: B018 -- unknown option or bad value: fail at config time
        except ValueError as e:
            raise ValueError(f"data.format_options: {e}") from None

    @property
    def spec(self):
        """The run's :class:`parallax.formats.FormatSpec`: :attr:`format` with :attr:`format_options`."""
        from parallax.formats.spec import FORMAT_OPTIONS, get_spec, parse_options

        opts = self.format_options
        if isinstance(opts, dict):  # built in code: DataConfig(format_options={...})
            bad = sorted(set(opts) - set(FORMAT_OPTIONS))
            if bad:
                raise ValueError(f"unknown option(s) {bad}; valid: {list(FORMAT_OPTIONS)}")
            opts = FormatOptions(**opts)
        return get_spec(self.format, **parse_options(dataclasses.asdict(opts)))

    @property
    def format(self) -> str:
        """The trajectory format the run writes and parses: Parason for Parason traces, else Parallel-R1."""
        return "parason" if self.trace == "parason" else "parallel_r1"
