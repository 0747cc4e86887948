"""The interface every rollout backend implements, and the table that names the backends.

An engine turns token-id prompts into completions with per-token sampling logprobs. The
rollout worker builds one by name at setup (`rollout.engine`), so nothing downstream branches
on the backend. The table maps a name to "module:Class" and is resolved with importlib, so a
backend imports this module, never the other way round.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from parallax.contract.batch import Completion, SamplingParams

#: Engine name -> "module:Class". Tests and plugins may add entries (a name must be new).
ENGINES: dict[str, str] = {
    "hf": "parallax.engines.hf:HFEngine",
    "vllm": "parallax.engines.vllm:VLLMEngine",
}


class Engine(Protocol):
    """What the rollout worker and the request executor use of an engine.

    An engine that also takes requests one by one (vLLM) says `streams = True` and has `submit`, `poll`
    and `abort`, which the request executor's async driver uses (`parallax/executors/requests.py`, `_run_async`)."""

    tokenizer: Any  # the model's Hugging Face tokenizer (tags are single tokens)
    eos_id: int
    stop_ids: frozenset[int]  # every id the engine itself stops on (EOS and the generation config's)

    def generate(self, prompts: list[list[int]], params: SamplingParams, limits: list[int] | None = None,
                 grammar: str | list[str | None] | None = None, processor=None) -> list[Completion]:
        """One completion per prompt, in order. A completion that ends on a stop token keeps it in
        `token_ids`; logprobs are the model's at temperature T (`logits / T`).

        limits: each prompt's own max new tokens (the request executor's caps), <= params'.
        grammar: an EBNF grammar (`parallax.formats.ebnf`) for every prompt, or one per prompt (None: free),
            applied as the engine's structured outputs (vLLM) or a token bitmask (hf).
        processor: (tokens each row generated so far, logits / T [B, V]) -> the logits a token is
            drawn from; test doubles only (`tests/doubles/replay.py`), the hf engine alone takes one.
        """

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        """Replace the model weights (the learner's, after an update; the object-store path)."""

    sync_ranks: int  # ranks the engine holds in the collective weight-sync group (its workers)

    def open_sync(self, address: str, rank: int, world_size: int, backend: str, timeout_s: float) -> None:
        """Join the weight-sync group (`parallax.weightsync.sync_group`; `address` its store)
        as ranks rank .. rank + sync_ranks - 1."""

    def close_sync(self) -> None:
        """Leave the weight-sync group (a new one forms after a member was lost)."""

    def receive_weights(self, plan: dict) -> int:
        """Receive one broadcast of the learner's weights (the plan in wire form) and load it; bytes."""

    def receive_shared(self, handles: list[bytes], plan: dict) -> int:
        """Load the weights a learner rank on this engine's device staged for it (`parallax.weightsync.handoff`:
        one handle per bucket of the plan, in wire form); bytes."""

    def parameters_dict(self) -> dict[str, Any]:
        """The engine's current weights (tests check weight sync against the learner's)."""

    def sleep(self, level: int = 1) -> None:
        """Free the device for a colocated learner's update (`rollout.colocate`): level 1 keeps the weights
        in host memory, level 2 drops them (the weight sync after `wake_up` refills them)."""

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Memory back, for `tags` ("weights", then "kv_cache"; None: both)."""

    def close(self) -> None:
        """Leave the sync group and stop any process of the engine's own, now: a process killed with its actor
        leaves its shared memory behind (vLLM's engine core: hundreds of MB in /dev/shm per engine)."""


def engine_class(name: str) -> type:
    """The class `ENGINES[name]` names, imported on first use."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; known: {sorted(ENGINES)}")
    module, _, cls = ENGINES[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def make_engine(name: str, **kwargs) -> Engine:
    """Build the engine named `name` (its backend is imported here, lazily)."""
    return engine_class(name)(**kwargs)
