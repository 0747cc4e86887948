"""Collective weight sync: learner rank 0 broadcasts its weights, bucketed, to every engine worker.

One torch.distributed process group per run, separate from the learners' own DeepSpeed group and
from vLLM's internal groups: rank 0 is learner rank 0, ranks 1.. are the engines' workers (an hf
engine is one rank; a vLLM engine one per tensor-parallel worker). The group is built from its own
TCPStore, never the default group, so each side keeps the groups it already has. gloo on CPU, NCCL
on GPU: the same code, the backend and the buffer device differ (`open_group`).

A bucket is one flat uint8 buffer holding several tensors back to back, so a sync is a few large
broadcasts rather than hundreds of small ones; a tied tensor (lm_head = embed_tokens) is sent once.
The plan (names, dtypes, shapes, bucket bounds, aliases) is made once from the learner's weights and sent to every receiver, which rebuilds views into the
buffer it received and hands them to its engine's loader (which copies them into place).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

# Buckets in flight at once: concurrent broadcasts use gloo's threads and connections together, and
# the sender packs (the receiver loads) one bucket while others move. 512 MiB over loopback on the
# 2-core CPU: 0.57 s one at a time in 256 MiB buckets, 0.41-0.46 s with 4 in flight of 8-64 MiB.
INFLIGHT = 4


@dataclass(frozen=True)
class TensorMeta:
    name: str
    dtype: str  # torch dtype name without "torch.", e.g. "float32"
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return _numel(self.shape) * torch.empty((), dtype=getattr(torch, self.dtype)).element_size()


@dataclass(frozen=True)
class Bucket:
    tensors: tuple[TensorMeta, ...]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def aliases(state: dict[str, torch.Tensor]) -> dict[str, str]:
    """alias -> the first name holding the same tensor (tied embeddings: lm_head.weight -> embed_tokens)."""
    first: dict[tuple[int, int, tuple], str] = {}
    out = {}
    for k, v in state.items():
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape))
        if key in first:
            out[k] = first[key]
        else:
            first[key] = k
    return out


def unique_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict without aliases, in order: what is sent (each alias is re-created by the receiver)."""
    tied = aliases(state)
    return {k: v for k, v in state.items() if k not in tied}


@dataclass(frozen=True)
class SyncPlan:
    """What one sync sends: the buckets in order, and the aliases the receiver re-creates."""

    buckets: tuple[Bucket, ...]
    aliases: tuple[tuple[str, str], ...] = ()  # (alias, source)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buckets)


def plan_buckets(metas: Iterable[TensorMeta], bucket_bytes: int) -> list[Bucket]:
    """Consecutive tensors grouped into buckets of at most `bucket_bytes` (a larger tensor is its own)."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
    buckets, cur, size = [], [], 0
    for m in metas:
        if cur and size + m.nbytes > bucket_bytes:
            buckets.append(Bucket(tuple(cur)))
            cur, size = [], 0
        cur.append(m)
        size += m.nbytes
    if cur:
        buckets.append(Bucket(tuple(cur)))
    return buckets


def plan_for(state: dict[str, torch.Tensor], bucket_bytes: int) -> SyncPlan:
    metas = [TensorMeta(k, str(v.dtype).removeprefix("torch."), tuple(v.shape))
             for k, v in unique_tensors(state).items()]
    return SyncPlan(tuple(plan_buckets(metas, bucket_bytes)), tuple(aliases(state).items()))


def plan_to_wire(plan: SyncPlan) -> dict[str, list]:
    """The plan as plain values (what vLLM's RPC serialiser carries)."""
    return {"buckets": [[[m.name, m.dtype, list(m.shape)] for m in b.tensors] for b in plan.buckets],
            "aliases": [list(a) for a in plan.aliases]}


def plan_from_wire(wire: dict[str, list]) -> SyncPlan:
    buckets = tuple(Bucket(tuple(TensorMeta(n, d, tuple(s)) for n, d, s in b)) for b in wire["buckets"])
    return SyncPlan(buckets, tuple((a, src) for a, src in wire["aliases"]))


def _in_place(bucket: Bucket, state: dict[str, torch.Tensor], device: str) -> torch.Tensor | None:
    """The bucket as a uint8 view of the memory its tensors already occupy, when they lie back to back
    in one storage in plan order (DeepSpeed ZeRO-1/2 flattens a module's parameters so): no copy."""
    first = state[bucket.tensors[0].name]
    storage, start = first.untyped_storage(), first.storage_offset() * first.element_size()
    end = start
    for m in bucket.tensors:
        t = state[m.name]
        if (t.untyped_storage().data_ptr() != storage.data_ptr() or not t.is_contiguous()
                or t.storage_offset() * t.element_size() != end or str(t.device) != str(torch.device(device))
                or str(t.dtype).removeprefix("torch.") != m.dtype or tuple(t.shape) != m.shape):
            return None
        end += m.nbytes
    return torch.empty(0, dtype=torch.uint8, device=first.device).set_(storage, start, (end - start,))


def pack(bucket: Bucket, state: Mapping[str, torch.Tensor], device: str = "cpu", view: bool = True) -> torch.Tensor:
    """The bucket's tensors, bytes back to back, in one uint8 buffer on `device` (with `view`, a view of
    their own memory when they already lie so; the sender only reads it)."""
    view = _in_place(bucket, state, device) if view else None
    if view is not None:
        return view
    buf = torch.empty(bucket.nbytes, dtype=torch.uint8, device=device)
    off = 0
    for m in bucket.tensors:
        t = state[m.name]
        if str(t.dtype).removeprefix("torch.") != m.dtype or tuple(t.shape) != m.shape:
            raise ValueError(f"weight sync: {m.name} is {t.dtype}{tuple(t.shape)}, the plan says {m.dtype}{m.shape}")
        buf[off:off + m.nbytes].copy_(t.detach().contiguous().reshape(-1).view(torch.uint8))
        off += m.nbytes
    return buf


def unpack(bucket: Bucket, buf: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) views into `buf`, one per tensor of the bucket (valid while `buf` lives)."""
    if buf.numel() != bucket.nbytes:
        raise ValueError(f"weight sync: received {buf.numel()} bytes for a bucket of {bucket.nbytes}")
    off = 0
    for m in bucket.tensors:
        yield m.name, buf[off:off + m.nbytes].view(getattr(torch, m.dtype)).reshape(m.shape)
        off += m.nbytes


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
