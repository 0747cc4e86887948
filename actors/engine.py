"""The engine interface every rollout backend implements, and the engine registry.

An engine turns token-id prompts into completions with per-token sampling logprobs. The
rollout worker picks one by name at setup (`rollout.engine`), so nothing downstream
branches on the backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from orchestrator.batch import Completion, SamplingParams


class Engine(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 limits: list[int] | None = None) -> list[Completion]:
        """One completion per prompt, in order. `limits`: each prompt's own max new tokens (the
        request executor's caps). A completion that ends on a stop token keeps it in `token_ids`.
        Engines with structured outputs (vllm) also take `grammar=` (the format's EBNF,
        `formats.ebnf`); the hf engine applies the grammar in its KV executor (`execute`), so the
        rollout worker sends it only where it applies."""

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        """Replace the model weights (the learner's, after an update)."""


_ENGINES: dict[str, Callable[..., Engine]] = {}


def register_engine(name: str):
    def deco(factory):
        if name in _ENGINES:
            raise ValueError(f"engine {name!r} is already registered")
        _ENGINES[name] = factory
        return factory

    return deco


def make_engine(name: str, **kwargs) -> Engine:
    """Build the engine registered as `name` (imports its backend lazily)."""
    if name == "vllm" and name not in _ENGINES:
        import actors.vllm_engine
    if name == "hf" and name not in _ENGINES:
        import actors.hf_engine  # noqa: F401
    if name not in _ENGINES:
        raise ValueError(f"unknown engine {name!r}; registered: {sorted(_ENGINES)}")
    return _ENGINES[name](**kwargs)
