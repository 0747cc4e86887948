"""What one weight sync sends: the tensors' names, dtypes and shapes in buckets, and the tied aliases.

A bucket is one flat uint8 buffer holding several tensors back to back, so a sync is a few large
broadcasts rather than hundreds of small ones; a tied tensor (lm_head = embed_tokens) is sent once,
and the receiver re-creates it under its second name. The plan is made once from the learner's
weights (`plan_named`, from metadata alone) and sent to every receiver in wire form (plain values:
what vLLM's RPC serialiser carries), which rebuilds views into the buffers it receives (`unpack`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import torch


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


def plan_named(named: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int, dtype: str | None = None) -> SyncPlan:
    """The plan of a module's own tensors, from metadata alone (no gather): a tensor object under a
    second name is an alias (a tied weight), and a ZeRO-3 parameter's shape is its full `ds_shape`.
    With `dtype` (the engines' weight dtype), every floating-point tensor goes in it: `pack` casts, and
    a bf16 engine receives half an fp32 learner's bytes."""
    first: dict[int, str] = {}
    metas, tied = [], []
    for name, t in named:
        if id(t) in first:
            tied.append((name, first[id(t)]))
            continue
        first[id(t)] = name
        shape = tuple(getattr(t, "ds_shape", t.shape))  # a partitioned ZeRO-3 parameter's own shape is empty
        wire = dtype if dtype is not None and t.is_floating_point() else str(t.dtype).removeprefix("torch.")
        metas.append(TensorMeta(name, wire, shape))
    return SyncPlan(tuple(plan_buckets(metas, bucket_bytes)), tuple(tied))


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


def pack(bucket: Bucket, state: Mapping[str, torch.Tensor], device: str = "cpu", view: bool = True,
         out: torch.Tensor | None = None) -> torch.Tensor:
    """The bucket's tensors, bytes back to back, in one uint8 buffer on `device` (with `view`, a view of
    their own memory when they already lie so; the sender only reads it); `out`: into that buffer."""
    view = _in_place(bucket, state, device) if view and out is None else None
    if view is not None:
        return view
    if out is not None and out.numel() != bucket.nbytes:
        raise ValueError(f"weight sync: a buffer of {out.numel()} bytes for a bucket of {bucket.nbytes}")
    buf = out if out is not None else torch.empty(bucket.nbytes, dtype=torch.uint8, device=device)
    off = 0
    for m in bucket.tensors:
        t = state[m.name]
        want = getattr(torch, m.dtype)
        if tuple(t.shape) != m.shape or (t.dtype != want and not (t.is_floating_point() and want.is_floating_point)):
            raise ValueError(f"weight sync: {m.name} is {t.dtype}{tuple(t.shape)}, the plan says {m.dtype}{m.shape}")
        # a floating tensor in the plan's dtype (the engines'): cast into its place in the buffer
        buf[off:off + m.nbytes].view(want).copy_(t.detach().reshape(-1))
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

