"""Reward worker: the reward actor's plain class (actors/group.py applies ray.remote).

The scoring itself (analysis, timeout pool, the registered reward function) is
`rewards.scorer.RewardScorer`, which the reward tools (`python -m rewards goldcheck`) run without Ray.
"""

from __future__ import annotations

from rewards.scorer import RewardBatch, RewardGroup, RewardScorer

__all__ = ["RewardBatch", "RewardGroup", "RewardWorker"]


class RewardWorker(RewardScorer):
    """One reward actor's scorer: `score(groups, step=, stage=, spec=)` returns a `RewardBatch`."""

    def pid(self) -> int:
        """This actor's process id (fault-injection tests kill it)."""
        import os

        return os.getpid()
