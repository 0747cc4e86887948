"""DAPO's dynamic sampling: a group whose samples are all correct or all wrong has zero advantage
and teaches nothing, so it is filtered out -- by accuracy, not by the shaped reward, which can differ
within a group that accuracy does not split -- and the batch is refilled with fresh groups.

`refill` is the whole mechanism; `informative`, `take` and `merge` are pure functions over
(trajectories prompt-major, RewardBatch). The driver gives `refill` the function that draws a round.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import mean

from contract.batch import Prompt, Trajectory


def refill(trajs: list[Trajectory], scored, prompts: list[Prompt], *, n: int, max_rounds: int,
           draw: Callable[[int], tuple[list[Prompt], list[Trajectory], object]]):
    """DAPO's dynamic sampling: groups all right or all wrong are filtered out and fresh prompts
    generated -- `draw(round)` -> (prompts, trajectories, RewardBatch), up to `max_rounds` more
    generations -- until the batch holds as many informative groups as it had groups. Still short, it
    is topped up with filtered groups (zero advantage: they move nothing), counted as
    `rollout/dynamic_short`. Returns the kept samples, their scores, and every prompt they came from."""
    want, pool = len(trajs) // n, [(trajs, scored, informative(scored.correct))]
    rounds = 0
    while sum(len(k) for _, _, k in pool) < want and rounds < max_rounds:
        rounds += 1
        more_prompts, more, more_scored = draw(rounds)
        prompts = prompts + list(more_prompts)
        pool.append((more, more_scored, informative(more_scored.correct)))
    kept = [take(tr, sc, n, k) for tr, sc, k in pool]
    filtered = sum(len(sc.correct) - len(k) for _, sc, k in pool)
    short = max(0, want - sum(len(k) for _, _, k in pool))
    if short:
        idle = [g for g in range(want) if g not in set(pool[0][2])][:short]
        kept.append(take(trajs, scored, n, idle))
    out, merged = merge(kept)
    out, merged = take(out, merged, n, list(range(want)))
    merged.metrics |= {"rollout/filtered": float(filtered), "rollout/dynamic_rounds": float(rounds),
                       "rollout/dynamic_short": float(short), "rollout/samples": float(len(out)),
                       "reward/mean": float(mean(r for group in merged.rewards for r in group))}
    return out, merged, prompts


def informative(correct: list[list[bool]]) -> list[int]:
    """Indices of the groups whose accuracy is neither all 0 nor all 1.

    >>> informative([[True, False], [True, True], [False, False], [False, True]])
    [0, 3]
    """
    return [i for i, group in enumerate(correct) if 0 < sum(map(bool, group)) < len(group)]


def take(trajs: list[Trajectory], scored, n: int, groups: list[int]):
    """The chosen groups of a scored batch, in the order given: (trajectories, RewardBatch)."""
    from rewards.scorer import RewardBatch

    out = RewardBatch([], [], [], dict(scored.errors), dict(scored.metrics))
    picked: list[Trajectory] = []
    for g in groups:
        picked += trajs[g * n:(g + 1) * n]
        out.rewards.append(scored.rewards[g])
        out.correct.append(scored.correct[g])
        out.components.append(scored.components[g])
    return picked, out


def merge(parts: list[tuple[list[Trajectory], object]]):
    """Batches concatenated in order; the metrics of the first (the step's own batch)."""
    from rewards.scorer import RewardBatch

    trajs: list[Trajectory] = []
    out = RewardBatch([], [], [], {}, dict(parts[0][1].metrics))
    for t, s in parts:
        trajs += t
        out.rewards += s.rewards
        out.correct += s.correct
        out.components += s.components
    return trajs, out
