"""A step's samples: generation started on the rollout actors, then collected and scored.

Starting and collecting are apart so the driver can start a later step's generation before the
learners update on this one (`trainer.max_staleness`): `start` submits every chunk at the policy
version the engines hold then, and returns at once; `collect` waits for the chunks, scores each as it
returns (scoring overlaps the generation still running), and runs again any chunk whose rollout or
reward actor was lost (actors/faults.py), with its own seed. Every trajectory records the version it
was sampled with; a generate call runs whole on one engine between two pushes, so no trajectory, and
no fork/join block in it, spans two versions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from statistics import mean
from typing import TYPE_CHECKING

from actors.faults import Redispatch, wait_alive
from actors.group import RewardActorGroup, RolloutGroup, split_chunks
from orchestrator.weights import EngineWeights
from parallax.contract.batch import Prompt, RewardGroup, SampleScore, ScoredGroup, StepSamples, Trajectory
from parallax.contract.seeds import chunk_seed

if TYPE_CHECKING:
    from orchestrator.logger import Timer
    from rewards.registry import RewardSpec


@dataclass
class Started:
    """A generation in flight: what was asked, at which policy version, and its dispatcher."""

    prompts: list[Prompt]
    n: int
    step: int
    version: int
    gen: Redispatch
    chunks: list[list[Prompt]]  # the prompts of each generate call, in order (their concatenation is `prompts`)
    data_key: str = ""  # the data stream it drew its prompts from (a checkpoint gives them back)


def start(rollout: RolloutGroup, weights: EngineWeights, prompts: list[Prompt], *, n: int, seed: int, step: int,
          max_restarts: int, greedy: bool = False, data_key: str = "") -> Started:
    """Submit `n` samples of every prompt, split over the rollout actors; chunk i draws `chunk_seed(seed, i)`.
    An engine refuses it if it holds an older version than now (it restarted since)."""
    version = weights.version
    gen = Redispatch("rollout", rollout.actors,
                     lambda a, i, chunk: a.generate.remote(chunk, n, chunk_seed(seed, i), greedy, None, version),
                     weights.recover, max_restarts)
    chunks = split_chunks(prompts, len(rollout))
    for i, chunk in enumerate(chunks):
        if chunk:
            gen.submit(i, chunk, i)
    return Started(prompts, n, step, version, gen, chunks, data_key)


def collect(started: Started, *, reward: RewardActorGroup, weights: EngineWeights, spec: RewardSpec,
            stage_name: str, t: Timer, max_restarts: int, start_timeout_s: float) -> StepSamples:
    """The scored groups of a started generation, one per prompt in order, scored with `spec`; times the
    wait as `generate` and the scoring left after it as `reward`. Never fewer samples than asked."""
    n, step = started.n, started.step
    score = Redispatch("reward", reward.actors,
                       lambda a, key, groups: a.score.remote(groups, step=step, stage=stage_name, spec=spec),
                       lambda ranks: wait_alive(reward.actors, ranks, start_timeout_s, "reward"), max_restarts)
    chunks: dict[int, list[ScoredGroup | list[Trajectory]]] = {}  # each chunk's groups: sampled, then scored
    with t("generate"):
        for i, trajs in started.gen.completed():
            prompts = started.chunks[i]
            if len(trajs) != len(prompts) * n:  # never train on a step that lost samples
                raise RuntimeError(f"generation chunk {i} returned {len(trajs)} samples "
                                   f"for {len(prompts)} prompts x {n}")
            chunks[i] = [trajs[k * n:(k + 1) * n] for k in range(len(prompts))]  # a generate call's order
            asked = [RewardGroup([x.text for x in samples], p.ground_truth) for samples, p in zip(chunks[i], prompts)]
            first = 0  # each reward actor's part: the chunk's groups from `first` on
            for j, part in enumerate(split_chunks(asked, len(reward))):
                if part:
                    score.submit((i, first), part, j)
                first += len(part)
    with t("reward"):
        parts = dict(score.completed())
    weights.lost |= started.gen.lost  # restarted while survivors took their chunks: the next push rejoins them
    if len(chunks) != sum(1 for c in started.chunks if c):
        raise RuntimeError(f"generation returned {len(chunks)} chunks of {sum(1 for c in started.chunks if c)}")
    for (i, first), batch in parts.items():  # each reward actor's scores onto its own groups' samples
        for k, scores in enumerate(batch.scores, start=first):
            chunks[i][k] = scored(started.chunks[i][k], chunks[i][k], scores)
    groups = [g for i in sorted(chunks) for g in chunks[i]]
    if [g.prompt.uid for g in groups] != [p.uid for p in started.prompts] or \
            any(not isinstance(g, ScoredGroup) for g in groups):
        raise RuntimeError(f"generation and scoring returned {len(groups)} groups for {len(started.prompts)} prompts")
    scored_parts = [parts[key] for key in sorted(parts)]
    metrics = mean_dicts([b.metrics for b in scored_parts]) | {
        "rollout/samples": float(sum(len(g.samples) for g in groups)), "rollout/retries": float(started.gen.retries),
        "reward/retries": float(score.retries)}
    return StepSamples(groups, metrics)


def scored(prompt: Prompt, samples: list[Trajectory], scores: list[SampleScore]) -> ScoredGroup:
    """A prompt's samples, each carrying the score the reward actor gave it (one per sample, in order)."""
    if len(scores) != len(samples):
        raise RuntimeError(f"the reward actor returned {len(scores)} scores for the {len(samples)} samples of "
                           f"prompt {prompt.uid!r}")
    return ScoredGroup(prompt, [replace(x, score=s) for x, s in zip(samples, scores)])


def mean_dicts(dicts: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the mean over the dicts that have it (one figure from every actor's)."""
    keys = {k for d in dicts for k in d}
    return {k: mean(d[k] for d in dicts if k in d) for k in keys}
