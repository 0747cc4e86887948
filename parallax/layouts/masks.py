"""Structured ("Unseen") attention for the learner, built from the engine's execution records.

A row's tokens are grouped into *segments* (see :class:`parallax.contract.batch.ExecutionRecord`):
the prompt, each engine request's output, each forced tag. Segment s attends causally to itself
and to the earlier segments listed in ``segment_visible[s]``; tokens carry the position ids the
engine used. Everything here is derived from three padded tensors::

    position_ids     [B, L]    long   the engine's position of each token (0 on padding)
    segment_ids      [B, L]    long   segment of each token, -1 on padding
    segment_visible  [B, S, S] bool   [b, s, s'] = segment s attends to s' (diagonal True, s' <= s)

so a batch costs O(B·(L + S²)) memory until a micro-batch is scored; only then the attention
backend's own mask is materialised:

* :func:`sdpa_mask`: a dense 4-D mask [B, 1, L, L] for SDPA / eager attention (the CPU path),
  gathered from the segment matrix with tensor ops, no per-token Python loop;
  scored through :func:`block_sparse_sdpa` (query chunks against only their visible key columns),
  which keeps CPU step time near the causal kernel's (bench/bench_masks.py);
* :func:`flex_block_mask`: a FlexAttention ``BlockMask`` (GPU), whose ``mask_mod`` reads the
  segment tensors directly; it stores O((L/128)²) block indices, never an L×L tensor. Not on CPU:
  torch 2.13 runs FlexAttention there forward-only (backward raises NotImplementedError), and the
  compiled forward is 1.3x slower than block_sparse_sdpa at L=4096 on the tiny model
  (``bench/bench_masks.py flex``; the BlockMask is 16 KiB against the dense mask's 16 MiB).

Packed SFT rows (parallax/layouts/packing.py ``pack_sft_batch``) use the same tensors: each example is its
own segments, invisible to the other examples of its row.

Scoring must also know *which logits predict which token*: the first token of a branch is
predicted by the last token of the context its request saw (the shared prefix), not by the
row's previous column (the end of the sibling branch). :func:`predictor_index` gives that
index and :func:`structured_token_logprobs` gathers with it; for sequential rows both reduce
to ``parallax.layouts.logprobs.token_logprobs``.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from parallax.contract.batch import ExecutionRecord

__all__ = [
    "BLOCK_SPARSE",
    "additive_mask",
    "attention_mask_for",
    "block_sparse_sdpa",
    "check_record",
    "flex_block_mask",
    "pack_records",
    "predictor_index",
    "sdpa_mask",
    "structured_logprobs",
    "structured_token_logprobs",
    "token_visibility",
]

#: Attribute that marks a dense structured mask to be scored through :func:`block_sparse_sdpa`.
BLOCK_SPARSE = "_parallax_block_sparse"
QUERY_CHUNK = 256  # queries per SDPA call in block_sparse_sdpa
GATHER_BELOW = 0.8  # gather visible key columns when fewer than this share of the causal prefix is visible


def check_record(rec: ExecutionRecord) -> None:
    """Raise ``ValueError`` naming the first violated invariant of an execution record."""
    n = len(rec.segment_ids)
    if n == 0:
        raise ValueError("execution record is empty")
    if len(rec.position_ids) != n or len(rec.sampled) != n:
        raise ValueError(
            f"record lengths differ: segment_ids {n}, position_ids {len(rec.position_ids)}, "
            f"sampled {len(rec.sampled)}"
        )
    seg = torch.tensor(rec.segment_ids)
    steps = seg.diff()
    if int(seg[0]) != 0 or bool(((steps != 0) & (steps != 1)).any()):
        raise ValueError(
            "segment_ids must start at 0 and step by 0 or 1 (contiguous, non-decreasing segments)"
        )
    n_seg = int(seg[-1]) + 1
    if len(rec.segment_visible) != n_seg or len(rec.segment_request) != n_seg:
        raise ValueError(
            f"{n_seg} segments but segment_visible has {len(rec.segment_visible)} entries and "
            f"segment_request {len(rec.segment_request)}"
        )
    for s, vis in enumerate(rec.segment_visible):
        if any(not 0 <= v < s for v in vis):
            raise ValueError(
                f"segment {s} lists visible segments {vis}; only earlier segments (< {s}) are allowed"
            )
    if min(rec.position_ids) < 0:
        raise ValueError("position_ids must be >= 0")


def pack_records(
    records: Sequence[ExecutionRecord], width: int | None = None, validate: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``(position_ids [B, L], segment_ids [B, L], segment_visible [B, S, S])``.

    ``width`` pads to a given L (the batch's token width; it must cover every record).
    Python work is per row and per segment (list -> tensor), never per token pair.
    """
    if not records:
        raise ValueError("pack_records needs at least one record")
    if validate:
        for rec in records:
            check_record(rec)
    lengths = [len(r.segment_ids) for r in records]
    L = max(lengths) if width is None else width
    if max(lengths) > L:
        raise ValueError(f"a record has {max(lengths)} tokens, more than the batch width {L}")
    S = max(len(r.segment_visible) for r in records)
    B = len(records)
    pos = torch.zeros(B, L, dtype=torch.long)
    seg = torch.full((B, L), -1, dtype=torch.long)
    vis = torch.zeros(B, S, S, dtype=torch.bool)
    for b, rec in enumerate(records):
        pos[b, : lengths[b]] = torch.tensor(rec.position_ids, dtype=torch.long)
        seg[b, : lengths[b]] = torch.tensor(rec.segment_ids, dtype=torch.long)
        # One scatter per row: (s, s') pairs of the visibility lists.
        rows = [s for s, v in enumerate(rec.segment_visible) for _ in v]
        cols = [c for v in rec.segment_visible for c in v]
        vis[b, rows, cols] = True
    vis |= torch.eye(S, dtype=torch.bool)  # every segment sees itself (causally)
    return pos, seg, vis


def token_visibility(segment_ids: torch.Tensor, segment_visible: torch.Tensor) -> torch.Tensor:
    """[B, L, L] bool: query token i may attend key token j (segment rule AND causal, real tokens only).

    Padding queries attend to themselves only, so no softmax row is empty (SDPA would give NaN).
    Built per row from its runs of equal segment ids: one block fill per visible pair of runs, then
    an in-place lower triangle, so the cost is the mask's own bytes (no [L, L] index tensor).
    """
    B, L = segment_ids.shape
    out = torch.zeros(B, L, L, dtype=torch.bool, device=segment_ids.device)
    for b in range(B):  # per row and per pair of runs: never per token
        _fill_row(out[b], segment_ids[b], segment_visible[b])
    out.tril_()  # causal
    out.diagonal(dim1=1, dim2=2).fill_(True)  # pads see themselves (a real token sees itself already)
    return out


MAX_RUN_PAIRS = 4096  # above this many pairs of segment runs a row is gathered instead of block-filled


def _fill_row(out: torch.Tensor, seg: torch.Tensor, vis: torch.Tensor) -> None:
    """out [L, L] = segment rule of one row (before the causal cut; padding, id -1, sees nothing)."""
    ids, counts = torch.unique_consecutive(seg, return_counts=True)
    ends = counts.cumsum(0).tolist()
    starts = [0, *ends[:-1]]
    ids = ids.tolist()
    runs = [(i, a, e) for i, a, e in zip(ids, starts, ends) if i >= 0]
    if len(runs) ** 2 > MAX_RUN_PAIRS:  # many short runs: one gather over the row
        valid = seg >= 0
        s = seg.clamp(min=0)
        out.copy_(vis.index_select(0, s).index_select(1, s) & valid[:, None] & valid[None, :])
        return
    seen = vis.tolist()
    for i, a, e in runs:
        for j, c, f in runs:
            if c < e and seen[i][j]:  # keys before the run's end only (the causal cut removes the rest)
                out[a:e, c:f] = True


def sdpa_mask(segment_ids: torch.Tensor, segment_visible: torch.Tensor) -> torch.Tensor:
    """[B, 1, L, L] bool mask (True = attend) for SDPA; transformers passes a 4-D mask through as-is."""
    return token_visibility(segment_ids, segment_visible)[:, None]


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask as the additive float mask eager attention expects (0 keep, dtype min drop)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
        ~mask, torch.finfo(dtype).min
    )


def predictor_index(segment_ids: torch.Tensor, segment_visible: torch.Tensor) -> torch.Tensor:
    """[B, L] long: the token whose logits predict token t (-1 where nothing does, e.g. t = 0).

    Inside a segment it is t-1. The first token of segment s is predicted by the last token of
    the context its request saw: the last token of the highest visible earlier segment.
    """
    B, L = segment_ids.shape
    S = segment_visible.shape[-1]
    dev = segment_ids.device
    idx = torch.arange(L, device=dev).expand(B, L)
    seg = segment_ids.clamp(min=0)
    # Last token index of each segment: scatter_reduce(amax) of token indices by segment.
    last = torch.full((B, S), -1, dtype=torch.long, device=dev)
    last.scatter_reduce_(1, seg, torch.where(segment_ids >= 0, idx, -1), reduce="amax")
    strict = segment_visible & ~torch.eye(S, dtype=torch.bool, device=dev)  # [B, S, S] earlier segments only
    ctx_end = torch.where(strict, last[:, None, :], -1).amax(-1)  # [B, S]: last visible context token
    prev_seg = torch.cat([torch.full((B, 1), -2, device=dev, dtype=torch.long), segment_ids[:, :-1]], 1)
    first = segment_ids != prev_seg  # [B, L] first token of its segment
    pred = torch.where(first, ctx_end.gather(1, seg), idx - 1)
    return torch.where(segment_ids >= 0, pred, -1)


def structured_token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, predictor: torch.Tensor, temperature: float = 1.0,
    lse: torch.Tensor | None = None,
) -> torch.Tensor:
    """out[b, t] = log p(x_t | context) read at logits[b, predictor[b, t]]; 0 where predictor < 0.

    Shapes: logits [B, L, V], input_ids [B, L], predictor [B, L] -> [B, L] fp32. `lse`: the logits'
    `logsumexp_chunked`, when the caller has it.
    """
    from parallax.layouts.logprobs import picked_logprobs

    picked = picked_logprobs(logits, predictor.clamp(min=0), input_ids, temperature, lse)  # [B, L], chunked
    return torch.where(predictor >= 0, picked, torch.zeros_like(picked))


def flex_block_mask(
    segment_ids: torch.Tensor, segment_visible: torch.Tensor, block_size: int = 128, compile_mask: bool = True
):
    """FlexAttention ``BlockMask`` of the structured layout (same rule as :func:`token_visibility`).

    ``mask_mod`` indexes the segment tensors, so the mask is evaluated per 128×128 block and
    only block indices are stored: memory grows with the number of (partially) visible blocks,
    not L². Use with ``attn_implementation="flex_attention"``; the tensors must be on the device.
    """
    from torch.nn.attention.flex_attention import create_block_mask

    B, L = segment_ids.shape
    seg = segment_ids.clamp(min=0)
    valid = segment_ids >= 0

    def mask_mod(b, h, q, kv):
        seen = segment_visible[b, seg[b, q], seg[b, kv]] & valid[b, q] & valid[b, kv] & (kv <= q)
        return seen | (q == kv)

    return create_block_mask(
        mask_mod, B, None, L, L, device=segment_ids.device, BLOCK_SIZE=block_size, _compile=compile_mask
    )


def attention_mask_for(model, segment_ids: torch.Tensor, segment_visible: torch.Tensor):
    """The structured mask in the form the model's attention backend takes (4-D, passed through as-is).

    sdpa -> bool [B, 1, L, L]; eager -> additive float [B, 1, L, L]; flex_attention -> BlockMask.
    """
    config = getattr(model, "module", model).config  # a DeepSpeed engine wraps the HF model
    impl = getattr(config, "_attn_implementation", "sdpa") or "sdpa"
    if impl == "flex_attention":
        return flex_block_mask(segment_ids, segment_visible)
    dense = sdpa_mask(segment_ids, segment_visible)
    if impl == "sdpa":
        return dense
    if impl == "eager":
        return additive_mask(dense, getattr(model, "dtype", torch.float32))
    raise ValueError(
        f"structured attention needs attn_implementation sdpa, eager or flex_attention, got {impl!r}"
    )


def block_sparse_sdpa(
    module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """SDPA over query chunks, each against only the key columns some query of the chunk may see.

    A dense mask makes CPU SDPA compute every (query, key) block, about twice the causal kernel;
    cutting queries into chunks drops the keys after the chunk (causality) and the columns of
    sibling branches (structure), so the work tracks the visible blocks. Same result as SDPA with
    the full mask. query [B, H, L, D], key/value [B, Hkv, L, D], attention_mask [B, 1, L, L] bool.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_mask is None or attention_mask.dtype != torch.bool or query.shape[2] != key.shape[2]:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    gqa = query.shape[1] != key.shape[1]  # grouped K/V go in as they are (no repeat_kv copies)
    outs = []
    for a, b, cols, bias in _chunk_plan(attention_mask, query.dtype):
        k_c, v_c = key[:, :, :b], value[:, :, :b]  # views: free, already saved for backward
        if cols is not None:  # gathered copies cost memory: only when they save enough work
            k_c, v_c = k_c[:, :, cols], v_c[:, :, cols]
        outs.append(
            torch.nn.functional.scaled_dot_product_attention(
                query[:, :, a:b], k_c, v_c, attn_mask=bias, dropout_p=dropout, scale=scaling, enable_gqa=gqa
            )
        )
    return torch.cat(outs, 2).transpose(1, 2).contiguous(), None  # [B, L, H, D]


_PLAN: dict = {}  # the last mask's chunk plan: every layer of a forward passes the same mask


def _chunk_plan(mask: torch.Tensor, dtype: torch.dtype) -> list[tuple[int, int, torch.Tensor | None, torch.Tensor]]:
    """Per query chunk of a [B, 1, L, L] bool mask: (first query, end query, key columns to gather or
    None, the chunk's additive mask over those keys in `dtype`). Built once per mask object (a weak
    reference and its version say it is the same, unchanged tensor), not once per layer: SDPA would
    otherwise turn each chunk's bool mask into an additive one in every layer's forward and backward."""
    held = _PLAN.get("mask")
    if held is None or held() is not mask or _PLAN["version"] != mask._version or _PLAN["dtype"] != dtype:
        L, plan = mask.shape[2], []
        for a in range(0, L, QUERY_CHUNK):  # O(L / chunk) iterations: blocks, not tokens
            b = min(L, a + QUERY_CHUNK)
            sub = mask[:, :, a:b, :b]  # [B, 1, c, b]
            seen = sub.any(-2).flatten(0, 1).any(0)  # [b] keys some row/query of the chunk sees
            cols = seen.nonzero().squeeze(-1) if int(seen.sum()) < GATHER_BELOW * b else None
            if cols is not None:
                sub = sub[..., cols]
            plan.append((a, b, cols, additive_mask(sub, dtype)))
        _PLAN.update(mask=weakref.ref(mask), version=mask._version, dtype=dtype, plan=plan)
    return _PLAN["plan"]


_HF_SDPA: list = []  # transformers' own SDPA attention, once the router below took its place


def _sdpa_router(module, query, key, value, attention_mask, *args, **kwargs):
    """transformers' "sdpa" attention, except for a mask marked BLOCK_SPARSE: block_sparse_sdpa."""
    if attention_mask is not None and getattr(attention_mask, BLOCK_SPARSE, False):
        return block_sparse_sdpa(module, query, key, value, attention_mask, *args, **kwargs)
    return _HF_SDPA[0](module, query, key, value, attention_mask, *args, **kwargs)


def _route_sdpa() -> None:
    """Once per process: transformers' "sdpa" attention becomes `_sdpa_router`. The choice of kernel rides
    on the mask, never on a setting read at call time: gradient checkpointing recomputes each layer in
    backward, after `structured_logprobs` returned, and must take the path its forward took (a swapped
    config attribute, restored by then, sent the recompute through repeat_kv: other shapes, a
    CheckpointError). Every unmarked mask still goes to transformers' SDPA, unchanged."""
    if _HF_SDPA:
        return
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    _HF_SDPA.append(sdpa_attention_forward)
    AttentionInterface.register("sdpa", _sdpa_router)


def structured_logprobs(
    model,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    segment_ids: torch.Tensor,
    segment_visible: torch.Tensor,
    temperature: float = 1.0,
    block_sparse: bool = True,
    scored: torch.Tensor | None = None,
    entropy: bool = False,
):
    """Per-token logprobs [B, L] of rows scored under their structured layout (the learner's path).

    All tensors must be on the model's device. Column t holds log p(x_t | what its engine request
    saw); 0 where no logits predict it (the first token, padding). With `block_sparse` an sdpa
    model runs this forward through :func:`block_sparse_sdpa` (same values, less work). With
    `scored` ([B, L], nonzero on the tokens a loss reads) the model computes logits only from the
    first column that predicts a scored token (transformers' ``logits_to_keep``: the prompt's
    lm_head and log-softmax are skipped); the scored columns are unchanged, columns predicted
    before that are 0. `entropy`: also the entropy of the distribution that predicted each token
    ([B, L], no gradient; 0 where nothing predicts it), returned as (logprobs, entropy).
    """
    mask = attention_mask_for(model, segment_ids, segment_visible)
    config = getattr(model, "module", model).config
    if block_sparse and config._attn_implementation == "sdpa":
        _route_sdpa()
        setattr(mask, BLOCK_SPARSE, True)  # this mask's forward, and its recompute under checkpointing
    pred = predictor_index(segment_ids, segment_visible)  # [B, L]
    start = 0
    if scored is not None:
        used = pred[(scored != 0) & (pred >= 0)]
        start = int(used.min()) if used.numel() else 0
    logits = model(
        input_ids=input_ids, attention_mask=mask, position_ids=position_ids, logits_to_keep=input_ids.shape[1] - start
    ).logits  # [B, L - start, V]
    src = torch.where(pred >= start, pred - start, -1)  # [B, L] column of the kept logits predicting token t
    from parallax.layouts.logprobs import logsumexp_chunked

    lse, ent = logsumexp_chunked(logits, temperature, entropy=True) if entropy else (None, None)  # [B, L - start]
    logp = structured_token_logprobs(logits, input_ids, src, temperature, lse)
    if not entropy:
        return logp
    picked = ent.gather(1, src.clamp(min=0))  # [B, L]
    return logp, torch.where(src >= 0, picked, torch.zeros_like(picked))
