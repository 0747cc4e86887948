"""DAPO's dynamic sampling: a group whose samples are all correct or all wrong has zero advantage
and teaches nothing, so it is filtered out -- by accuracy, not by the shaped reward, which can differ
within a group that accuracy does not split -- and the batch is refilled with fresh groups.

`refill` is the whole mechanism, a filter over scored groups (parallax.contract.batch.ScoredGroup). The driver
gives it the function that draws a round.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import mean

from parallax.contract.batch import StepSamples


def refill(samples: StepSamples, *, max_rounds: int, draw: Callable[[int], StepSamples]) -> StepSamples:
    """DAPO's dynamic sampling: groups all right or all wrong are filtered out and fresh prompts
    generated -- `draw(round)`, up to `max_rounds` more generations -- until the batch holds as many
    informative groups as it had groups, in the order they were drawn. Still short, it is topped up
    with the step's own filtered groups (zero advantage: they move nothing), counted as
    `rollout/dynamic_short`. The metrics are the step's own generation's, with the counts."""
    want, rounds = len(samples.groups), 0
    drawn = list(samples.groups)
    while sum(g.informative for g in drawn) < want and rounds < max_rounds:
        rounds += 1
        drawn += draw(rounds).groups
    kept = [g for g in drawn if g.informative][:want]
    short = want - len(kept)
    kept += [g for g in samples.groups if not g.informative][:short]
    metrics = samples.metrics | {
        "rollout/filtered": float(sum(not g.informative for g in drawn)), "rollout/dynamic_rounds": float(rounds),
        "rollout/dynamic_short": float(short), "rollout/samples": float(sum(len(g.samples) for g in kept)),
        "reward/mean": float(mean(r for g in kept for r in g.rewards))}
    return StepSamples(kept, metrics)
