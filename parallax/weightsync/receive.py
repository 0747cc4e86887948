"""The engine side of weight sync: the learner's weights, applied to an engine's model.

Each engine says how its model takes weights (`load`, or the model itself); what arrives and how it
is checked is decided here, once for every engine:

* `receive`: the collective path. One broadcast over the group (`parallax.weightsync.sync_group`), the plan rebuilt
  from its wire form, every tensor handed to the engine's loader as its bucket arrives, each tied alias
  last with its source's tensor;
* `copy_into`: such a loader for a model in this process (the hf engine): each tensor copied into place;
* `load_state`: the object-store path into a model in this process;
* `state_file` / `load_state_file`: the object-store path into an engine whose workers are other
  processes (vLLM: `collective_rpc` carries plain values only), through a safetensors file in /dev/shm.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from parallax.weightsync.plan import SyncPlan, aliases, plan_from_wire

if TYPE_CHECKING:
    from parallax.weightsync.sync_group import SyncGroup

Weights = Iterator[tuple[str, torch.Tensor]]  # (name, tensor), in the checkpoint's own names


def receive(group: SyncGroup, wire: dict, load: Callable[[Weights, SyncPlan], None]) -> int:
    """Receive one broadcast of the learner's weights (`wire`: the plan, as `plan_to_wire` gave it) and
    hand it to `load(weights, plan)`; the bytes received (every bucket of the plan arrived, whole or as
    its change since the last push, or it raised)."""
    plan = plan_from_wire(wire)
    load(group.receive(plan), plan)
    return group.received


def copy_into(params: dict[str, torch.Tensor], weights: Weights, plan: SyncPlan) -> None:
    """Copy every received tensor into `params` (a model's state dict: its own storage), refusing a name
    the model does not have and a parameter the learner did not send."""
    tied, got = {alias for alias, _ in plan.aliases}, set()
    for name, t in weights:
        if name not in params:
            raise ValueError(f"weight sync: the learner sent {name!r}, which this model does not have")
        if name not in tied:  # a tied alias is its source's tensor: already in place
            params[name].copy_(t)
        got.add(name)
    missing = sorted(set(params) - got)
    if missing:
        raise ValueError(f"weight sync: the learner sent no {missing[:5]}")


def bind_into(model: torch.nn.Module, weights: Weights, plan: SyncPlan) -> None:
    """Point every received parameter of `model` at its tensor (no copy: the hand-off's shared buffers on
    CPU, which the sender writes every other push, `parallax.weightsync.handoff`); a buffer (not a
    parameter) is copied into place. Refuses what `copy_into` refuses, and a tensor of another shape or
    dtype than its parameter's, before any parameter moves."""
    params = dict(model.named_parameters(remove_duplicate=False))  # a tied weight under each of its names
    state = model.state_dict()
    got: dict[str, torch.Tensor] = {}
    for name, t in weights:
        if name not in state:
            raise ValueError(f"weight sync: the learner sent {name!r}, which this model does not have")
        if name in params and (t.shape != params[name].shape or t.dtype != params[name].dtype):
            raise ValueError(f"weight sync: {name} came as {t.dtype}{tuple(t.shape)}, the model holds "
                             f"{params[name].dtype}{tuple(params[name].shape)}")
        got[name] = t
    missing = sorted(set(state) - set(got))
    if missing:
        raise ValueError(f"weight sync: the learner sent no {missing[:5]}")
    for name, t in got.items():
        if name in params:
            params[name].data = t
        else:
            state[name].copy_(t)


def own_parameters(model: torch.nn.Module) -> None:
    """Give `model` parameters of its own memory again (after `bind_into`), before anything writes into
    them in place: the buffers they were bound to belong to the sender."""
    for p in model.parameters():
        p.data = p.data.clone()


def load_state(model: torch.nn.Module, state_dict: dict[str, Any]) -> int:
    """The object-store path: the learner's state dict into `model`; its bytes."""
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    # Tied embeddings may be absent from the learner's dict; anything else is a bug.
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise ValueError(f"weight sync mismatch: missing={missing[:5]} unexpected={unexpected[:5]}")
    return sum(v.numel() * v.element_size() for v in state_dict.values())


@contextmanager
def state_file(state_dict: dict[str, torch.Tensor]) -> Iterator[str]:
    """The path of a safetensors file holding `state_dict` (in /dev/shm where there is one), removed on exit.

    Every name, a tied one included (vLLM's reload restores any module it is not given); safetensors
    refuses shared storage, so an alias goes as a copy."""
    import tempfile
    from pathlib import Path

    from safetensors.torch import save_file

    tied = aliases(state_dict)
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=shm, prefix="parallax_sync_") as d:
        path = str(Path(d) / "weights.safetensors")
        save_file({k: v.detach().clone() if k in tied else v.detach().contiguous()
                   for k, v in state_dict.items()}, path)
        yield path


def load_state_file(path: str, device: str, load: Callable[[Weights], None]) -> int:
    """A `state_file` read onto `device` and handed to `load`; its bytes."""
    from safetensors.torch import load_file

    state = load_file(path, device=device)
    load(iter(state.items()))
    return sum(t.numel() * t.element_size() for t in state.values())
