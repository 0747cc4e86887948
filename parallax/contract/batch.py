"""The typed batch contract between actors.

Data flows driver -> rollout -> reward -> driver (advantages) -> learner as these small
dataclasses, grouped by who fills them: the engine interface (`SamplingParams` in, `Completion`
out), the rollout's output (`Prompt` -> `Trajectory`, with the `ExecutionRecord` of how the engine
produced it), the reward's `SampleScore` of each, the driver's step data (`ScoredGroup`: a prompt and its
samples, each `Trajectory` carrying its score and then its advantage: one record per sample; a step's
`StepSamples`) and the learner's input (`TrainBatch`, `SFTBatch`, built from those records). Token lists stay
plain Python on the rollout/reward side (cheap to pickle, no torch needed); the learner-facing ``TrainBatch`` is
padded tensors.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any

from rewards.types import RewardGroup, SampleScore  # the reward actor's side of the contract, on its floor

__all__ = ["Completion", "ExecutionRecord", "Prompt", "RewardGroup", "SFTBatch", "SampleScore", "SamplingParams",
           "ScoredGroup", "StepSamples", "TrainBatch", "Trajectory", "advantage_of", "with_advantages"]


@dataclass
class SamplingParams:
    """How to sample one request (the engine interface's knobs)."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    # Stop when one of these token ids is produced (EOS is always a stop token).
    stop_token_ids: tuple[int, ...] = ()
    # Greedy decoding (evaluation); temperature is then ignored for sampling but logprobs
    # are still reported at `temperature`.
    greedy: bool = False
    seed: int = 0
    # How the hf engine and the KV executor draw a token (`parallax.engines.sampling.draw`): multinomial
    # (torch's) | inverse_cdf (the same distribution for a 14th of the CPU at a 49k vocabulary; other tokens
    # from one seed). vLLM samples with its own.
    sampler: str = "multinomial"


@dataclass
class Completion:
    """What an engine returns for one request."""

    token_ids: list[int]
    # Log-probability of each generated token under the sampling distribution (logits / T).
    logprobs: list[float]
    # "stop" (EOS or a stop token) | "length" (max_new_tokens reached).
    finish_reason: str


@dataclass
class Prompt:
    """One prompt of the batch; `uid` groups its samples for GRPO."""

    uid: str
    text: str
    token_ids: list[int]
    ground_truth: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExecutionRecord:
    """How the engine produced one trajectory, token by token, so the learner can score exactly that.

    Token index t runs over the learner's row: prompt tokens then response tokens, in the order
    of `Trajectory.prompt_ids + Trajectory.response_ids` (the rendered text order). A *segment* is
    a maximal contiguous span of that row produced by one engine request (or the prompt, or text
    the executor forced, such as a closing tag). Sequential decoding is one prompt segment and
    one response segment that sees it, with positions 0..L-1: plain causal attention.

    Reprefill, the one place this story is told. How a request reads earlier segments depends
    on the executor (parallax/executors/):

    * the KV executor (`reprefill=False`) forks the prefix KV and, at a join, appends every
      branch's KV *as computed in its branch*. One row with segment masks and these positions is
      exact: each branch sees the prefix and itself, the continuation sees every branch;
    * the request executor (`reprefill=True`, any engine: vLLM) sends whole requests; each re-reads
      its whole context causally, as text, positions 0..n-1 (vLLM's prefix cache makes that
      cheap). A later branch's tokens are therefore seen twice: in their own request, after the
      prefix only, and re-read in the join's, after the earlier branches. No single masked row
      holds both contexts. Exact scorings: one causal row per request
      (`learner.layout=threadweaver`), or the text causally plus copies of the requests that saw
      less than the text before them (`structured`, `parallax/layouts/reprefill.py`); `causal` refuses a
      forked reprefill record.
    """

    position_ids: list[int]  # [L] the position id the engine used for token t
    segment_ids: list[int]  # [L] segment of token t (non-decreasing; 0 is the prompt)
    # For segment s: the earlier segments (ids < s) its tokens attend to, besides itself (causally).
    segment_visible: list[list[int]]
    segment_request: list[int]  # engine request id that produced segment s (-1: prompt / forced)
    sampled: list[bool]  # [L] True where the token was sampled (trained on); forced/prompt tokens False
    reprefill: bool = False  # the requests re-read their contexts as text (the class docstring)


@dataclass
class Trajectory:
    """One sample, the record that carries it from the engine to the learner's row: what the engine
    generated (the rollout fills it), its `score` (the reward actor's, attached to its group by the driver)
    and its GRPO `advantage` (the driver's fold over its group, `actors.algo.set_advantages`), which the
    layouts read."""

    uid: str
    prompt_ids: list[int]
    response_ids: list[int]
    # Engine's sampling logprobs, one per response token.
    logprobs: list[float]
    finish_reason: str
    text: str  # the decoded response (tags kept: skip_special_tokens=False)
    # None for plain sequential decoding (causal attention, positions 0..L-1).
    record: ExecutionRecord | None = None
    # The weights it was sampled with: the driver's count of weight syncs (0: the model as loaded).
    policy_version: int = 0
    score: SampleScore | None = None  # None until its group is scored
    advantage: float | None = None  # None until the step's advantages are set


def with_advantages(trajs: list[Trajectory], advantages: list[float]) -> list[Trajectory]:
    """Samples given their advantages by hand, one each in order (benches, tests, a batch built outside a
    run); a run sets them by a fold over its groups (`actors.algo.set_advantages`)."""
    if len(advantages) != len(trajs):
        raise ValueError(f"{len(advantages)} advantages for {len(trajs)} samples")
    return [dataclasses.replace(t, advantage=float(a)) for t, a in zip(trajs, advantages)]


def advantage_of(t: Trajectory) -> float:
    """A sample's advantage, as a layout reads it: an error, not a silent 0, where none was set."""
    if t.advantage is None:
        raise ValueError(f"a sample of prompt {t.uid!r} reached a train batch without an advantage "
                         "(actors.algo.set_advantages sets them on a step's scored groups)")
    return t.advantage


@dataclass
class ScoredGroup:
    """One prompt and its samples in sampling order, each carrying its own score: the unit a step's data
    travels in. Generation returns them; advantages, dynamic sampling, sample tables, statistics and
    evaluation fold over them, so no sample is ever joined back to its prompt or its score by uid or by
    index."""

    prompt: Prompt
    samples: list[Trajectory]

    def __post_init__(self) -> None:
        if not self.samples:
            raise ValueError(f"a scored group of prompt {self.prompt.uid!r} has no samples")
        if strays := [x.uid for x in self.samples if x.uid != self.prompt.uid]:
            raise ValueError(f"samples of prompts {sorted(set(strays))} in the group of prompt {self.prompt.uid!r}")
        if unscored := sum(x.score is None for x in self.samples):
            raise ValueError(f"{unscored} of the {len(self.samples)} samples of prompt {self.prompt.uid!r} "
                             "are not scored")

    @property
    def rewards(self) -> list[float]:
        return [x.score.reward for x in self.samples]

    @property
    def correct(self) -> list[bool]:
        return [x.score.correct for x in self.samples]

    @property
    def informative(self) -> bool:
        """Neither all right nor all wrong: GRPO's advantage is not zero on every sample (DAPO)."""
        return 0 < sum(map(bool, self.correct)) < len(self.correct)


@dataclass
class StepSamples:
    """A step's (or an evaluation's) scored groups, prompt-major, and their batch metrics (`rollout/...`,
    `reward/...`). `trajectories`: the samples, group by group, each a whole record."""

    groups: list[ScoredGroup]
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def prompts(self) -> list[Prompt]:
        return [g.prompt for g in self.groups]

    @property
    def trajectories(self) -> list[Trajectory]:
        return [x for g in self.groups for x in g.samples]


@dataclass
class TrainBatch:
    """Padded tensors for the learner; rows are trajectories, columns prompt + response.

    Shapes: B rows, L = longest prompt + response in the batch (right padded).
    """

    input_ids: Any  # [B, L] long
    attention_mask: Any  # [B, L] long, 1 on real tokens
    response_mask: Any  # [B, L] float, 1 on response tokens (the loss positions)
    old_logprobs: Any  # [B, L] float, engine logprobs on response positions, 0 elsewhere
    advantages: Any  # [B, L] float, the sequence advantage broadcast on response positions
    # Structured (Unseen) attention as the engine ran it (parallax/layouts/masks.py); None = plain causal rows.
    # O(B*(L + S^2)) to ship; the learner builds the backend's mask per micro-batch.
    position_ids: Any = None  # [B, L] long, the engine's position ids (0 on padding)
    segment_ids: Any = None  # [B, L] long, execution segment of each token (-1 on padding)
    segment_visible: Any = None  # [B, S, S] bool, segment s attends to segment s' (diagonal True)
    # Off-policy correction per response token (learner.rollout_is; the learner fills it); None: off.
    is_weights: Any = None  # [B, L] float

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def shard(self, rank: int, world: int) -> TrainBatch:
        """Rows rank::world — each data-parallel learner takes one interleaved slice."""
        return TrainBatch(*(_rows(t, slice(rank, None, world)) for t in self._all()))

    def split(self, size: int) -> list[TrainBatch]:
        """Micro-batches of at most `size` rows."""
        n, every = len(self), self._all()
        return [TrainBatch(*(_rows(t, slice(i, i + size)) for t in every)) for i in range(0, n, size)]

    def pieces(self, k: int) -> list[TrainBatch]:
        """`k` contiguous pieces of nearly equal rows (PPO mini-batches; as many on every rank)."""
        n, every = len(self), self._all()
        q, r = divmod(n, k)
        bounds = [i * q + min(i, r) for i in range(k + 1)]
        return [TrainBatch(*(_rows(t, slice(a, b)) for t in every)) for a, b in itertools.pairwise(bounds) if b > a]

    def _all(self) -> tuple:
        return self.tensors() + self.structure() + (self.is_weights,)

    def tensors(self) -> tuple:
        return (self.input_ids, self.attention_mask, self.response_mask, self.old_logprobs, self.advantages)

    def structure(self) -> tuple:
        """(position_ids, segment_ids, segment_visible); all None for causal batches."""
        return (self.position_ids, self.segment_ids, self.segment_visible)


@dataclass
class SFTBatch:
    """Teacher-forced examples: prompt + target, loss on the target tokens only."""

    input_ids: Any  # [B, L] long
    attention_mask: Any  # [B, L] long
    loss_mask: Any  # [B, L] float, 1 on completion tokens
    # Structured layout of the teacher trace as the engine would run it (see TrainBatch); None = causal.
    position_ids: Any = None  # [B, L] long
    segment_ids: Any = None  # [B, L] long, -1 on padding
    segment_visible: Any = None  # [B, S, S] bool

    def shard(self, rank: int, world: int) -> SFTBatch:
        return SFTBatch(*(_rows(t, slice(rank, None, world)) for t in self._all()))

    def split(self, size: int) -> list[SFTBatch]:
        n = int(self.input_ids.shape[0])
        return [SFTBatch(*(_rows(t, slice(i, i + size)) for t in self._all())) for i in range(0, n, size)]

    def structure(self) -> tuple:
        """(position_ids, segment_ids, segment_visible); all None for causal batches."""
        return (self.position_ids, self.segment_ids, self.segment_visible)

    def _all(self) -> tuple:
        return (self.input_ids, self.attention_mask, self.loss_mask) + self.structure()


def _rows(t: Any, rows: slice) -> Any:
    """Row slice of a batch field; optional (None) fields stay None."""
    return None if t is None else t[rows]
