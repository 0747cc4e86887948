"""Ray actor groups: the one place `ray.remote` is applied to a class, the plain worker classes.

Each group holds N named actors placed on the bundles of one placement group. Its
`async_*` methods return lists of ObjectRefs; the driver decides when to `ray.get`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from parallax.contract.batch import SFTBatch, TrainBatch


@dataclass
class BundleSpec:
    role: str
    count: int
    num_cpus: float
    num_gpus: float
    resources: dict[str, float] | None = None  # custom resources: the nodes this role may sit on


def reserve(bundles: list[BundleSpec], strategy: str, name: str,
            timeout_s: float = 60.0) -> tuple[PlacementGroup, dict]:
    """One placement group for every actor of the run; returns it and each role's first bundle index.

    Fails with a clear message (instead of hanging) when the cluster cannot hold the request.
    """
    flat, offsets = [], {}
    for b in bundles:
        offsets[b.role] = len(flat)
        res = {"CPU": b.num_cpus} | ({"GPU": b.num_gpus} if b.num_gpus else {}) | dict(b.resources or {})
        flat.extend([res] * b.count)
    pg = placement_group(flat, strategy=strategy, name=name)
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(pg)
        want = {k: sum(r.get(k, 0) for r in flat) for k in dict.fromkeys(k for r in flat for k in r)}
        raise RuntimeError(f"placement group of {want} not placeable within {timeout_s}s; "
                           f"cluster has {ray.cluster_resources()}: lower *.num_cpus or raise cluster.num_cpus")
    return pg, offsets


# Environment every actor of the run starts with, on top of the job's (Ray merges env_vars). NCCL's cuMem
# allocator off: the weight sync's NCCL group joins learner rank 0 to the engines' workers, and both ends must
# agree on it (OpenRLHF and SkyRL set 0 on both sides after hangs between peers that did not); vLLM 0.30 no
# longer sets it, so each side would otherwise take NCCL's default of its own build.
#
# glibc's malloc keeps what torch frees in the process's heap instead of handing it back to the kernel: by
# default an allocation above 32 MiB (a SmolLM2 row of logits: 16 x 48 x 49,152 bf16 is 75 MB) is mmapped and
# its pages unmapped on free, so every step faults them in again, zeroed. On the 2-core machine a learner's
# GRPO step took 2.87 s by default against 2.50 s with this setting (three runs each; one run's page faults
# 9.9 M against 1.2 M; bench/bench_learner_speed.py --batch 16 --tokens 48 --kinds grpo --precisions bf16). The
# heap then stays at its peak, which a worker reaches in its first steps.
ACTOR_ENV = {"NCCL_CUMEM_ENABLE": "0", "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}


class ActorGroup:
    """N actors of one worker class, actor i on bundle offset + i, named `<prefix>/<role>_<i>`.

    `max_restarts`: how often Ray brings a dead actor back (on its bundle, constructor run again); a
    task in flight when it died fails, and the driver runs it again (actors/faults.py)."""

    def __init__(self, role: str, worker_cls: type, count: int, pg: PlacementGroup, offset: int,
                 num_cpus: float, num_gpus: float, kwargs_for_rank: Callable[[int], dict], prefix: str,
                 max_restarts: int = 0):
        remote_cls = ray.remote(worker_cls)
        self.role = role
        # A restarted actor runs its constructor again with the same arguments. Ray puts a large one
        # (a SmolLM2 tokenizer: > 100 KB) into the object store and frees it once the first constructor
        # ran, so the restart failed ("deleted by the reference counting protocol") and the run stopped.
        # Every argument of a restartable actor goes into the object store here, held as long as the group.
        self._held: list[dict] = []

        def arguments(i: int) -> dict:
            kwargs = kwargs_for_rank(i)
            if max_restarts:
                kwargs = {k: v if isinstance(v, ray.ObjectRef) else ray.put(v) for k, v in kwargs.items()}
                self._held.append(kwargs)
            return kwargs

        self.actors = [
            remote_cls.options(
                name=f"{prefix}/{role}_{i}",
                num_cpus=num_cpus,
                num_gpus=num_gpus,
                max_restarts=max_restarts,
                runtime_env={"env_vars": ACTOR_ENV},
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=offset + i),
            ).remote(**arguments(i))
            for i in range(count)
        ]

    def wait_ready(self, timeout_s: float, hint: str = "") -> None:
        """Block until every actor's constructor has returned. One that raised fails here, naming its
        role and rank; one still starting after `timeout_s` is an error naming it (never a silent hang)."""
        refs = {a.__ray_ready__.remote(): i for i, a in enumerate(self.actors)}
        ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        for ref in ready:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as e:
                lines = [x for x in str(e).strip().splitlines() if x.strip()]
                raise RuntimeError(f"{self.role} actor {refs[ref]} failed to start: {lines[-1] if lines else e}\n{e}") \
                    from None
        if pending:
            ranks = sorted(refs[r] for r in pending)
            raise RuntimeError(f"{self.role} actor(s) {ranks} not started after {timeout_s:g} s "
                               f"(cluster.start_timeout_s){': ' + hint if hint else ''}")

    def async_call(self, method: str, *args, **kwargs) -> list[ray.ObjectRef]:
        """The same call on every actor."""
        return [getattr(a, method).remote(*args, **kwargs) for a in self.actors]

    def __len__(self) -> int:
        return len(self.actors)


def split_chunks(items: list, k: int) -> list[list]:
    """Split into k contiguous, nearly equal chunks (some may be empty)."""
    q, r = divmod(len(items), k)
    out, i = [], 0
    for j in range(k):
        n = q + (1 if j < r else 0)
        out.append(items[i : i + n])
        i += n
    return out


class RolloutGroup(ActorGroup):
    """The rollout actors; a step's generation is dispatched over them by `orchestrator.generation`."""


class RewardActorGroup(ActorGroup):
    """The reward actors; a step's groups are scored over them by `orchestrator.generation`."""


class LearnerGroup(ActorGroup):
    def async_grpo_step(self, batch: TrainBatch, lr: float, weight_decay: float,
                        temperature: float) -> list[ray.ObjectRef]:
        world = len(self.actors)
        tokens, seqs = int(batch.response_mask.sum()), len(batch)
        return [a.grpo_step.remote(batch.shard(r, world), tokens, seqs, lr, temperature, weight_decay)
                for r, a in enumerate(self.actors)]

    def async_sft_step(self, batch: SFTBatch, lr: float, weight_decay: float | None = None) -> list[ray.ObjectRef]:
        world = len(self.actors)
        tokens = int(batch.loss_mask.sum())
        return [a.sft_step.remote(batch.shard(r, world), tokens, lr, weight_decay) for r, a in enumerate(self.actors)]

    def save(self, out: Path, shared_fs: bool, piece_bytes: int | None = None) -> None:
        """The learners' weights (`out/model`) and training state (`out/training_state`): written by the
        ranks themselves on a shared filesystem, else streamed here a piece at a time and written."""
        from actors.faults import get_all

        if shared_fs:
            get_all(self.async_call("save_pretrained", str(out / "model")), "learner")
            get_all(self.async_call("save_training_state", str(out / "training_state")), "learner")
        else:
            self._save_streamed(out, piece_bytes)

    def _save_streamed(self, out: Path, piece_bytes: int | None) -> None:
        """Each rank saves on its node (collectively), then streams its files as pieces of `piece_bytes`
        (`actors.files.PIECE_BYTES`), at most two ahead of this loop: the driver holds one piece, never a
        rank's checkpoint. A rank that dies fails the save at once, naming it (its peers would wait in the
        collective save forever), and so does one that yields nothing for `actors.faults.STALL_S`."""
        from actors.faults import STALL_S, ActorLost, summary
        from actors.files import PIECE_BYTES, write_piece

        streams = [a.save_pieces.options(num_returns="streaming", _generator_backpressure_num_objects=2)
                   .remote(piece_bytes or PIECE_BYTES) for a in self.actors]
        pending = list(streams)
        while pending:  # every rank has saved (its first piece is ready), or one died
            ready, pending = ray.wait(pending, num_returns=1, timeout=STALL_S)
            if not ready:
                busy = sorted(streams.index(s) for s in pending)
                raise ActorLost("learner", busy[0], f"learner actors {busy} saved nothing within {STALL_S:g} s")
        for rank, stream in enumerate(streams):
            try:
                for ref in stream:
                    write_piece(out, *ray.get(ref, timeout=STALL_S))
                    del ref  # the piece leaves the object store once written
            except ray.exceptions.RayActorError as e:
                raise ActorLost("learner", rank, summary(e)) from None

    def save_to(self, uri: str) -> dict[str, dict]:
        """Every rank's files uploaded by the rank itself to the fsspec URI `uri` (`LearnerWorker.save_to`): the
        manifest entries of them all. A file two ranks both wrote (DeepSpeed's `latest`) must be the same
        bytes, else the upload is refused, naming it; a rank that dies fails it at once (`get_all`)."""
        from actors.faults import get_all

        files: dict[str, dict] = {}
        for rank, written in enumerate(get_all(self.async_call("save_to", uri), "learner")):
            for rel, entry in written.items():
                if files.setdefault(rel, entry) != entry:
                    raise RuntimeError(f"{uri}/{rel}: learner rank {rank} wrote other bytes than a rank before it")
        return files

    def load_training_state(self, ckpt: Path | str, shared_fs: bool, files: dict[str, dict] | None = None) -> None:
        """Every rank's optimizer and schedule from `ckpt/training_state`: read there, sent as files, or (`ckpt` a
        URI, `files` its manifest's entries) fetched from there by each rank and checked."""
        from actors.faults import get_all
        from actors.files import read_tree

        if isinstance(ckpt, str):
            state = {rel: e for rel, e in (files or {}).items() if rel.startswith("training_state/")}
            get_all(self.async_call("load_training_state_from", ckpt, state), "learner")
        elif shared_fs:
            get_all(self.async_call("load_training_state", str(ckpt / "training_state")), "learner")
        else:
            files = ray.put({f"training_state/{k}": v for k, v in read_tree(ckpt / "training_state").items()})
            get_all(self.async_call("load_training_state_files", files), "learner")

    def async_state_dict(self) -> ray.ObjectRef:
        """Rank 0's full weights (every rank joins the gather, as ZeRO-3 requires)."""
        return self.async_call("state_dict")[0]
