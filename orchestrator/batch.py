"""The typed batch contract between actors.

Data flows driver -> rollout -> reward -> driver (advantages) -> learner as these small
dataclasses. Token lists stay plain Python on the rollout/reward side (cheap to pickle,
no torch needed); the learner-facing ``TrainBatch`` is padded tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
class Trajectory:
    """One sampled response to a prompt, as generated (what the learner must score)."""

    uid: str
    prompt_ids: list[int]
    response_ids: list[int]
    # Engine's sampling logprobs, one per response token.
    logprobs: list[float]
    finish_reason: str
    text: str  # the decoded response (tags kept: skip_special_tokens=False)


@dataclass
class ScoredGroup:
    """All samples of one prompt after scoring."""

    uid: str
    trajectories: list[Trajectory]
    rewards: list[float]
    correct: list[bool]
    components: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)


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

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def shard(self, rank: int, world: int) -> TrainBatch:
        """Rows rank::world — each data-parallel learner takes one interleaved slice."""
        return TrainBatch(*(t[rank::world] for t in self.tensors()))

    def split(self, size: int) -> list[TrainBatch]:
        """Micro-batches of at most `size` rows."""
        n = len(self)
        return [TrainBatch(*(t[i : i + size] for t in self.tensors())) for i in range(0, n, size)]

    def tensors(self) -> tuple:
        return (self.input_ids, self.attention_mask, self.response_mask, self.old_logprobs, self.advantages)


@dataclass
class SFTBatch:
    """Teacher-forced examples: prompt + target, loss on the target tokens only."""

    input_ids: Any  # [B, L] long
    attention_mask: Any  # [B, L] long
    loss_mask: Any  # [B, L] float, 1 on completion tokens

    def shard(self, rank: int, world: int) -> SFTBatch:
        return SFTBatch(self.input_ids[rank::world], self.attention_mask[rank::world], self.loss_mask[rank::world])

    def split(self, size: int) -> list[SFTBatch]:
        n = int(self.input_ids.shape[0])
        return [
            SFTBatch(self.input_ids[i : i + size], self.attention_mask[i : i + size], self.loss_mask[i : i + size])
            for i in range(0, n, size)
        ]
