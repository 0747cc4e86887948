"""The engine-side config slices: vLLM's own knobs, and how weights reach the engines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from parallax.contract.errors import _check
from parallax.contract.ranges import check_section


@dataclass
class VLLMConfig:
    """`rollout.vllm.*`: passed to `vllm.LLM` when rollout.engine=vllm (parallax/engines/vllm.py)."""

    tensor_parallel_size: int = 1
    # GPU: the fraction of GPU memory vLLM may take (weights + KV cache).
    gpu_memory_utilization: float = 0.5
    # Context length vLLM plans for (null: the model's own; shorter saves KV memory).
    max_model_len: int | None = None
    # Reuse KV blocks across requests with a shared prefix (the n samples of a prompt, branch requests).
    enable_prefix_caching: bool = True
    # Skip CUDA-graph / torch.compile capture: start-up in seconds (CPU, tests), slower decoding on GPU.
    enforce_eager: bool = False
    # CPU build: KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE).
    cpu_kvcache_gib: int = 2
    # vLLM logits processors, loaded by name in its workers ("module:Class", vLLM's own `logits_processors`); a
    # request reaches one through the executor's processor's `request_args` (vLLM's `SamplingParams.extra_args`).
    logits_processors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_section(self, "rollout.vllm")

    def engine_kwargs(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class WeightSyncConfig:
    """`rollout.weight_sync.*`: learner rank 0 -> every engine after each update (parallax/weightsync/).

    collective: a torch.distributed group between learner rank 0 and every engine worker; rank 0
    broadcasts its weights in buckets (parallax/weightsync/sync_group.py). object_store: rank 0's state dict
    goes through Ray's object store and each engine loads it (the fallback: any cluster, no ports).
    """

    method: str = "collective"
    # auto: nccl when learners and engines both have GPUs, else gloo.
    backend: str = "auto"
    # bucket size: several buckets let packing, transfer and loading overlap (bench/bench_sync.py)
    bucket_mb: int = 64
    # A broadcast or group start that takes longer fails the run, naming what it waited for.
    timeout_s: float = 300.0
    # Send each bucket's change since the last push (the engines' dtype elements that changed, as indices and
    # values) where that is fewer bytes, every engine still bit-equal to the learner's cast
    # (parallax/weightsync/sync_group.py). null: on for a gloo group between nodes, where the wire is the cost; off
    # on one node (a push is a memory copy there, faster than the change's pass over the weights on 2 cores)
    # and over NCCL (whose receivers would keep a second copy of the weights in GPU memory for it).
    delta: bool | None = None
    # An engine on a CPU learner rank's node takes the weights through shared memory (the rank casts each bucket
    # into a buffer the engine keeps mapped and copies from: parallax/weightsync/handoff.py) instead of a gloo
    # broadcast over loopback: SmolLM2 0.1 s against 0.26 s a push (bench/bench_sync.py).
    cpu_handoff: bool = False

    def __post_init__(self) -> None:
        check_section(self, "rollout.weight_sync")
        _check(self.method in ("collective", "object_store"), "rollout.weight_sync.method",
               f"must be collective or object_store, got {self.method!r}")
        _check(self.backend in ("auto", "gloo", "nccl"), "rollout.weight_sync.backend",
               f"must be auto, gloo or nccl, got {self.backend!r}")
