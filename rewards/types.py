"""Plain data types shared by every reward: the context, the analysed sample, the group score.

Pure dataclasses, no heavy imports.  A reward function has the shape::

    fn(samples: Sequence[Analysis], ctx: RewardContext, params: P) -> GroupScore

where ``samples`` is ONE GRPO group (all completions of one prompt), already analysed
(answer extracted and verified, trajectory parsed by ``formats``) by :mod:`rewards.analysis`.

Example:
    >>> s = Analysis(correct=True, pred="42", stats=None)
    >>> GroupScore(rewards=[1.0], correct=[s.correct], components={"acc": [1.0]}).size
    1
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "VERIFIERS",
    "Analysis",
    "BaseParams",
    "GroupScore",
    "RewardContext",
    "RewardGroup",
    "SampleScore",
    "TrajStats",
]

#: Answer-equivalence back ends: ``math_verify`` (fast path + math-verify) or ``dapo``
#: (verl's ``math_dapo`` scorer, DAPO-faithful).
VERIFIERS: tuple[str, ...] = ("math_verify", "dapo")


@dataclass(frozen=True)
class RewardContext:
    """What a reward may know besides the completions.

    ``step`` is the 0-based global RL step (schedules such as S2 read it); ``stage`` the
    curriculum stage name; ``ground_truth`` the reference answer of the group's prompt;
    ``extra`` free-form values a custom reward may need (never required by built-ins).
    """

    step: int = 0
    stage: str = ""
    ground_truth: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrajStats:
    """Per-trajectory numbers from the format package's metrics (see :mod:`rewards.analysis`).

    ``critical_tokens`` is the latency T (a parallel block counts only its longest branch);
    ``sub_share``/``trial_share`` are R_sub/R_trial, the shares of tokens inside Subtask /
    Trial branches; ``eta = (total - T) / total``; ``valid`` says the whole text is well
    formed; ``n_blocks`` counts well-formed parallel blocks.
    """

    total_tokens: int
    critical_tokens: int
    sub_share: float = 0.0
    trial_share: float = 0.0
    eta: float = 0.0
    n_blocks: int = 0
    valid: bool = True

    @property
    def has_parallel(self) -> bool:
        return self.n_blocks > 0


@dataclass(frozen=True)
class Analysis:
    """One completion after analysis.

    ``correct`` is binary accuracy (False when not verified or on error); ``pred`` the
    extracted answer (None if none found); ``stats`` the trajectory numbers (None when the
    reward did not ask for parsing or parsing failed); ``tree`` the format package's parse
    result, kept for custom rewards; ``error`` a short reason when analysis failed
    (``timeout``, ``crash``, ``exception``, ...), in which case the sample scores as invalid;
    ``reason`` why ``correct`` is False when accuracy was asked for (``no_answer``, ``too_long``,
    ``unparseable``, ``mismatch``, ``multiple_answers``, or the error), None when correct;
    ``structure`` the figures the driver logs, from the same parse.
    """

    correct: bool = False
    pred: str | None = None
    stats: TrajStats | None = None
    tree: Any = None
    error: str | None = None
    reason: str | None = None
    structure: dict[str, Any] | None = None  # the driver's figures of the parse (rewards.analysis.structure)

    @property
    def format_valid(self) -> bool:
        return self.stats is not None and self.stats.valid

    @property
    def has_parallel(self) -> bool:
        """At least one well-formed parallel unit (the R_parallel of Parallel-R1)."""
        return self.stats is not None and self.stats.has_parallel


@dataclass
class GroupScore:
    """Scores of one group: per-sample ``rewards``, binary ``correct`` (accuracy metrics read it,
    never the shaped reward), named per-sample ``components`` for logging, and
    ``errors`` counted by reason."""

    rewards: list[float]
    correct: list[bool]
    components: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.rewards)
        if len(self.correct) != n:
            raise ValueError(f"rewards has {n} entries but correct has {len(self.correct)}")
        for k, v in self.components.items():
            if len(v) != n:
                raise ValueError(f"component {k!r} has {len(v)} entries, expected {n}")

    @property
    def size(self) -> int:
        return len(self.rewards)


@dataclass(frozen=True)
class BaseParams:
    """Parameters every reward accepts.

    ``format``: trajectory format, ``parallel_r1`` or ``parason``.
    ``verifier``: ``math_verify`` (exact/integer fast path, then math-verify) or ``dapo``
    (verl's ``math_dapo`` scorer on the final part of the text).
    ``multiple_answers``: a text that gives several different final answers (``#### 12`` then
    ``#### 13``, two boxes) is scored by its ``last`` one (verl's convention) or ``reject``-ed as
    wrong, so a policy cannot hedge (docs: README, "Rewards").
    Format options (:class:`parallax.formats.FormatSpec` fields; the defaults read the public projects'
    data): ``summary_placement`` (``after`` | ``inside``), ``summary_accept`` (comma-separated
    placements the parser takes), ``aliases`` (the Parason release's ``<Outline>``/``<Conclusion>``),
    ``outline_kind`` (what an ``<Outline>`` entry counts as: ``outline`` | ``subtask`` | ``trial``).
    """

    format: str = "parallel_r1"
    verifier: str = "math_verify"
    multiple_answers: str = "last"
    summary_placement: str = "after"
    summary_accept: str = "after,inside"
    aliases: bool = True
    outline_kind: str = "outline"

    def __post_init__(self) -> None:
        if self.format not in ("parallel_r1", "parason"):
            raise ValueError(f"format must be 'parallel_r1' or 'parason', got {self.format!r}")
        if self.verifier not in VERIFIERS:
            raise ValueError(f"verifier must be one of {VERIFIERS}, got {self.verifier!r}")
        if self.multiple_answers not in ("last", "reject"):
            raise ValueError(f"multiple_answers must be 'last' or 'reject', got {self.multiple_answers!r}")
        self.spec  # noqa: B018 -- a bad format option fails here, naming the field

    @property
    def spec(self):
        """The :class:`parallax.formats.FormatSpec` these params parse with."""
        from parallax.formats.spec import get_spec, parse_options

        return get_spec(self.format, **parse_options({
            "summary_placement": self.summary_placement, "summary_accept": self.summary_accept,
            "aliases": self.aliases, "outline_kind": self.outline_kind}))


@dataclass(frozen=True)
class RewardGroup:
    """One GRPO group as the reward actor takes it: all completions of one prompt and its reference answer."""

    texts: Sequence[str]
    ground_truth: str

    def __post_init__(self):
        if isinstance(self.texts, (str, bytes)):  # (an item that is not text is scored as invalid, not refused)
            raise TypeError(f"RewardGroup.texts: a list of strings, got {type(self.texts).__name__}")
        if not isinstance(self.ground_truth, str):  # the loaders give every answer as a string (an AIME int too)
            raise TypeError(f"RewardGroup.ground_truth: a string, got {type(self.ground_truth).__name__} "
                            f"{self.ground_truth!r}")


@dataclass(frozen=True)
class SampleScore:
    """What the reward actor made of one sample, from its one parse of the text: the stage's shaped `reward`,
    binary accuracy `correct` (accuracy metrics and dynamic sampling read this, never the shaped reward), the
    reward's named `components`, and `structure`, the parse's figures (`parallax.formats.text_stats`'s keys,
    in its default units, and `steps_ok`: the share of the text's units whose steps check,
    `rewards.branch.steps_share`). Statistics, sample tables and evaluation read these; nothing parses the
    text again."""

    reward: float
    correct: bool
    components: dict[str, float] = field(default_factory=dict)
    structure: dict[str, Any] = field(default_factory=dict)
