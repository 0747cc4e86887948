"""Layouts by name: the train and SFT batch builders of each, resolved once at setup."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from parallax.contract.batch import SFTBatch, TrainBatch, Trajectory
from parallax.layouts.causal import causal_train_batch, sft_batch
from parallax.layouts.structured import structured_sft_batch, structured_train_batch
from parallax.layouts.threadweaver import threadweaver_train_batch

LAYOUTS = ("causal", "structured", "threadweaver")


@dataclass(frozen=True)
class Layout:
    """What a training step calls: `train_batch(trajs, pad_id)` (each trajectory carrying its advantage),
    `sft_batch(problems, trace, tokenizer)`."""

    name: str
    train_batch: Callable[[list[Trajectory], int], TrainBatch]
    sft_batch: Callable[..., SFTBatch]


def get_layout(name: str, reprefill: bool = False) -> Layout:
    """The layout `name`; `reprefill`: rollouts come from the request executor (dispatch requests), so
    structured SFT trains its copies layout too. Threadweaver trains SFT causally (one request)."""
    if name == "causal":
        return Layout(name, causal_train_batch, sft_batch)
    if name == "structured":
        return Layout(name, structured_train_batch, partial(structured_sft_batch, mode="executed",
                                                           reprefill=reprefill))
    if name == "threadweaver":
        return Layout(name, threadweaver_train_batch, sft_batch)
    raise ValueError(f"unknown learner layout {name!r}; valid: {LAYOUTS}")


def build_train_batch(layout: str, trajs: list[Trajectory], pad_id: int) -> TrainBatch:
    """The learner batch of one layout by name (tests and benches; the trainer resolves it once)."""
    return get_layout(layout).train_batch(trajs, pad_id)
