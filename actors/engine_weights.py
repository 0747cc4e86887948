"""The policy the rollout engines hold: pushed after every update as a new version, and brought
back to lost rollout actors (Ray restarts them with the model they were built from).

A push that finds a rollout actor lost -- before it, or under it -- waits for the restart, dissolves
the weight-sync group (its world lost a member) and pushes again; every restarted actor is in the
new group. A generation that finds every rollout actor lost brings them back with the weights they
generate with: the same version, since the learners have not moved since the last push.
"""

from __future__ import annotations

from actors.faults import ActorLost, wait_alive
from actors.group import LearnerGroup, RolloutGroup
from actors.weight_sync import WeightSync


class EngineWeights:
    def __init__(self, sync: WeightSync, learners: LearnerGroup, rollouts: RolloutGroup, max_restarts: int,
                 start_timeout_s: float):
        self.sync, self.learners, self.rollouts = sync, learners, rollouts
        self.max_restarts, self.start_timeout_s = max_restarts, start_timeout_s
        self.version = 0  # 0: the model every engine loaded; one more at every push
        self.lost: set[int] = set()  # restarted rollout actors the next push must bring back

    def push(self) -> dict[str, float]:
        """The learners' weights to every engine, as the next policy version; the sync's figures."""
        self.version += 1
        return self._push()

    def recover(self, ranks: list[int]) -> None:
        """Every rollout actor was lost mid-generation: back, with the current version's weights (an
        actor lost again meanwhile is waited for too, as in a push)."""
        self.lost |= set(ranks)
        self._push()

    def _push(self) -> dict[str, float]:
        """Push the current version; a rollout actor lost before or under it is waited for, the group
        formed anew with it, and the push made again (up to `max_restarts` times)."""
        for attempt in range(self.max_restarts + 1):
            try:
                if self.lost:
                    self._rejoin()
                return self.sync.push(self.learners, self.rollouts, self.version)
            except ActorLost as e:
                if e.role != "rollout" or attempt == self.max_restarts:
                    raise
                print(f"{e}; forming the weight sync again", flush=True)
                self.lost.add(e.rank)
        raise AssertionError("unreachable")

    def _rejoin(self) -> None:
        """Wait for the restarted actors; dissolve the group, so the next push forms it with them."""
        wait_alive(self.rollouts.actors, sorted(self.lost), self.start_timeout_s, "rollout")
        self.sync.reset(self.learners, self.rollouts)
        self.lost.clear()
