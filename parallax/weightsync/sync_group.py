"""The weight-sync group: learner rank 0 broadcasts its weights, bucketed, to every engine worker.

One torch.distributed process group per run, separate from the learners' own DeepSpeed group and
from vLLM's internal groups: rank 0 is learner rank 0, ranks 1.. are the engines' workers (an hf
engine is one rank; a vLLM engine one per tensor-parallel worker). The group is built from its own
store, never the default group, so each side keeps the groups it already has. gloo on CPU, NCCL
on GPU: the same code, the backend and the buffer device differ.

Each push opens with a header (one small broadcast): whether it is a delta push, and per bucket either
DENSE (the bucket's bytes follow) or k, the number of its elements that changed since the last push, which
follow as k int32 indices and their k new values. A delta push (`send(..., delta=True)`) sends a bucket
sparse when that is fewer bytes than the bucket, and dense otherwise; the first push of a group is dense
throughout. Both ends keep the bucket's last bytes (the sender to compare, the receivers to apply the
change to), so every receiver hands its engine the whole bucket, bit-equal to the sender's cast: only
the wire carries less. An element is compared at the bucket's grain (`grain`: 2 bytes for bf16 buckets),
so a change is exact whatever the dtype; an fp32 learner's bf16 cast changes in a few percent of its
elements per step at RL learning rates, which is what then travels.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist

from parallax.weightsync.plan import Bucket, SyncPlan, pack, unpack

# Buckets in flight at once: concurrent broadcasts use gloo's threads and connections together, and
# the sender packs (the receiver loads) one bucket while others move. 512 MiB over loopback on the
# 2-core CPU: 0.57 s one at a time in 256 MiB buckets, 0.41-0.46 s with 4 in flight of 8-64 MiB.
INFLIGHT = 4
DENSE = -1  # a header's mark for a bucket sent whole
_GRAIN_DTYPE = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def grain(bucket: Bucket) -> int:
    """The bytes a delta compares as one element: the largest of 4, 2, 1 that divides every tensor's
    element size and byte count (2 for a bf16 bucket, 4 for an fp32 one), so no element straddles two."""
    g = 4
    for m in bucket.tensors:
        size = torch.empty((), dtype=getattr(torch, m.dtype)).element_size()
        g = math.gcd(g, size, m.nbytes)
    return g


def diff(old: torch.Tensor, new: torch.Tensor, g: int) -> torch.Tensor | None:
    """The change from `old` to `new` (uint8 buffers of one bucket) as one uint8 payload: k int32 indices
    (of `g`-byte elements), then their k new values; None where the bucket whole is no more bytes."""
    a, b = old.view(_GRAIN_DTYPE[g]), new.view(_GRAIN_DTYPE[g])
    if b.numel() > torch.iinfo(torch.int32).max:
        return None
    idx = (a != b).nonzero().squeeze(1).to(torch.int32)
    k = idx.numel()
    if k * (4 + g) >= new.numel():
        return None
    payload = torch.empty(k * (4 + g), dtype=torch.uint8, device=new.device)
    payload[:k * 4].view(torch.int32).copy_(idx)
    payload[k * 4:].view(_GRAIN_DTYPE[g]).copy_(b[idx.long()])
    return payload


def apply(base: torch.Tensor, payload: torch.Tensor, g: int) -> None:
    """`diff`'s payload written into `base` (the receiver's last bytes of the bucket), in place."""
    k = payload.numel() // (4 + g)
    idx = payload[:k * 4].view(torch.int32).long()
    base.view(_GRAIN_DTYPE[g])[idx] = payload[k * 4:].view(_GRAIN_DTYPE[g])


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
        self._last: list[torch.Tensor] | None = None  # rank 0: the last push's buckets (a delta's base)
        self._kept: list[torch.Tensor] | None = None  # ranks > 0: the same, as received
        self.received = 0

    def close(self) -> None:
        """Leave the group (before a new one is formed: a member was lost, or the run ends)."""
        self.pg = None
        self._store = None
        self._last = self._kept = None

    @contextmanager
    def _threads(self):
        """A push on one node (loopback gloo) runs on one torch thread at each end: sender and receivers share
        the node's cores, and two threads each made a SmolLM2 push 0.51 s against 0.26 s on one each (the
        cast's threads spin against the copy's, bench/bench_sync.py --threads)."""
        if self.backend != "gloo" or not loopback_only(self.address):
            yield
            return
        was = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(was)

    def _broadcast(self, buf: torch.Tensor):
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        return self.pg.broadcast([buf], opts)

    def _header(self, header: torch.Tensor) -> torch.Tensor:
        header = header.to(self.device)
        self._broadcast(header).wait()
        return header.cpu()

    def send(self, plan: SyncPlan, state: Mapping[str, torch.Tensor] | Iterable[Mapping[str, torch.Tensor]],
             copy: bool = False, delta: bool = False) -> int:
        """Rank 0: broadcast every bucket, up to INFLIGHT at once (packing the next meanwhile); the bytes
        sent. `state`: the whole state dict, or one mapping per bucket in plan order (a ZeRO-3 learner's
        gathered pieces, valid until the next is drawn: `copy=True` packs each into a buffer of its own).
        `delta`: send each bucket's change since the last push where that is fewer bytes (module docstring)."""
        assert self.rank == 0, "only rank 0 sends"
        with self._threads():
            return self._send(plan, state, copy, delta)

    def _send(self, plan: SyncPlan, state, copy: bool, delta: bool) -> int:
        pieces = itertools.repeat(state) if isinstance(state, Mapping) else iter(state)

        def packed():
            for bucket in plan.buckets:
                piece = next(pieces, None)
                if piece is None:
                    raise ValueError(f"weight sync: {len(plan.buckets)} buckets planned, fewer pieces given")
                yield pack(bucket, piece, self.device, view=not (copy or delta))

        if not delta:
            self._last = None
            self._header(torch.tensor([0] + [DENSE] * len(plan.buckets), dtype=torch.int64))
            return self._stream(packed())
        news = list(packed())  # this push's bytes, kept as the next push's base
        grains = [grain(b) for b in plan.buckets]
        if self._last is None or len(self._last) != len(news):  # the group's first push: whole
            payloads = [None] * len(news)
        else:
            payloads = [diff(old, new, g) for old, new, g in zip(self._last, news, grains)]
        self._header(torch.tensor([1] + [DENSE if p is None else p.numel() // (4 + g)
                                         for p, g in zip(payloads, grains)], dtype=torch.int64))
        sent = self._stream(new if p is None else p for new, p in zip(news, payloads))
        self._last = news
        return sent

    def _stream(self, bufs: Iterable[torch.Tensor]) -> int:
        sent, pending = 0, []
        for buf in bufs:
            if len(pending) == INFLIGHT:
                pending.pop(0).wait()
            pending.append(self._broadcast(buf))
            sent += buf.numel()
        for work in pending:
            work.wait()
        return sent

    def receive(self, plan: SyncPlan) -> Iterator[tuple[str, torch.Tensor]]:
        """Ranks > 0: (name, tensor) for every tensor of the plan, bucket by bucket as they arrive (up to
        INFLIGHT posted ahead), then each alias with its source's tensor; a bucket sent as its change is
        applied to this rank's last bytes of it first. `received` is then the bytes that came. A loader
        that reloads module by module (vLLM's `reload_weights`) must see the tied `lm_head.weight` too, or
        it restores the old values there."""
        with self._threads():  # the loader's copies run between the yields, on the same thread count
            yield from self._receive(plan)

    def _receive(self, plan: SyncPlan) -> Iterator[tuple[str, torch.Tensor]]:
        header = self._header(torch.empty(1 + len(plan.buckets), dtype=torch.int64)).tolist()
        delta, counts = bool(header[0]), header[1:]
        kept = self._kept if delta and self._kept is not None else [None] * len(plan.buckets)
        sources = {src for _, src in plan.aliases}
        tied, posted, todo, self.received = {}, [], list(enumerate(plan.buckets)), 0
        while todo or posted:
            while todo and len(posted) < INFLIGHT:
                i, bucket = todo.pop(0)
                g, k = grain(bucket), counts[i]
                if k != DENSE and kept[i] is None:
                    raise RuntimeError(f"weight sync: bucket {i} came as a change, and this rank holds no "
                                       "earlier push of it (it joined after the group's first push)")
                size = bucket.nbytes if k == DENSE else k * (4 + g)
                buf = torch.empty(size, dtype=torch.uint8, device=self.device)
                posted.append((i, bucket, buf, self._broadcast(buf)))
            i, bucket, buf, work = posted.pop(0)
            work.wait()
            self.received += buf.numel()
            if counts[i] == DENSE:
                kept[i] = buf
            else:
                apply(kept[i], buf, grain(bucket))
            for name, t in unpack(bucket, kept[i]):
                if name in sources:
                    tied[name] = t
                yield name, t
        self._kept = kept if delta else None  # the base of the next push's changes
        for alias, src in plan.aliases:
            yield alias, tied[src]
