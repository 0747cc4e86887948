"""What an actor computes on, decided by the actor from the devices it sees (never from the driver's).

* `seen`: the devices this process was given: its node, the GPU ids Ray assigned it (which Ray also
  puts into its CUDA_VISIBLE_DEVICES) and whether torch sees CUDA there;
* `native_bf16`: whether a device computes bf16 matmuls natively; elsewhere bf16 is emulated and slower
  than fp32 (an AVX2-only CPU ran one SmolLM2 forward+backward 24x slower under bf16 autocast);
* `release_cached_memory`: hand this process's cached, unused CUDA blocks back to the device, so that a
  colocated engine waking on the same GPU finds them free (a no-op on CPU);
* `engine_dtype`: the rollout engine's weight dtype for `rollout.dtype` (null: `model.dtype`; auto: bf16
  where native, `model.dtype` elsewhere). The learner keeps its own fp32 master weights either way.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch


def seen(heap: bool = False) -> dict:
    """This actor's devices: {"node": Ray node id, "gpus": the GPU ids Ray assigned it (str), "visible":
    its CUDA_VISIBLE_DEVICES, "cuda": whether torch sees a CUDA device, "nccl_cumem": its NCCL_CUMEM_ENABLE
    (None: unset), which every member of an NCCL group must agree on (`actors.group.ACTOR_ENV`)}; with `heap`,
    also "refaults": `refaults()` in this process (0 where the heap keeps freed memory, as `ACTOR_ENV` asks of
    glibc; ~12 K where the pages went back to the kernel), a probe of 112 MB that start-up does not pay."""
    import ray

    return {"node": ray.get_runtime_context().get_node_id(), "gpus": [str(g) for g in ray.get_gpu_ids()],
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""), "cuda": torch.cuda.is_available(),
            "nccl_cumem": os.environ.get("NCCL_CUMEM_ENABLE"), **({"refaults": refaults()} if heap else {})}


def refaults(nbytes: int = 1 << 26) -> int:
    """Minor page faults of filling a CPU tensor of 3/4 `nbytes` allocated after one of `nbytes` was filled and
    freed (a smaller one, so that it fits in the freed block: an aligned allocation of the same size may not)."""
    import resource

    torch.empty(nbytes, dtype=torch.uint8).fill_(1)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.empty(nbytes * 3 // 4, dtype=torch.uint8).fill_(1)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def native_bf16(device: str, cpu_flags: str | None = None) -> bool:
    """Whether `device` computes bf16 matmuls natively: a CUDA GPU that supports bf16, or a CPU whose
    flags (/proc/cpuinfo) name AVX512_BF16 or AMX-BF16. Elsewhere bf16 is emulated, and slower than fp32."""
    if device == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if cpu_flags is None:
        try:
            info = Path("/proc/cpuinfo").read_text()
        except OSError:
            info = ""
        cpu_flags = next((line for line in info.splitlines() if line.startswith("flags")), "")
    flags = set(cpu_flags.split())
    return bool({"avx512_bf16", "amx_bf16"} & flags)


def engine_dtype(setting: str | None, model_dtype: str, device: str, cpu_flags: str | None = None) -> str:
    """The dtype a rollout engine loads its weights in, for `rollout.dtype` = `setting` on `device` (the
    config has checked the name)."""
    if setting is None:
        return model_dtype
    if setting == "auto":
        return "bfloat16" if native_bf16(device, cpu_flags) else model_dtype
    return setting


def release_cached_memory() -> dict[str, float]:
    """Give this process's cached CUDA memory back to the device: what torch's allocator holds but no tensor
    uses (freed activations, the weight sync's gathered buckets). Until then the device counts it as taken,
    and a colocated vLLM engine waking on the same GPU finds less than it slept with (verl empties the cache
    before it resumes an engine's "weights" and again before its "kv_cache"). Garbage is collected first, so
    tensors only a reference cycle kept are freed too. Returns the bytes reserved before and after (0 on CPU,
    where there is nothing to release)."""
    import gc

    gc.collect()
    if not torch.cuda.is_available():
        return {"reserved_before": 0.0, "reserved_after": 0.0}
    torch.cuda.synchronize()  # kernels still running hold their blocks
    before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    return {"reserved_before": float(before), "reserved_after": float(torch.cuda.memory_reserved())}
