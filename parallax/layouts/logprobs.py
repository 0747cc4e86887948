"""Token logprobs and entropies from a model's logits, chunked: what the learner scores a row with.

One home for the fp32 log-softmax over the vocabulary, a chunk of positions at a time (the layouts read
it at each token's predicting column, `parallax.layouts.masks`; the learner and scoring actors on whole
rows, `actors.scoring`), with its own backward, so no [B, L, V] fp32 copy of the logits is ever held.
"""

from __future__ import annotations

import torch

# Positions per chunk of the fp32 log-softmax: the learner never holds an fp32 [B, L, V] copy of the
# logits (at Qwen3's 151,936-token vocabulary, micro-batch 4 and 4k tokens that copy is ~10 GB), only
# one [B, LOGIT_CHUNK, V] chunk at a time (bench/bench_learner_memory.py).
LOGIT_CHUNK = 512


def _chunk_lse(chunk: torch.Tensor, temperature: float, entropy: bool = False):
    x = chunk.float() / temperature  # [B, c, V]
    lse = x.logsumexp(-1)  # [B, c]
    if not entropy:
        return lse
    # H = -sum_v p_v log p_v with log p = x - lse, from the same fp32 chunk and lse (a log-softmax pass of its
    # own cost 60% more); not lse - sum p x, which cancels where the entropy is small
    logp = x.sub_(lse[..., None])
    return lse, -(logp.exp() * logp).sum(-1)


def logsumexp_chunked(logits: torch.Tensor, temperature: float = 1.0, chunk: int | None = None,
                      entropy: bool = False):
    """logsumexp(logits / T) over the vocabulary at every position, fp32, a chunk of positions at a
    time; no gradient (`picked_logprobs` owns the backward). Shapes: [B, L, V] -> [B, L]. With
    `entropy`, (lse, the entropy of softmax(logits / T)) from the same pass over each chunk."""
    chunk = chunk or LOGIT_CHUNK
    with torch.no_grad():
        parts = [_chunk_lse(logits[:, s:s + chunk], temperature, entropy) for s in range(0, logits.shape[1], chunk)]
    if not parts:
        empty = logits.new_zeros(logits.shape[:2], dtype=torch.float32)
        return (empty, empty.clone()) if entropy else empty
    if entropy:
        return torch.cat([p[0] for p in parts], 1), torch.cat([p[1] for p in parts], 1)
    return torch.cat(parts, 1)


def _picked(logits, rows, targets, temperature, lse):
    b = torch.arange(logits.shape[0], device=logits.device)[:, None]
    return logits[b, rows, targets].float() / temperature - lse.gather(1, rows)  # [B, T]


class _PickedLogprobs(torch.autograd.Function):
    """out[b, t] = logits[b, rows[b, t], targets[b, t]] / T - lse[b, rows[b, t]], whose backward writes
    the logits' gradient one chunk of positions at a time into one tensor of the logits' dtype:
    d out[b, t] / d logits[b, rows[b, t], v] = (1[v = targets[b, t]] - softmax(logits / T)[v]) / T.
    Alive at once: the logits, their gradient, one fp32 chunk (autograd's own slice-by-slice
    backward allocated a full-size gradient per chunk)."""

    @staticmethod
    def forward(ctx, logits, rows, targets, temperature, lse):
        ctx.save_for_backward(logits, rows, targets, lse)
        ctx.temperature = temperature
        return _picked(logits, rows, targets, temperature, lse)

    @staticmethod
    def backward(ctx, grad_out):
        logits, rows, targets, lse = ctx.saved_tensors
        temperature, chunk = ctx.temperature, LOGIT_CHUNK
        g = grad_out.float() / temperature  # [B, T]
        per_row = torch.zeros(lse.shape, dtype=torch.float32, device=g.device).scatter_add_(1, rows, g)  # [B, L]
        grad = torch.empty_like(logits)
        b_all = torch.arange(logits.shape[0], device=logits.device)[:, None].expand_as(rows)
        for s in range(0, logits.shape[1], chunk):
            e = min(s + chunk, logits.shape[1])
            probs = (logits[:, s:e].float() / temperature - lse[:, s:e, None]).exp_()  # softmax, [B, c, V]
            part = probs.mul_(per_row[:, s:e, None]).neg_()
            hit = (rows >= s) & (rows < e)  # the picked logits whose row is in this chunk
            part.index_put_((b_all[hit], rows[hit] - s, targets[hit]), g[hit], accumulate=True)
            grad[:, s:e] = part
        return grad, None, None, None, None


def picked_logprobs(logits: torch.Tensor, rows: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                    lse: torch.Tensor | None = None) -> torch.Tensor:
    """log softmax(logits / T)[b, rows[b, t], targets[b, t]] without a [B, L, V] log-softmax: the one
    logit picked, minus the chunked logsumexp of its row; the backward is chunked too
    (`_PickedLogprobs`). Shapes: logits [B, L, V], rows and targets [B, T] -> [B, T] fp32."""
    if lse is None:
        lse = logsumexp_chunked(logits, temperature)  # [B, L]
    if torch.is_grad_enabled() and logits.requires_grad:
        return _PickedLogprobs.apply(logits, rows, targets, temperature, lse)
    return _picked(logits, rows, targets, temperature, lse)


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0,
                   lse: torch.Tensor | None = None) -> torch.Tensor:
    """Log-probability of each token given its prefix, aligned to the token: out[:, j] = log p(x_j | x_<j).

    Position 0 has no prefix and gets 0. Shapes: logits [B, L, V], input_ids [B, L] -> [B, L]. `lse`: the
    rows' `logsumexp_chunked`, when the caller has it.
    """
    B, L = input_ids.shape
    rows = torch.arange(L - 1, device=logits.device).expand(B, L - 1)  # row j-1 predicts token j
    picked = picked_logprobs(logits, rows, input_ids[:, 1:], temperature, lse)  # [B, L-1]: the last row predicts none
    return torch.nn.functional.pad(picked, (1, 0))  # [B, L]


@torch.no_grad()
def logits_entropy(logits: torch.Tensor, temperature: float = 1.0, chunk: int = LOGIT_CHUNK) -> torch.Tensor:
    """Entropy (nats) of the sampling distribution softmax(logits / T) at every position; no gradient;
    a chunk of positions at a time (no fp32 [B, L, V] copy).

    Shapes: logits [B, L, V] -> [B, L] fp32.

    >>> round(float(logits_entropy(torch.zeros(1, 1, 4))[0, 0]), 4)  # uniform over 4: ln 4
    1.3863
    """
    return logsumexp_chunked(logits, temperature, chunk, entropy=True)[1]
