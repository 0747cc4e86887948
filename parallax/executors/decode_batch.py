"""Lock-step decoding of many sequences over one left-padded KV cache, with cheap regrouping.

Each sequence of the batch is one engine request (`RequestState`): a KV history (one column per token it has
seen, in text order), the position id of its next token and the token to feed next. `DecodeBatch.step` feeds one token
per sequence and returns the next-token logits of every sequence. Sequences join and leave the batch only at
fork / join / finish events; `DecodeBatch.regroup` then rebuilds the padded cache once for the
whole new set of sequences, so the steady state is plain batched decoding (`parallax.engines.decode_kv`: no
per-step cache copies).

Why per-sequence histories are enough for parallel execution: a branch sequence's history is the parent's
history (the shared prefix, copied) and the continuation after a join is the parent's history
followed by every branch's own columns, concatenated along time. Keys are cached after RoPE, so
concatenating keeps what each branch computed, in its own context and at its own positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from parallax.engines.decode_kv import KVDecoder
from parallax.engines.sampling import left_pad

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: K, V [Hkv, n, D]


@dataclass
class RequestState:
    """What the batch needs to know about a sequence; the executor's sequence object subclasses it."""

    feed: int  # token to feed at the next step (emitted, not yet in the cache)
    pos: int  # position id of `feed`
    length: int = 0  # real KV columns of this sequence
    kv: KV | None = None  # the sequence's history while it is outside the batch (None: in the batch)
    live: bool = True  # False: finished or waiting; the batch decodes a pad for it until regroup


class DecodeBatch:
    """The batch of sequences currently decoding, and its padded cache."""

    def __init__(self, model, pad_id: int):
        self.model = model
        self.pad_id = pad_id
        self.device = next(model.parameters()).device
        self.seqs: list[RequestState] = []
        self.decoder = KVDecoder(model)  # the padded cache, [R, Hkv, W, D] per layer, and its mask
        self.shapes: list[tuple[int, int, bool]] = []  # per step: sequences, cache width, padded (bench/)

    @torch.no_grad()
    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        """Run the prompts (left padded); returns last-position logits [B, V]."""
        ids, mask = left_pad(prompts, self.pad_id)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, P] positions ignore left padding
        return self.decoder.prefill(ids.to(self.device), mask.to(self.device), pos.to(self.device))

    def adopt(self, seqs: list[RequestState]) -> None:
        """Sequences of the prefilled batch, in prompt order."""
        self.seqs = list(seqs)

    @torch.no_grad()
    def step(self) -> torch.Tensor:
        """Feed every sequence's `feed` token at its `pos`; returns next-token logits [R, V]."""
        feed = [r.feed if r.live else self.pad_id for r in self.seqs]
        ids = torch.tensor(feed, dtype=torch.long, device=self.device)[:, None]  # [R, 1]
        pos = torch.tensor([r.pos for r in self.seqs], dtype=torch.long, device=self.device)[:, None]
        self.shapes.append((len(self.seqs), self.decoder.width, self.decoder.padded))
        logits = self.decoder.step(ids, pos)
        for r in self.seqs:
            if r.live:
                r.length += 1
                r.pos += 1
        return logits

    def history(self, seq: RequestState) -> KV:
        """A sequence's KV history (copied out of the batch if it is there)."""
        if seq.kv is not None:
            return seq.kv
        b = next(i for i, r in enumerate(self.seqs) if r is seq)
        n = seq.length
        return [(layer.keys[b, :, -n:, :].clone(), layer.values[b, :, -n:, :].clone())
                for layer in self.decoder.layers]

    def regroup(self, seqs: list[RequestState]) -> None:
        """Make `seqs` the batch. Sequences already in the batch keep their cache; others bring `kv`."""
        where = {id(r): b for b, r in enumerate(self.seqs)}
        hist = [r.kv if r.kv is not None else self._slice(where[id(r)], r.length) for r in seqs]
        width = max(r.length for r in seqs)
        R = len(seqs)
        layers = []
        for li in range(len(hist[0])):
            k0 = hist[0][li][0]
            K = k0.new_zeros((R, k0.shape[0], width + self.decoder.spare, k0.shape[2]))  # [R, Hkv, W + s, D]
            V = torch.zeros_like(K)
            for b, (r, h) in enumerate(zip(seqs, hist)):
                K[b, :, width - r.length:width, :] = h[li][0]
                V[b, :, width - r.length:width, :] = h[li][1]
            layers.append((K, V))
        mask = torch.zeros((R, width), dtype=torch.long, device=self.device)
        for b, r in enumerate(seqs):
            mask[b, width - r.length:] = 1
            r.kv = None
        self.decoder.load(layers, mask)  # the buffers themselves: one copy per regroup
        self.seqs = list(seqs)

    def _slice(self, b: int, n: int) -> KV:
        # Views into the old cache are fine: the new cache is built by copying them.
        return [(layer.keys[b, :, -n:, :], layer.values[b, :, -n:, :]) for layer in self.decoder.layers]
