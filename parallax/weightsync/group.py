"""The weight-sync group: learner rank 0 broadcasts its weights, bucketed, to every engine worker.

One torch.distributed process group per run, separate from the learners' own DeepSpeed group and
from vLLM's internal groups: rank 0 is learner rank 0, ranks 1.. are the engines' workers (an hf
engine is one rank; a vLLM engine one per tensor-parallel worker). The group is built from its own
store, never the default group, so each side keeps the groups it already has. gloo on CPU, NCCL
on GPU: the same code, the backend and the buffer device differ.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from datetime import timedelta

import torch
import torch.distributed as dist

from parallax.weightsync.plan import SyncPlan, pack, unpack

# Buckets in flight at once: concurrent broadcasts use gloo's threads and connections together, and
# the sender packs (the receiver loads) one bucket while others move. 512 MiB over loopback on the
# 2-core CPU: 0.57 s one at a time in 256 MiB buckets, 0.41-0.46 s with 4 in flight of 8-64 MiB.
INFLIGHT = 4


def open_store(address: str, rank: int, world_size: int, timeout: timedelta) -> dist.Store:
    """The group's rendezvous store: `file:///path` is a FileStore (every member on one node; no socket
    at all), `tcp://host:port` a TCPStore that rank 0 serves (it listens on every interface: torch's
    TCPStore has no bind address), for members on several nodes."""
    if address.startswith("file://"):
        return dist.FileStore(address.removeprefix("file://"), world_size)
    if address.startswith("tcp://"):
        host, _, port = address.removeprefix("tcp://").rpartition(":")
        return dist.TCPStore(host.strip("[]"), int(port), world_size, is_master=rank == 0, timeout=timeout,
                             wait_for_workers=False)
    raise ValueError(f"weight-sync store address must be file:///PATH or tcp://HOST:PORT, got {address!r}")


def loopback_only(address: str) -> bool:
    """Whether a group at this store address keeps to one node, so gloo's own sockets bind 127.0.0.1."""
    return address.startswith(("file://", "tcp://127.", "tcp://localhost:", "tcp://[::1]:"))


def gloo_device(address: str):
    """gloo's transport device: loopback for a one-node group, else the interface of the host's name
    (GLOO_SOCKET_IFNAME overrides it, as for every gloo group)."""
    if loopback_only(address):
        return dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")
    return dist.ProcessGroupGloo.create_default_device()


class SyncGroup:
    """This process's membership of the run's weight-sync group (rank 0 sends, the others receive).

    `address` is the rendezvous store (`open_store`): `file:///path` on one node, `tcp://host:port` across nodes."""

    def __init__(self, address: str, rank: int, world_size: int, backend: str = "gloo", timeout_s: float = 120.0):
        if world_size < 2:
            raise ValueError(f"a weight-sync group needs a sender and a receiver, world_size={world_size}")
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"weight-sync backend must be gloo or nccl, got {backend!r}")
        timeout = timedelta(seconds=timeout_s)
        store = dist.PrefixStore("parallax/weight_sync", open_store(address, rank, world_size, timeout))
        if backend == "gloo":
            opts = dist.ProcessGroupGloo._Options()
            opts._timeout = timeout
            opts._devices = [gloo_device(address)]
            opts._threads = INFLIGHT  # one gloo thread per bucket in flight
            self.pg = dist.ProcessGroupGloo(store, rank, world_size, opts)
            self.device = "cpu"
        else:
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = timeout
            self.pg = dist.ProcessGroupNCCL(store, rank, world_size, opts)
            self.device = f"cuda:{torch.cuda.current_device()}"
        self.rank, self.world_size, self.backend, self.address = rank, world_size, backend, address
        self._store = store

    def close(self) -> None:
        """Leave the group (before a new one is formed: a member was lost, or the run ends)."""
        self.pg = None
        self._store = None

    def _broadcast(self, buf: torch.Tensor):
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        return self.pg.broadcast([buf], opts)

    def send(self, plan: SyncPlan, state: Mapping[str, torch.Tensor] | Iterable[Mapping[str, torch.Tensor]],
             copy: bool = False) -> int:
        """Rank 0: broadcast every bucket, up to INFLIGHT at once (packing the next meanwhile). `state`: the
        whole state dict, or one mapping per bucket in plan order (a ZeRO-3 learner's gathered pieces,
        valid until the next is drawn: `copy=True` packs each into a buffer of its own)."""
        assert self.rank == 0, "only rank 0 sends"
        pieces = itertools.repeat(state) if isinstance(state, Mapping) else iter(state)
        sent, pending = 0, []
        for bucket in plan.buckets:
            piece = next(pieces, None)
            if piece is None:
                raise ValueError(f"weight sync: {len(plan.buckets)} buckets planned, fewer pieces given")
            buf = pack(bucket, piece, self.device, view=not copy)
            if len(pending) == INFLIGHT:
                pending.pop(0).wait()
            pending.append(self._broadcast(buf))
            sent += buf.numel()
        for work in pending:
            work.wait()
        return sent

    def receive(self, plan: SyncPlan) -> Iterator[tuple[str, torch.Tensor]]:
        """Ranks > 0: (name, tensor) for every tensor of the plan, bucket by bucket as they arrive (up to
        INFLIGHT posted ahead), then each alias with its source's tensor. A loader that reloads module
        by module (vLLM's `reload_weights`) must see the tied `lm_head.weight` too, or it restores the
        old values there."""
        sources = {src for _, src in plan.aliases}
        kept, posted, todo = {}, [], list(plan.buckets)
        while todo or posted:
            while todo and len(posted) < INFLIGHT:
                bucket = todo.pop(0)
                buf = torch.empty(bucket.nbytes, dtype=torch.uint8, device=self.device)
                posted.append((bucket, buf, self._broadcast(buf)))
            bucket, buf, work = posted.pop(0)
            work.wait()
            for name, t in unpack(bucket, buf):
                if name in sources:
                    kept[name] = t
                yield name, t
        for alias, src in plan.aliases:
            yield alias, kept[src]
