"""The causal layout: one row per trajectory, plain causal attention, positions 0..L-1.

The "Seen" variant, and exact for plain decoding and the executor's sequential mode. SFT examples
are prompt + teacher trace + EOS with a completion-only loss.
"""

from __future__ import annotations

from parallax.contract.batch import SFTBatch, TrainBatch, Trajectory, advantage_of
from parallax.layouts.pad import padded_sft_batch, padded_train_batch
from parallax.layouts.records import record_of


def sft_batch(problems: list, trace: str, tokenizer) -> SFTBatch:
    """Prompt + teacher trace + EOS; the loss covers the trace and EOS only (completion-only)."""
    prompts = tokenizer([p.prompt for p in problems], add_special_tokens=False)["input_ids"]
    targets = tokenizer([p.traces[trace] for p in problems], add_special_tokens=False)["input_ids"]
    rows = [p + t + [tokenizer.eos_token_id] for p, t in zip(prompts, targets)]
    loss = [[0.0] * len(p) + [1.0] * (len(t) + 1) for p, t in zip(prompts, targets)]
    return padded_sft_batch(rows, loss, tokenizer.pad_token_id)


def train_batch(trajs: list[Trajectory], pad_id: int) -> TrainBatch:
    """Right-padded prompt+response rows with the engine's logprobs and each sample's advantage broadcast.

    Response token j of a row sits at column len(prompt) + j; `old_logprobs` and the learner's
    `token_logprobs` use the same alignment (column = the token being scored).
    """
    rows = [t.prompt_ids + t.response_ids for t in trajs]
    # Only sampled tokens are trained on: tags an executor forced carry no sampling logprob.
    resp = [[0.0] * len(t.prompt_ids) + ([1.0] * len(t.response_ids) if t.record is None else
                                         [float(x) for x in t.record.sampled[len(t.prompt_ids):]]) for t in trajs]
    old = [[0.0] * len(t.prompt_ids) + list(t.logprobs) for t in trajs]
    adv = [[0.0] * len(t.prompt_ids) + [advantage_of(t)] * len(t.response_ids) for t in trajs]
    return padded_train_batch(rows, resp, old, adv, pad_id)


def causal_train_batch(trajs: list[Trajectory], pad_id: int) -> TrainBatch:
    """`train_batch`, refusing a request executor's forked record (it has no causal row)."""
    for t in trajs:
        record_of(t, "causal")
    return train_batch(trajs, pad_id)
