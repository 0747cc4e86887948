"""The weight-sync plan of a whole state dict, read from its tensors: the reference the learner's plan is
checked against where the state at hand is a state dict (`Module.state_dict()`, or a gathered one through
Ray), whose tied weights are one storage under two tensor objects. The learner itself plans from its
module's own tensors, by metadata alone (`parallax.weightsync.plan.plan_named`); on a dict whose tied names hold one
tensor object the two give the same plan."""

from __future__ import annotations

import torch

from parallax.weightsync.plan import SyncPlan, TensorMeta, aliases, plan_buckets


def plan_for(state: dict[str, torch.Tensor], bucket_bytes: int) -> SyncPlan:
    """Every tensor of `state` in order, in buckets of at most `bucket_bytes`, an alias (a tensor on the
    storage of an earlier one) named once as such."""
    tied = aliases(state)
    metas = [TensorMeta(k, str(v.dtype).removeprefix("torch."), tuple(v.shape)) for k, v in state.items()
             if k not in tied]
    return SyncPlan(tuple(plan_buckets(metas, bucket_bytes)), tuple(tied.items()))
