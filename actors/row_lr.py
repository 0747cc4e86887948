"""Some rows of the embedding matrices stepped at a multiple of the optimizer's learning rate.

A pretrained model meets the format tags (``<Parallel>``, ``<Path>``, ...) as new one-token rows
(parallax/models/prepare.py: the vocabulary's mean). AdamW moves each coordinate by at most about the learning
rate per step, so at an SFT learning rate of 1e-4 the tag rows barely move in a cold start: SmolLM2
keeps the tags at NLL ~6.6 after 80 steps while every other trace token reaches ~0
(docs/real_model.md). `learner.sft_tag_lr_mult` steps those rows at mult x the learning rate.

How: the rows are part of one embedding parameter (DeepSpeed flattens it into ZeRO partitions, so a
parameter group of their own is not possible without changing the model). AdamW's update is linear
in the learning rate for a fixed state (decoupled weight decay included), so amplifying the step the
optimizer just took on those rows, ``w <- w0 + mult * (w1 - w0)``, is exactly the step of a parameter
group at mult x lr; the moments do not depend on the learning rate. Under ZeRO-1/2 the optimizer's fp32
master rows live in each rank's partition: each rank amplifies its own fragment, then the (small) rows
are summed over the data-parallel group and written into the model's weights, which every rank holds
whole. ZeRO-3 partitions the model's weights too and is refused when the config is read.
"""

from __future__ import annotations

import torch

__all__ = ["RowLR"]


class RowLR:
    """`ids`' rows of `params` (each [V, d]) stepped at `mult` x lr: call `before()` just before the
    optimizer step and `after()` just after it, on every rank."""

    def __init__(self, params: list[torch.nn.Parameter], ids: list[int], mult: float):
        unique = {id(p): p for p in params}  # a tied input / output embedding is one parameter
        self.params, self.ids, self.mult = list(unique.values()), sorted(set(ids)), float(mult)
        rows = min(p.shape[0] for p in self.params) if self.params else 0
        bad = [i for i in self.ids if not 0 <= i < rows]
        if bad:
            raise ValueError(f"learner.sft_tag_lr_mult: token ids {bad} are outside the embedding's {rows} rows")
        self._saved: list[list] = []

    def _pieces(self, p: torch.nn.Parameter):
        """(row index in ids, first column, master values view) for each piece of the rows this rank steps:
        the whole rows of a plain parameter, or their overlap with this rank's ZeRO-1/2 fp32 fragment."""
        d = p.shape[1]
        if not hasattr(p, "_hp_mapping"):  # ZeRO-0 / no DeepSpeed optimizer: the weight is the master
            return [(k, 0, p.data[i]) for k, i in enumerate(self.ids)]
        frag = p._hp_mapping
        if frag is None:  # this rank holds no part of the parameter
            return []
        start, n = frag.lp_fragment_address.start, frag.lp_fragment_address.numel
        hp = frag.hp_fragment.view(-1)
        out = []
        for k, i in enumerate(self.ids):
            lo, hi = max(i * d, start), min((i + 1) * d, start + n)
            if lo < hi:
                out.append((k, lo - i * d, hp[lo - start:hi - start]))
        return out

    @torch.no_grad()
    def before(self) -> None:
        self._saved = [[(k, c, view, view.clone()) for k, c, view in self._pieces(p)] for p in self.params]

    @torch.no_grad()
    def after(self) -> None:
        for p, pieces in zip(self.params, self._saved, strict=True):
            for _, _, view, old in pieces:
                view.copy_(old + self.mult * (view - old))
            if not hasattr(p, "_hp_mapping"):
                continue  # the weight itself was stepped: nothing to copy back
            rows = torch.zeros(len(self.ids), p.shape[1], dtype=torch.float32, device=p.device)
            for k, c, view, _ in pieces:
                rows[k, c:c + view.numel()] = view.float()
            group = getattr(p, "_dp_group", None)
            if torch.distributed.is_initialized() and torch.distributed.get_world_size(group) > 1:
                torch.distributed.all_reduce(rows, group=group)  # each coordinate's master is on one rank
            p.data[self.ids] = rows.to(p.dtype)
        self._saved = []
