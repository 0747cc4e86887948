"""Weight sync from the learners to the rollout engines, after every update.

`ObjectStoreSync` (CPU, any cluster): rank 0's gathered state dict goes into Ray's object
store once and every rollout actor pulls it from there, never through the driver.
`nccl` is the GPU path's name in the registry: a broadcast over a learner-rollout process
group (as verl and OpenRLHF do); it is not implemented yet and fails at setup, not mid-run.
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
    if name == "nccl":
        raise NotImplementedError("weight_sync=nccl (GPU broadcast) is not implemented yet; use object_store")
    raise ValueError(f"unknown weight sync {name!r}; valid: object_store, nccl")
