"""What this machine can do, for a GRPO step's three phases: the bound each Parallax phase is measured against.

* **memory bandwidth**: a numpy copy of ``--mib`` MiB (bytes read + written over the best time of three);
  a decode step reads every weight once, so generating ``L`` tokens for a batch takes at least
  ``L x weight bytes / bandwidth`` (the KV cache and activations are left out: a lower bound);
* **memcpy of the weights' bytes**: the least a weight sync on one machine can cost;
* **plain transformers' update**: forward, loss over the completion tokens, backward and a (fused) AdamW step of
  the same model at the same rows x tokens and precision (bf16 autocast over fp32 weights, or fp32),
  in this process, with no Parallax code: the FLOP/s the cores give an update (6 x params x tokens).

``bench/bench_peer.py --limits`` prints each Parallax phase as a multiple of its bound. Alone:

    python bench/limits.py --model-dir DIR --rows 16 --tokens 48 [--bf16] [--threads 2] [--mib 256]

prints a table and one JSON line (``"bench": "limits"``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def best_of(fn, repeat: int) -> float:
    """The least wall time of `repeat` calls of `fn` (one warm-up call first)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def memory_bandwidth_gbs(mib: int = 256, repeat: int = 3) -> float:
    """GB/s a numpy copy moves (read + write)."""
    import numpy as np

    src = np.ones(mib * 2**20 // 8, dtype=np.float64)
    dst = np.empty_like(src)
    return 2 * src.nbytes / best_of(lambda: np.copyto(dst, src), repeat) / 1e9


def memcpy_s(nbytes: int, repeat: int = 5) -> float:
    """Seconds to copy `nbytes` in memory once (torch, this process's threads)."""
    import torch

    src = torch.ones(max(1, nbytes), dtype=torch.uint8)
    dst = torch.empty_like(src)
    return best_of(lambda: dst.copy_(src), repeat)


def plain_update(model_dir: str | Path, rows: int, prompt_tokens: int, completion_tokens: int, bf16: bool,
                 repeat: int = 3) -> dict:
    """One update of `rows` rows of `prompt_tokens + completion_tokens` tokens, the loss over the completion
    tokens: best seconds of forward + backward + AdamW step, and the FLOP/s that makes (6 x params x tokens)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)  # transformers' Trainer's default kernel
    params = sum(p.numel() for p in model.parameters())
    length = prompt_tokens + completion_tokens
    vocab = model.get_output_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (rows, length), generator=torch.Generator().manual_seed(0))

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=ids, logits_to_keep=completion_tokens + 1).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, -completion_tokens:, None])
        (-logp.mean()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    s = best_of(step, repeat)
    return {"s": s, "params": params, "tokens": rows * length, "gflops": 6 * params * rows * length / s / 1e9}


def decode_bound_s(weight_bytes: int, steps: int, bandwidth_gbs: float) -> float:
    """The least time `steps` decode steps take when each reads every weight once."""
    return steps * weight_bytes / (bandwidth_gbs * 1e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32, help="completion tokens per row")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mib", type=int, default=256, help="the bandwidth copy's size")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    bw = memory_bandwidth_gbs(args.mib)
    upd = plain_update(args.model_dir, args.rows, args.prompt_tokens, args.tokens, args.bf16)
    weight_bytes = upd["params"] * (2 if args.bf16 else 4)
    copy = memcpy_s(weight_bytes)
    bound = decode_bound_s(weight_bytes, args.tokens, bw)
    print(f"memory bandwidth {bw:.1f} GB/s; memcpy of the weights ({weight_bytes / 2**20:.0f} MiB) "
          f"{copy * 1e3:.1f} ms; decode bound {bound:.3f} s for {args.tokens} steps "
          f"({args.rows * args.tokens / bound:.0f} tokens/s at batch {args.rows}); "
          f"plain update {upd['s']:.3f} s ({upd['gflops']:.0f} GFLOP/s)")
    print(json.dumps({"bench": "limits", "bandwidth_gbs": round(bw, 2), "weight_bytes": weight_bytes,
                      "memcpy_s": round(copy, 5), "decode_bound_s": round(bound, 4),
                      "plain_update_s": round(upd["s"], 4),
                      "plain_update_gflops": round(upd["gflops"], 1), "rows": args.rows, "tokens": args.tokens,
                      "prompt_tokens": args.prompt_tokens, "bf16": args.bf16, "threads": args.threads,
                      "loadavg": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
