"""DAPO's dynamic sampling: a group whose samples are all correct or all wrong has zero advantage
and teaches nothing, so it is filtered out -- by accuracy, not by the shaped reward, which can differ
within a group that accuracy does not split -- and the batch is refilled with fresh groups.

Pure functions over (trajectories prompt-major, RewardBatch); the driver draws the refills.
"""

from __future__ import annotations

from contract.batch import Trajectory


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
