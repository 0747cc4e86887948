"""SFT packing: several examples per row, each attending only to itself (segment masks).

`pack_bins` chooses the rows (first-fit decreasing or evenly dealt, whichever pads less);
`pack_sft_batch` builds them with the layout tensors of `parallax/layouts/masks.py`.
"""

from __future__ import annotations

import torch

from parallax.contract.batch import SFTBatch


def pack_bins(lengths: list[int], capacity: int) -> list[list[int]]:
    """Item indices grouped into rows whose lengths sum to at most `capacity`; deterministic.

    First-fit decreasing gives the fewest rows it can; the same items dealt again, longest first,
    each to the emptiest of that many rows (ties: the first; one more row while a row overflows),
    give even rows. Every row is padded to the widest, so the layout with fewer cells (rows x
    widest row) wins, FFD on a tie. An item longer than `capacity` gets a row of its own (first),
    never truncated. Items keep decreasing-length order within a row.

    >>> pack_bins([3, 5, 2, 4], 6)  # FFD: 5 | 4 + 2 | 3 (3 x 6 cells); dealt: 5 | 4 | 3 + 2 (3 x 5)
    [[1], [3], [0, 2]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable: ties by index
    fits = [i for i in order if lengths[i] <= capacity]
    ffd: list[list[int]] = []
    room: list[int] = []
    for i in fits:
        k = next((k for k, r in enumerate(room) if lengths[i] <= r), len(ffd))
        if k == len(ffd):
            ffd.append([])
            room.append(capacity)
        ffd[k].append(i)
        room[k] -= lengths[i]
    for n_rows in range(len(ffd), len(fits) + 1):  # one item per row always fits
        dealt: list[list[int]] = [[] for _ in range(n_rows)]
        fill = [0] * n_rows
        for i in fits:
            k = fill.index(min(fill))
            dealt[k].append(i)
            fill[k] += lengths[i]
        if not fill or max(fill) <= capacity:
            break

    def cells(rows: list[list[int]]) -> int:
        return len(rows) * max((sum(lengths[i] for i in r) for r in rows), default=0)

    rows = dealt if cells(dealt) < cells(ffd) else ffd
    return [[i] for i in order if lengths[i] > capacity] + rows


def pack_sft_batch(batch: SFTBatch, pack_length: int) -> SFTBatch:
    """The examples of a right-padded SFT batch concatenated into rows of at most `pack_length` tokens.

    Each example keeps exactly the attention it had alone: it becomes its own segments of the row
    (one segment for a causal example; a structured example's segments, renumbered after those of
    the examples before it), no segment of another example sees them, and its position ids are
    its own (0.. for a causal example). The loss mask moves with the tokens, so the completion
    token count and the token-sum loss are unchanged. Rows are padded to the longest packed row.
    The result always carries the layout tensors (see parallax/layouts/masks.py), so it is scored with the
    segment mask: block-diagonal causal attention for causal examples.
    """
    lengths = batch.attention_mask.sum(-1).tolist()  # real tokens are a prefix of each row
    pos, seg, vis = batch.structure()
    if seg is None:  # causal examples: one segment, positions 0..n-1
        B, L = batch.input_ids.shape
        pos = torch.arange(L).expand(B, L)
        seg = torch.where(batch.attention_mask.bool(), 0, -1)
        vis = torch.ones(B, 1, 1, dtype=torch.bool)
    n_seg = (seg.amax(-1) + 1).tolist()  # segments of each example
    bins = pack_bins(lengths, pack_length)
    R, width = len(bins), max(sum(lengths[i] for i in b) for b in bins)
    S = max(sum(n_seg[i] for i in b) for b in bins)
    ids = torch.zeros(R, width, dtype=batch.input_ids.dtype)  # padding ids are never seen nor scored
    loss = torch.zeros(R, width, dtype=batch.loss_mask.dtype)
    pos_out = torch.zeros(R, width, dtype=torch.long)
    seg_out = torch.full((R, width), -1, dtype=torch.long)
    vis_out = torch.zeros(R, S, S, dtype=torch.bool)  # block diagonal: one block per example
    for r, members in enumerate(bins):  # Python work per example, never per token
        at, s0 = 0, 0
        for i in members:
            n, k = lengths[i], n_seg[i]
            ids[r, at : at + n] = batch.input_ids[i, :n]
            loss[r, at : at + n] = batch.loss_mask[i, :n]
            pos_out[r, at : at + n] = pos[i, :n]
            seg_out[r, at : at + n] = seg[i, :n] + s0
            vis_out[r, s0 : s0 + k, s0 : s0 + k] = vis[i, :k, :k]
            at, s0 = at + n, s0 + k
    return SFTBatch(ids, (seg_out >= 0).long(), loss, pos_out, seg_out, vis_out)
