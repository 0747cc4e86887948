"""Sampling helpers every decode loop shares: padding, top-p, and the speculative grammar draw.

`grammar_draw` is the one place a grammar meets a draw (the hf engine's `generate` and the KV
executor both call it; why drawing first is exact: `parallax/engines/constrained.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Draw = Callable[[list[int], torch.Tensor], torch.Tensor]  # (row indices, logits [R, V]) -> tokens [R]


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask of left-padded prompts: [B, P] long each."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p):] = 1
    return ids, mask  # [B, P], [B, P]


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask tokens outside the smallest set whose probability mass reaches top_p."""
    sorted_logits, idx = logits.sort(dim=-1, descending=True)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    drop = cum - sorted_logits.softmax(-1) >= top_p  # keep the token that crosses top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, idx, sorted_logits)


SAMPLERS = ("multinomial", "inverse_cdf")


def draw(probs: torch.Tensor, gen: torch.Generator, sampler: str = "multinomial") -> torch.Tensor:
    """[R] tokens (CPU), one from each row of `probs` [R, V] (non-negative, each row's sum > 0), by
    `SamplingParams.sampler`:

    * multinomial: torch's, which races one exponential draw per vocabulary entry (its CPU cost: 14 ms a
      step for 16 rows of SmolLM2's 49,152 entries, a quarter of the decode step);
    * inverse_cdf: one uniform draw per row against the row's cumulative sum in float64 (under 1 ms there).

    Both draw each token with its probability exactly; from one seed they draw different tokens.

    >>> g = torch.Generator().manual_seed(0)
    >>> draw(torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]]), g, "inverse_cdf").tolist()
    [1, 2]
    """
    probs = probs.cpu()
    if sampler == "multinomial":
        return torch.multinomial(probs, 1, generator=gen).squeeze(-1)
    if sampler != "inverse_cdf":
        raise ValueError(f"unknown sampler {sampler!r}; valid: {', '.join(SAMPLERS)}")
    cdf = probs.double().cumsum(-1)  # [R, V]
    total = cdf[:, -1:]
    u = torch.rand(probs.shape[0], 1, generator=gen, dtype=torch.float64) * total  # [R, 1]
    u = torch.minimum(u, total.nextafter(torch.zeros_like(total)))  # below the total, even where the product rounds up
    # the first entry whose cumulative sum exceeds u: never one of probability 0 (its sum equals the one before)
    return torch.searchsorted(cdf, u, right=True).squeeze(-1)


def sample(x: torch.Tensor, greedy: bool, gen: torch.Generator, sampler: str = "multinomial") -> torch.Tensor:
    """[R] tokens (CPU) drawn from logits x [R, V] (`draw`), or their argmax."""
    if greedy:
        return x.argmax(-1).cpu()
    return draw(x.softmax(-1), gen, sampler)


def grammar_draw(x: torch.Tensor, states: Sequence, masker, draw: Draw, speculate: bool) -> torch.Tensor:
    """[S] tokens for logits x [S, V], each row constrained by its grammar state (None: free).

    speculate: draw unmasked, `masker.check` each constrained draw, and mask + redraw only the rows
    it refused -- the masked distribution exactly, provided `draw` commutes with the mask (no top-p,
    a processor that declares it). Otherwise every constrained row is masked before the draw.
    `x` is not changed. A checked draw stays accepted provisionally (`GrammarMasker.check`).
    """
    g = [i for i, st in enumerate(states) if st is not None]
    if g and not speculate:
        x = x.clone()
        sub = x[g]
        masker.mask(sub, [states[i] for i in g])
        x[g] = sub
        g = []
    tok = draw(list(range(x.shape[0])), x)  # [S]
    refused = [i for i in g if not masker.check(states[i], int(tok[i]))]
    if refused:
        sub = x[refused]
        masker.mask(sub, [states[i] for i in refused])
        # `check` may refuse a valid token it cannot judge alone: keep the draw if the mask does.
        redo = [j for j, i in enumerate(refused) if not torch.isfinite(sub[j, int(tok[i])])]
        if redo:
            tok = tok.clone()
            tok[[refused[j] for j in redo]] = draw([refused[j] for j in redo], sub[redo])
    return tok
