"""The driver's side of weight sync: the one policy version, and the transports that carry it.

`EngineWeights` holds the policy version the engines hold -- the only count of it: 0 is the model
every engine loaded, each `push` is one more, and every rollout actor records the version it is
handed. A push that finds a rollout actor lost -- before it, or under it -- waits for the restart,
dissolves the weight-sync group (its world lost a member) and pushes again; every restarted actor is
in the new group. A generation that finds every rollout actor lost brings them back with the weights
they generate with (`recover`): the same version, since the learners have not moved since the last push.

The transports (`WeightSync`, chosen once by `make_weight_sync`):

`CollectiveSync` (default): learner rank 0 and every engine worker form one torch.distributed group
(gloo on CPU, NCCL where every member sees CUDA: `parallax.weightsync.sync_group`), opened on the first push; each
push is rank 0 broadcasting its weights in buckets while every engine receives and loads them. An engine on a learner
rank's own GPU (`rollout.colocate`) is handed them there by that rank instead (`parallax.weightsync.handoff`).
The weights never pass through the driver or Ray's object store, and no filesystem is shared.

`ObjectStoreSync` (fallback: `rollout.weight_sync.method=object_store`): rank 0's gathered state dict
goes into Ray's object store once and every rollout actor pulls it from there.

Every push returns its figures (`sync/bytes`, `sync/buckets`), and waits at most
`rollout.weight_sync.timeout_s`: a rank that never answers fails the run, naming what was awaited.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import ray

from actors.faults import ActorLost, is_loss, summary, wait_alive
from actors.group import LearnerGroup, RolloutGroup
from parallax.contract.engine import WeightSyncConfig
from parallax.weightsync.handoff import handoff_pairs
from parallax.weightsync.sync_group import loopback_only


class EngineWeights:
    """The policy the rollout engines hold, and its version (the run's one count of it), over a transport."""

    def __init__(self, sync: WeightSync, learners: LearnerGroup, rollouts: RolloutGroup, max_restarts: int,
                 start_timeout_s: float, sleep_level: int = 0):
        self.sync, self.learners, self.rollouts = sync, learners, rollouts
        self.max_restarts, self.start_timeout_s = max_restarts, start_timeout_s
        self.version = 0  # 0: the model every engine loaded; one more at every push
        self.lost: set[int] = set()  # restarted rollout actors the next push must bring back
        # colocated engines (`rollout.colocate`): the level they sleep at through every update; 0: never
        self.sleep_level, self.asleep = sleep_level, False
        # the phases of the last wake (colocated engines), in the order they ran: a failed one ends where it
        # stopped; tests read the order (learner memory released before each wake)
        self.wake_trace: list[str] = []

    def push(self) -> dict[str, float]:
        """The learners' weights to every engine, as the next policy version; the sync's figures."""
        self.version += 1
        return self._push()

    def sleep(self) -> dict[str, float]:
        """Colocated engines give their GPU to the learners for an update (`rollout.colocate`); the next
        push wakes them. Nothing to do when they are not colocated, or already asleep (SFT steps in a row)."""
        if not self.sleep_level or self.asleep:
            return {}
        t = time.perf_counter()
        try:
            self._all_rollouts("sleep", self.sleep_level)
        except ActorLost as e:  # restarted, awake and without the policy: the push brings it back
            if e.role != "rollout":
                raise
            self.lost.add(e.rank)
        self.asleep = True
        return {"timing/sleep": time.perf_counter() - t}

    def _release_learner_memory(self) -> float:
        """Every learner rank's cached CUDA memory back to its GPU (`actors.devices.release_cached_memory`),
        before a colocated engine takes more of it; the bytes released, summed over the ranks."""
        got = _wait({"learner": self.learners.async_call("release_memory")}, self.start_timeout_s, "release memory")
        self.wake_trace.append("release_memory")
        return sum(r["reserved_before"] - r["reserved_after"] for r in got["learner"])

    def _all_rollouts(self, method: str, *args) -> list:
        """`method(*args)` on every rollout actor; what each returned, in rank order."""
        refs = {f"rollout_{i}": [getattr(a, method).remote(*args)] for i, a in enumerate(self.rollouts.actors)}
        got = _wait(refs, self.start_timeout_s, method)
        return [got[f"rollout_{i}"][0] for i in range(len(self.rollouts.actors))]

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
                if not self.asleep:
                    return self.sync.push(self.learners, self.rollouts, self.version)
                # asleep: memory for the weights, the weights, then the KV cache (the order verl keeps: the
                # sync's buffers and the KV cache are never held at once), each wake after the learners gave
                # their cached CUDA memory back to the GPU it shares; a restarted actor is awake already
                t, self.wake_trace = time.perf_counter(), []
                released = self._release_learner_memory()
                self._all_rollouts("wake_up", ["weights"])
                self.wake_trace.append("wake_up:weights")
                figures = self.sync.push(self.learners, self.rollouts, self.version)
                self.wake_trace.append("push")
                released += self._release_learner_memory()  # the sync's gathered buckets
                held = self._all_rollouts("wake_up", ["kv_cache"])  # the policy version each engine holds
                self.wake_trace.append("wake_up:kv_cache")
                if stale := [i for i, v in enumerate(held) if v < self.version]:
                    # killed after the sync filled it: Ray ran this wake on the restarted process, which holds
                    # the weights it loaded at start, so no call failed; it rejoins and the push is made again
                    raise ActorLost("rollout", stale[0], f"restarted during the wake: it holds policy version "
                                                         f"{held[stale[0]]}, not {self.version}")
                self.asleep = False
                return {**figures, "timing/wake_and_sync": time.perf_counter() - t,
                        "memory/learner_cache_released_gib": released / 2**30}
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


class WeightSync(Protocol):
    def push(self, learners: LearnerGroup, rollouts: RolloutGroup, version: int) -> dict[str, float]:
        """Make every rollout engine's weights equal the learners' current weights, as policy `version`
        (which each rollout actor records and reports); its figures."""

    def reset(self, learners: LearnerGroup, rollouts: RolloutGroup) -> None:
        """Forget the members (a rollout actor was lost and restarted): the next push reaches them all anew."""


def _wait(refs: dict[str, list[ray.ObjectRef]], timeout_s: float, what: str) -> dict[str, list]:
    """ray.get of every named group of refs (`rollout_3`: that actor's; `learner`: rank i's at i). The
    first one that fails raises at once -- `ActorLost` naming it when its actor died or restarted --
    and one still running after `timeout_s` is a TimeoutError naming it."""
    who = {r: (name.partition("_")[0], int(name.partition("_")[2] or i)) for name, rs in refs.items()
           for i, r in enumerate(rs)}
    pending, deadline = list(who), time.monotonic() + timeout_s
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            late = sorted({f"{role}_{rank}" for role, rank in (who[r] for r in pending)})
            raise TimeoutError(f"weight sync ({what}): no answer within {timeout_s:.0f}s from {', '.join(late)} "
                               "(rollout.weight_sync.timeout_s; a rank that died or cannot reach the others' "
                               "address; method=object_store avoids the group)")
        try:
            ray.get(ready[0])
        except Exception as e:
            if is_loss(e):
                raise ActorLost(*who[ready[0]], f"during the weight sync ({what}): {summary(e)}") from None
            # A member killed mid-broadcast breaks the collective on every live one ("Connection closed
            # by peer"), and that error can arrive before Ray reports the death: name the lost member.
            lost = _first_loss(pending, who, min(LOSS_GRACE_S, max(0.0, deadline - time.monotonic())), what)
            if lost is not None:
                raise lost from e
            raise
    return {name: ray.get(rs) for name, rs in refs.items()}


def _form(refs: dict[str, list[ray.ObjectRef]], timeout_s: float, what: str) -> dict[str, list]:
    """`_wait` on the members' `open_sync` calls. When one dies (or fails) before the group formed, the
    others would sit in the rendezvous for the whole timeout, deaf to the next call (the restart's
    `close_sync`, the next `open_sync`): each is cancelled, and leaves it within a second
    (`faults.abandonable`)."""
    try:
        return _wait(refs, timeout_s, what)
    except BaseException:
        for r in (r for rs in refs.values() for r in rs):
            ray.cancel(r)
        raise


# How long a failed collective waits for a peer's death to be reported before its own error stands.
LOSS_GRACE_S = 15.0


def _first_loss(pending: list, who: dict, grace_s: float, what: str) -> ActorLost | None:
    """The first of `pending` whose actor died within `grace_s`, as ActorLost; None if none did."""
    deadline = time.monotonic() + grace_s
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            return None
        try:
            ray.get(ready[0])
        except Exception as e:  # noqa: BLE001 -- only a loss matters here; the caller re-raises the first error
            if is_loss(e):
                return ActorLost(*who[ready[0]], f"during the weight sync ({what}): {summary(e)}")
    return None


class ObjectStoreSync:
    def __init__(self, timeout_s: float = 300.0):
        self.timeout_s = timeout_s

    def reset(self, learners: LearnerGroup, rollouts: RolloutGroup) -> None:
        """Nothing to dissolve: every push reaches each engine on its own."""

    def push(self, learners: LearnerGroup, rollouts: RolloutGroup, version: int,
             only: list[int] | None = None) -> dict[str, float]:
        """Every engine's weights (or those of the engines `only` names) from rank 0's state dict."""
        state_ref = learners.async_state_dict()
        engines = range(len(rollouts.actors)) if only is None else only
        refs = {f"rollout_{i}": [rollouts.actors[i].load_weights.remote(state_ref, version)] for i in engines}
        got = _wait(refs, self.timeout_s, "object store")
        return {"sync/bytes": float(next(iter(got.values()))[0])}


def shared_devices(members: dict[str, dict]) -> dict[str, list[str]]:
    """The GPUs that two or more sync-group members were given, as {"node:gpu": [members]}. `members`:
    each member's `actors.devices.seen()`. NCCL refuses two ranks on one device, so a group that
    holds such a pair cannot form there."""
    holders: dict[str, list[str]] = {}
    for name, seen in members.items():
        for gpu in seen["gpus"]:
            holders.setdefault(f"{seen['node'][:8]}:{gpu}", []).append(name)
    return {dev: names for dev, names in holders.items() if len(names) > 1}


class CollectiveSync:
    """`store` gives a fresh rendezvous address (`parallax.weightsync.sync_group.open_store`) each time the group
    forms: on the first push, and after `reset` (an engine was lost and restarted).

    Each engine's transport is decided when the group forms, from the devices its members were given:
    an engine on a learner rank's own GPU (`rollout.colocate`) is handed the weights there by that rank
    (`parallax.weightsync.handoff`: no copy, no group); the others join one group with learner rank 0, which
    broadcasts to them. Its backend (`backend=auto`): NCCL when every member of the group sees CUDA,
    gloo otherwise -- from what each actor was given, not from the driver's devices. A group that would
    hold two members on one GPU (which NCCL refuses) is not formed: those engines' weights go through the
    object store (`ObjectStoreSync`), said once. `transports` names each engine's."""

    def __init__(self, cfg: WeightSyncConfig, store: Callable[[], str]):
        self.cfg, self.store = cfg, store
        self.backend = cfg.backend
        self.plan_ref: ray.ObjectRef | None = None
        self.fallback: ObjectStoreSync | None = None
        self.address = ""
        self.handoff: dict[int, int] = {}  # engine i -> the learner rank that hands it its weights
        self.transports: dict[str, str] = {}  # rollout_i -> handoff | collective | object_store

    def _open(self, learners: LearnerGroup, rollouts: RolloutGroup) -> None:
        n = len(rollouts.actors)
        sizes = {f"rollout_{i}": [a.sync_ranks.remote(), a.weights_dtype.remote(), a.devices.remote()]
                 for i, a in enumerate(rollouts.actors)}
        sizes["learner"] = learners.async_call("devices")
        got = _wait(sizes, self.cfg.timeout_s, "sizing")
        ranks = [got[f"rollout_{i}"][0] for i in range(n)]
        self.handoff = handoff_pairs(got["learner"], [(got[f"rollout_{i}"][2], ranks[i]) for i in range(n)],
                                     cpu=self.cfg.cpu_handoff)
        rest = [i for i in range(n) if i not in self.handoff]
        members = {"learner_0": got["learner"][0]} | {f"rollout_{i}": got[f"rollout_{i}"][2] for i in rest}
        self.backend = self.cfg.backend
        if self.backend == "auto":
            self.backend = "nccl" if all(m["cuda"] for m in members.values()) else "gloo"
        shared = shared_devices(members)
        if rest and self.backend == "nccl" and shared:
            where = "; ".join(f"GPU {d} is given to {' and '.join(names)}" for d, names in shared.items())
            print(f"weight sync: {where}: NCCL cannot hold two ranks on one device, so the weights of "
                  f"{', '.join(f'rollout_{i}' for i in rest)} go through the object store", flush=True)
            self.fallback = ObjectStoreSync(self.cfg.timeout_s)
        grouped = [] if self.fallback is not None else rest
        self.transports = {f"rollout_{i}": "handoff" if i in self.handoff else
                           "collective" if i in grouped else "object_store" for i in range(n)}
        if self.handoff:
            print("weight sync: " + ", ".join(f"rollout_{i} from learner_{r}" for i, r in self.handoff.items())
                  + " on their own device or node (hand-off)", flush=True)
        # sent in the engines' dtype when they agree on one (bf16 engines: half an fp32 learner's bytes);
        # engines that differ each cast what they receive
        dtypes = {got[f"rollout_{i}"][1] for i in range(n)}
        wire = dtypes.pop() if len(dtypes) == 1 else None
        world = 1 + sum(ranks[i] for i in grouped)
        self.address = address = self.store() if grouped else None  # no group when no engine needs one
        # what changed, where the wire is the cost: gloo between nodes (on one node a push is a memory copy, which
        # the change's own pass over the weights does not beat on 2 cores: bench/README.md, "Weight sync")
        delta = self.cfg.delta if self.cfg.delta is not None else (
            self.backend == "gloo" and address is not None and not loopback_only(address))
        refs = {"learner": learners.async_call("open_sync", address, world, self.backend, self.cfg.timeout_s,
                                               self.cfg.bucket_mb << 20, wire, delta=delta)}
        first = 1
        for i in grouped:
            refs[f"rollout_{i}"] = [rollouts.actors[i].open_sync.remote(address, first, world, self.backend,
                                                                        self.cfg.timeout_s)]
            first += ranks[i]
        got = _form(refs, self.cfg.timeout_s, f"opening a {self.backend} group of {world} ranks at {address}")
        self.plan_ref = ray.put(got["learner"][0])

    def reset(self, learners: LearnerGroup, rollouts: RolloutGroup) -> None:
        """Dissolve the group (a member was lost): every member that is still there leaves it, and the
        next push forms a new one with a fresh store, the restarted engine included."""
        self.fallback = None  # the restarted engine may sit elsewhere: the next push looks again
        if self.plan_ref is None:
            return
        self.plan_ref = None
        refs = learners.async_call("close_sync") + rollouts.async_call("close_sync")
        ray.wait(refs, num_returns=len(refs), timeout=self.cfg.timeout_s)
        for ref in refs:  # a member that died with the group has nothing to leave
            try:
                ray.get(ref, timeout=0)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                pass

    def push(self, learners: LearnerGroup, rollouts: RolloutGroup, version: int) -> dict[str, float]:
        if self.plan_ref is None:
            self._open(learners, rollouts)
        stagers = set(self.handoff.values())
        grouped = [i for i in range(len(rollouts.actors)) if self.transports[f"rollout_{i}"] == "collective"]
        refs = {"learner": [a.send_weights.remote(stage=r in stagers) for r, a in enumerate(learners.actors)]}
        refs |= {f"rollout_{i}": [rollouts.actors[i].receive_weights.remote(self.plan_ref, version)]
                 for i in grouped}
        got = _wait(refs, self.cfg.timeout_s, "broadcast")
        sent = got.pop("learner")
        handles = [s.pop("handles") if s else [] for s in sent]
        kept = [bool(s.pop("kept", False)) if s else False for s in sent]
        release = not all(kept[r] for r in stagers)  # a rank's GPU buffers are freed; its CPU sets serve on
        stats = dict(sent[0])
        received = [v for vs in got.values() for v in vs]
        if any(r != stats["sync/bytes"] for r in received):
            raise RuntimeError(f"weight sync: learner sent {stats['sync/bytes']:.0f} bytes, "
                               f"engines received {received}")
        if self.handoff:  # each colocated engine maps what its rank staged; then the ranks free it
            refs = {f"rollout_{i}": [rollouts.actors[i].receive_shared.remote(handles[r], self.plan_ref, version)]
                    for i, r in self.handoff.items()}
            try:
                handed = [v for vs in _wait(refs, self.cfg.timeout_s, "hand-off").values() for v in vs]
            finally:
                if release:
                    _wait({"learner": learners.async_call("release_staged")}, self.cfg.timeout_s, "release staged")
            stats["sync/handoff_bytes"] = float(sum(handed))
            stats["sync/bytes"] += stats["sync/handoff_bytes"]
        if self.fallback is not None:
            only = [i for i in range(len(rollouts.actors)) if self.transports[f"rollout_{i}"] == "object_store"]
            stats["sync/bytes"] += self.fallback.push(learners, rollouts, version, only)["sync/bytes"]
        return stats


def make_weight_sync(cfg: WeightSyncConfig, store: Callable[[], str] | None = None) -> WeightSync:
    """The configured path; `store` gives the collective group's rendezvous address (on learner rank 0's node)."""
    if cfg.method == "object_store":
        return ObjectStoreSync(cfg.timeout_s)
    if cfg.method == "collective":
        if store is None:
            raise ValueError("the collective weight sync needs a rendezvous store (orchestrator.setup.build_groups)")
        return CollectiveSync(cfg, store)
    raise ValueError(f"unknown weight sync {cfg.method!r}; valid: collective, object_store")
