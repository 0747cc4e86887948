"""Weight sync from the learners to the rollout engines, after every update.

`ObjectStoreSync` (CPU, any cluster): rank 0's gathered state dict goes into Ray's object
store once and every rollout actor pulls it from there, never through the driver.
It is the only weight sync there is: a GPU broadcast over a learner-rollout process group (as
verl and OpenRLHF do) is an open issue.
"""

from __future__ import annotations

from typing import Protocol

import ray

from actors.group import LearnerGroup, RolloutGroup


class WeightSync(Protocol):
    def push(self, learners: LearnerGroup, rollouts: RolloutGroup) -> None:
        """Make every rollout engine's weights equal the learners' current weights."""


class ObjectStoreSync:
    def push(self, learners: LearnerGroup, rollouts: RolloutGroup) -> None:
        state_ref = learners.async_state_dict()
        ray.get(rollouts.async_load_weights(state_ref))


def make_weight_sync(name: str) -> WeightSync:
    if name == "object_store":
        return ObjectStoreSync()
    raise ValueError(f"unknown weight sync {name!r}; valid: object_store")
