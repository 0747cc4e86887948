"""The learner's forward: token logprobs of a batch (causal, structured or packed rows) under a sampling
temperature, and the completion-only SFT loss over micro-batches. Pure functions of a model and a batch:
the worker (actors/learner.py) calls them under DeepSpeed, tests and benchmarks call them on a plain model."""

from __future__ import annotations

import torch

from parallax.contract.batch import SFTBatch
from parallax.contract.learner_config import LearnerConfig
from parallax.layouts import logprobs as chunked


def score_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float,
                   structure: tuple | None, device, scored: torch.Tensor | None = None, entropy: bool = False):
    """[b, L] token logprobs; `structure` = (position_ids, segment_ids, segment_visible) of a
    structured or packed batch (see parallax/layouts/masks.py), or None / all-None for plain causal rows.

    `scored` ([b, L], the loss mask): logits are computed only from the column before the first
    scored token on (``logits_to_keep``), as TRL does for completions: a prompt's lm_head and
    log-softmax rows are never built. Scored columns are unchanged; earlier ones are 0.
    `entropy`: also the entropy of the distribution that predicted each token ([b, L], no gradient),
    returned as (logprobs, entropy)."""
    if structure is not None and structure[0] is not None:
        from parallax.layouts.masks import structured_logprobs

        pos, seg, vis = (t.to(device) for t in structure)
        return structured_logprobs(model, input_ids.to(device), pos, seg, vis, temperature,
                                   scored=None if scored is None else scored.to(device), entropy=entropy)
    L = input_ids.shape[1]
    cols = (scored != 0).any(0).nonzero() if scored is not None else None
    first = max(1, int(cols[0])) if cols is not None and len(cols) else 1
    keep = L - first + 1  # logits of columns first-1 .. L-1 predict tokens first .. L-1
    logits = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                   logits_to_keep=keep).logits  # [b, keep, V]
    lse, ent = chunked.logsumexp_chunked(logits, temperature, entropy=True) if entropy else (None, None)
    logp = chunked.token_logprobs(logits, input_ids[:, L - keep:].to(device), temperature, lse)  # [b, keep]
    logp = torch.nn.functional.pad(logp, (L - keep, 0))  # [b, L]
    if not entropy:
        return logp
    # ent[:, :-1]: the kept columns' distributions, predicting tokens first .. L-1
    return logp, torch.nn.functional.pad(ent[:, :-1], (L - keep + 1, 0))  # [b, L]


def sft_micro_batches(batch: SFTBatch, cfg: LearnerConfig) -> list[SFTBatch]:
    """Micro-batches of `micro_batch_size` examples, each packed into rows when `cfg.sft_packing`
    (packing within a micro-batch keeps its examples, so its memory never grows with packing)."""
    micro = batch.split(cfg.micro_batch_size)
    if not cfg.sft_packing:
        return micro
    from parallax.layouts.packing import pack_sft_batch

    return [pack_sft_batch(mb, cfg.sft_pack_length) for mb in micro]


def sft_loss(model, mb: SFTBatch, global_tokens: int, world: int = 1, device="cpu") -> torch.Tensor:
    """Completion-only cross-entropy summed over the micro-batch's loss tokens / the global count.

    Times `world`: DeepSpeed averages gradients over ranks, so the update is the token mean over
    the whole batch whatever the split into ranks, micro-batches or packed rows.
    """
    logp = score_logprobs(model, mb.input_ids, mb.attention_mask, 1.0, mb.structure(), device,
                          scored=mb.loss_mask)  # [b, L]
    return -(logp * mb.loss_mask.to(device)).sum() / global_tokens * world
