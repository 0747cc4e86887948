"""Lost actors: how the driver notices one, and how a lost rollout or reward actor's work is run again.

Rollout and reward actors restart (Ray `max_restarts`, `cluster.max_restarts`); a task that was in
flight on one when it died fails with a `RayActorError`. `Redispatch` runs chunks of work over a
group and sends a failed chunk again -- to a live actor that has the current state, or, when none is
left, to the restarted one once the driver's `recover` has brought it up to date (a restarted rollout
actor holds the initial weights: it refuses to generate with them, `StaleWeights`, until it is synced).
A chunk keeps its seed wherever it runs, so the step's samples do not depend on who generated them.

Learners do not restart (their DeepSpeed group and optimizer state die with them): `get_all` fails on
the first learner that died as soon as it does, `ActorLost`, while its peers still hang in the
collective, and the supervisor (`trainer.max_failures`) restarts the run from its last checkpoint.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

import ray

T = TypeVar("T")

# How long a group's actors may return nothing before the driver takes the busy ones for hung: far above any
# call measured (an RL step of the paper run, 8 GPUs: minutes), and bounded, so that a hung engine or
# collective ends the try with a message (and `trainer.max_failures` restarts it) instead of waiting forever.
STALL_S = 3600.0


class ActorLost(RuntimeError):
    """An actor died and its work cannot be run again here: a learner, or a chunk out of retries."""

    def __init__(self, role: str, rank: int, detail: str):
        super().__init__(f"{role} actor {rank} was lost: {detail}")
        self.role, self.rank = role, rank


class StaleWeights(RuntimeError):
    """A rollout actor was asked for samples of weights it does not hold (it restarted since the last sync)."""


class Abandoned(RuntimeError):
    """The caller cancelled a wait that could not end by itself in time (a member died while the
    weight-sync group formed: the rendezvous would wait out its whole timeout)."""


def abandonable(build: Callable[[], T], what: str, poll_s: float = 0.2) -> T:
    """`build()` in a thread this actor task can leave: when the driver `ray.cancel`s the task, it
    raises `Abandoned` within `poll_s` and the actor takes its next call (the thread, blocked in the
    rendezvous, ends at its own timeout and its result is dropped). A running task of a regular actor
    is never interrupted by Ray; it can only notice the cancel, as here."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = build()
        except BaseException as e:  # noqa: BLE001 -- handed to the task's thread below
            box["error"] = e

    thread = threading.Thread(target=run, name=f"parallax-{what}", daemon=True)
    thread.start()
    ctx = ray.get_runtime_context()
    while thread.is_alive():
        thread.join(poll_s)
        if thread.is_alive() and ctx.is_canceled():
            raise Abandoned(f"{what}: abandoned by the driver (a member of the group was lost)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def is_loss(e: BaseException) -> bool:
    """An actor that died or restarted under the task (not an error in the work itself)."""
    return isinstance(e, (ray.exceptions.RayActorError, StaleWeights))


def summary(e: BaseException) -> str:
    """The last meaningful line of a Ray error (its full text repeats the actor's traceback)."""
    lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
    return lines[-1] if lines else type(e).__name__


def get_all(refs: list[ray.ObjectRef], role: str, timeout_s: float = STALL_S) -> list[Any]:
    """ray.get of one call on every actor of a group (ref i is rank i's), failing on the first actor
    that died as soon as it does: a learner's peers hang in the collective and would never return.
    Actors that answer nothing for `timeout_s` are taken for hung: `ActorLost` naming them."""
    out: list[Any] = [None] * len(refs)
    rank = {r: i for i, r in enumerate(refs)}
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=timeout_s)
        if not ready:
            busy = sorted(rank[r] for r in pending)
            raise ActorLost(role, busy[0], f"{role} actors {busy} returned nothing within {timeout_s:g} s "
                                           "(hung; actors.faults.STALL_S)")
        try:
            out[rank[ready[0]]] = ray.get(ready[0])
        except ray.exceptions.RayActorError as e:
            raise ActorLost(role, rank[ready[0]], summary(e)) from None
    return out


def wait_alive(actors: list, ranks: list[int], timeout_s: float, role: str) -> None:
    """Until the group's actors of these ranks answer (a restarting one has run its constructor again), bounded. While
    Ray restarts an actor, calls to it fail with ActorUnavailableError: asked again until the deadline."""
    import time

    deadline = time.monotonic() + timeout_s
    for rank in ranks:
        actor = actors[rank]
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ActorLost(role, rank, f"not back within {timeout_s:g} s of its restart (cluster.start_timeout_s)")
            try:
                ray.get(actor.__ray_ready__.remote(), timeout=left)
                break
            except ray.exceptions.ActorUnavailableError:
                time.sleep(min(0.5, max(0.0, left)))
            except ray.exceptions.GetTimeoutError:
                continue
            except ray.exceptions.RayActorError as e:
                raise ActorLost(role, rank,
                                f"it did not restart: {summary(e)} (cluster.max_restarts used up?)") from None


class Redispatch:
    """Chunks of work over one group's actors; a chunk whose actor was lost runs again.

    `call(actor, key, chunk)` submits one chunk and returns its ref (the key carries what must not
    change between tries: the seed). `recover(ranks)` brings restarted actors back to the current
    state (waits for them; the rollout group's weights). Each chunk may be retried `max_retries`
    times; `retries` counts every re-dispatch, `lost` the ranks lost so far.
    """

    def __init__(self, role: str, actors: list, call: Callable[[Any, Hashable, Any], ray.ObjectRef],
                 recover: Callable[[list[int]], None], max_retries: int, stall_s: float = STALL_S):
        self.role, self.actors, self.call, self.recover = role, actors, call, recover
        self.max_retries, self.stall_s = max_retries, stall_s
        self.retries = 0
        self.lost: set[int] = set()  # restarted (or restarting) and not yet recovered
        self._flight: dict[ray.ObjectRef, tuple[Hashable, Any, int]] = {}
        self._tries: dict[Hashable, int] = {}

    def submit(self, key: Hashable, chunk: Any, rank: int) -> None:
        """Run `chunk` on actor `rank`, or on a live one while `rank` is lost."""
        if rank in self.lost:
            rank = self._target(rank)
        self._flight[self.call(self.actors[rank], key, chunk)] = (key, chunk, rank)

    def _target(self, rank: int) -> int:
        """The live actor with the least work in flight; when every actor is lost, recover them all."""
        live = [r for r in range(len(self.actors)) if r not in self.lost]
        if not live:
            self.recover(sorted(self.lost))
            self.lost.clear()
            return rank
        load = {r: 0 for r in live}
        for _, _, r in self._flight.values():
            if r in load:
                load[r] += 1
        return min(live, key=lambda r: (load[r], r))

    def wait(self, timeout_s: float | None = None) -> bool:
        """Until every chunk in flight has finished (results stay to be collected), `stall_s` at most
        unless told; False on a timeout."""
        if not self._flight:
            return True
        timeout_s = self.stall_s if timeout_s is None else timeout_s
        _, pending = ray.wait(list(self._flight), num_returns=len(self._flight), timeout=timeout_s)
        return not pending

    def completed(self) -> Iterator[tuple[Hashable, Any]]:
        """(key, result) of every submitted chunk as it finishes, re-dispatching lost ones; chunks
        submitted while iterating are included. An error in the work itself is raised as it is; no
        chunk finishing within `stall_s` is `ActorLost`, naming the busy actors."""
        while self._flight:
            ready, _ = ray.wait(list(self._flight), num_returns=1, timeout=self.stall_s)
            if not ready:
                busy = sorted({r for _, _, r in self._flight.values()})
                keys = [k for k, _, _ in self._flight.values()]
                raise ActorLost(self.role, busy[0], f"{self.role} actors {busy} returned nothing within "
                                                    f"{self.stall_s:g} s (chunks {keys} in flight; hung)")
            key, chunk, rank = self._flight.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except Exception as e:
                if not is_loss(e):
                    raise
                self._tries[key] = tries = self._tries.get(key, 0) + 1
                if tries > self.max_retries:
                    raise ActorLost(self.role, rank, f"chunk {key} failed {tries} times; last: {summary(e)} "
                                                     "(cluster.max_restarts)") from None
                self.retries += 1
                self.lost.add(rank)
                print(f"{self.role} actor {rank} lost ({summary(e)}); running its chunk {key} again", flush=True)
                self.submit(key, chunk, rank)
                continue
            yield key, result
