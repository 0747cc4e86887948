"""The same-device hand-off: a learner rank gives the engine on its own device the weights it holds.

Colocated engines (`rollout.colocate`: engine i on learner rank i's GPU) cannot join an NCCL group with
that rank (NCCL refuses two ranks on one device), and the object store would copy the whole model
through host memory for every engine. Every learner rank walks the export's buckets anyway (ZeRO-3
gathers each bucket on every rank), so rank i packs each bucket into a buffer of its own on its device
and shares it; engine i maps the same memory and loads from it, with no transfer (verl and OpenRLHF
hand a colocated engine its weights the same way, by CUDA IPC):

* on CUDA, a buffer's CUDA IPC handle (`torch.multiprocessing.reductions.reduce_tensor`), opened on the
  receiver's own device -- both actors see the one GPU they share as their device 0;
* on CPU, the buffer's storage in shared memory by name (torch's `file_system` sharing), opened by any
  process on the node: the same code path, tested on CPU.

A handle is plain bytes (vLLM's `collective_rpc` carries plain values). The sender keeps its buffers
until every receiver has loaded (`LearnerWorker.release_staged`), the receiver copies out of them. On CPU
(`rollout.weight_sync.cpu_handoff`: an engine on a CPU learner rank's node) the rank keeps two sets of
buffers and casts each push into the one it did not use last, and the engine keeps both mapped (`opened`)
and binds its parameters to the set it is handed (the hf engine: `parallax.weightsync.receive.bind_into`),
so a push is one cast, with no copy and no socket (gloo over loopback spent most of a push on it:
bench/bench_sync.py). The driver waits for every engine's hand-off before the next push, so the set a
rank writes is never the one an engine reads. Once every engine has mapped a set, the rank removes its
names (`unlink`): the memory then goes with the last process that maps it, however the run ends.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable

import torch

from parallax.weightsync.plan import SyncPlan, plan_from_wire, unpack
from parallax.weightsync.receive import Weights


def share(buf: torch.Tensor) -> bytes:
    """A handle another process on this node can open as `buf` itself (a contiguous uint8 buffer that owns
    its storage from offset 0, as `parallax.weightsync.plan.pack` makes one with view=False)."""
    from torch.multiprocessing import reductions

    if buf.is_cuda:
        return pickle.dumps(("cuda", reductions.reduce_tensor(buf)))
    import torch.multiprocessing as mp

    mp.set_sharing_strategy("file_system")  # by name: a handle that is plain data (no file descriptor to pass)
    return pickle.dumps(("cpu", reductions.reduce_storage(buf.untyped_storage()), buf.numel()))


_MAPPED: dict[bytes, torch.Tensor] = {}  # CPU handles -> their buffers, mapped once (the sender reuses them)
_RECENT: list[set[bytes]] = []  # the handles of the last two pushes


def opened(handle: bytes) -> torch.Tensor:
    """The buffer a `share` handle names, mapped into this process (no copy); a CPU buffer stays mapped for
    the next push that names it."""
    if handle in _MAPPED:
        return _MAPPED[handle]
    kind, (rebuild, args), *rest = pickle.loads(handle)
    if kind == "cuda":
        args = list(args)
        args[6] = torch.cuda.current_device()  # the sender's device index, as this process numbers it
        return rebuild(*args)
    storage = rebuild(*args)
    _MAPPED[handle] = buf = torch.empty(0, dtype=torch.uint8).set_(storage)[: rest[0]]
    return buf


def shm_name(handle: bytes) -> str | None:
    """The shared-memory name a CPU handle opens (``/torch_...``, under /dev/shm); a CUDA handle has none."""
    kind, (_, args), *_ = pickle.loads(handle)
    return args[2].decode() if kind == "cpu" else None


def unlink(handles: list[bytes]) -> None:
    """Remove the names of CPU buffers every receiver has mapped (`opened`): the memory stays while a
    process maps it."""
    import _posixshmem

    for name in filter(None, map(shm_name, handles)):
        try:
            _posixshmem.shm_unlink(name)
        except FileNotFoundError:
            pass


def receive_shared(handles: list[bytes], wire: dict, load: Callable[[Weights, SyncPlan], None]) -> int:
    """The learner's staged buckets (`handles`, in plan order) handed to `load(weights, plan)` as (name,
    tensor) views into the shared buffers, then each tied alias with its source's tensor; the bytes."""
    plan = plan_from_wire(wire)
    if len(handles) != len(plan.buckets):
        raise ValueError(f"weight hand-off: {len(handles)} buffers for a plan of {len(plan.buckets)} buckets")
    if set(handles) not in _RECENT:  # the last two sets handed: a CPU sender's two
        _RECENT[:] = [*_RECENT[-1:], set(handles)]
    for stale in set(_MAPPED) - set().union(*_RECENT):  # buffers the sender no longer uses (a new plan)
        del _MAPPED[stale]

    def weights() -> Weights:
        sources, kept = {src for _, src in plan.aliases}, {}
        for bucket, handle in zip(plan.buckets, handles):
            for name, t in unpack(bucket, opened(handle)):
                if name in sources:
                    kept[name] = t
                yield name, t
        for alias, src in plan.aliases:
            yield alias, kept[src]

    load(weights(), plan)
    if torch.cuda.is_available():
        torch.cuda.synchronize()  # the copies out of the sender's memory are done before it frees it
    return plan.nbytes


def handoff_pairs(learners: list[dict], engines: list[tuple[dict, int]], cpu: bool = False) -> dict[int, int]:
    """Which engine takes its weights from which learner rank on its own device: {engine i: rank r}.
    `learners`: each rank's `actors.devices.seen()`; `engines`: each engine's, with its sync ranks (its
    workers). An engine of one worker whose one GPU is a GPU a learner rank was given, on the same node,
    is handed the weights there (`receive_shared`); any other goes by the collective. `cpu`
    (`rollout.weight_sync.cpu_handoff`): also an engine of one worker and no GPU, on the node of a learner
    rank with no GPU, from that node's first such rank (shared memory)."""
    rank_of = {(seen["node"], gpu): r for r, seen in enumerate(learners) for gpu in seen["gpus"]}
    pairs = {i: rank_of[(seen["node"], seen["gpus"][0])] for i, (seen, workers) in enumerate(engines)
             if workers == 1 and len(seen["gpus"]) == 1 and (seen["node"], seen["gpus"][0]) in rank_of}
    if cpu:
        host: dict[str, int] = {}
        for r, seen in enumerate(learners):
            if not seen["gpus"]:
                host.setdefault(seen["node"], r)
        pairs |= {i: host[seen["node"]] for i, (seen, workers) in enumerate(engines)
                  if workers == 1 and not seen["gpus"] and seen["node"] in host}
    return pairs
