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
                 repeat: int = 3, threads: int | None = None) -> dict:
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

    was = torch.get_num_threads()
    torch.set_num_threads(threads or was)
    try:
        s = best_of(step, repeat)
    finally:
        torch.set_num_threads(was)
    return {"s": s, "params": params, "tokens": rows * length, "gflops": 6 * params * rows * length / s / 1e9}


# torch op names -> the part of a decode step they are
_KINDS = (("matmul", ("aten::linear", "aten::addmm", "aten::mm", "aten::matmul", "aten::bmm",
                      "mkldnn::_linear_pointwise")),  # the engine's packed bf16 linear (parallax/engines/packed.py)
          ("attention", ("aten::scaled_dot_product", "aten::_scaled_dot_product", "aten::_flash_attention")))


def decode_breakdown(model_dir: str | Path, rows: int, prompt_tokens: int, steps: int, dtype: str = "bfloat16",
                     threads: int = 2, seed: int = 0, sampler: str = "multinomial") -> dict:
    """Where the hf engine's generation time goes, at `rows` rows of `prompt_tokens` + `steps` tokens, in
    `dtype`, on `threads` torch threads: `HFEngine.generate` as the rollout actor runs it (with `sampler`;
    `model_dir`'s EOS must be unreachable, as bench_peer's copy makes it, so every row runs `steps` steps)
    (and again with plain `F.linear`, without the engine's packed weights), against its model's own work, the
    prefill and the decode steps through the same `KVDecoder` with nothing
    else; the rest is the engine's per-step sampling and bookkeeping. One decode step's forward is split by
    torch's profiler into matmuls (the weights' one read: the bandwidth bound's part), attention, the other
    ops (norms, rotary, activations, copies), and what no op accounts for (Python and dispatch)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from parallax.contract.batch import SamplingParams
    from parallax.engines.decode_kv import KVDecoder
    from parallax.engines.hf import HFEngine

    was = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        engine = HFEngine(str(model_dir), dtype=dtype)
        vocab = engine.model.get_output_embeddings().weight.shape[0]
        g = torch.Generator().manual_seed(seed)
        prompts = torch.randint(100, vocab, (rows, prompt_tokens), generator=g).tolist()
        params = SamplingParams(max_new_tokens=steps, temperature=1.0, seed=seed, sampler=sampler)
        engine.generate(prompts, params)  # warm-up
        t0 = time.perf_counter()
        done = engine.generate(prompts, params)
        generate = time.perf_counter() - t0
        # the same generate with plain `F.linear` (no packed weights), for the packing's own share
        plain = HFEngine(str(model_dir), dtype=dtype, pack=False)
        plain.generate(prompts, params)
        t0 = time.perf_counter()
        same = plain.generate(prompts, params)
        plain_generate = time.perf_counter() - t0
        if [c.token_ids for c in same] != [c.token_ids for c in done]:
            raise ValueError("the packed engine sampled other tokens than the plain one")
        del plain
        if any(len(c.token_ids) != steps for c in done):
            raise ValueError(f"{model_dir}: a row stopped before {steps} tokens (its EOS must be unreachable)")
        ids = torch.tensor(prompts)
        mask, pos = torch.ones_like(ids), torch.arange(prompt_tokens).expand(rows, -1)
        nxt = torch.tensor([c.token_ids for c in done])  # the engine's own tokens, fed back step by step

        def model_only() -> tuple[float, float]:
            with torch.no_grad():
                dec = KVDecoder(engine.model)
                t = time.perf_counter()
                dec.prefill(ids, mask, pos)
                pre, t = time.perf_counter() - t, time.perf_counter()
                for i in range(steps - 1):
                    dec.step(nxt[:, i:i + 1], pos[:, -1:] + 1 + i)
                return pre, time.perf_counter() - t

        model_only()
        prefill, decode = model_only()
        with torch.no_grad():
            dec = KVDecoder(engine.model)
            dec.prefill(ids, mask, pos)
            dec.step(nxt[:, :1], pos[:, -1:] + 1)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                t = time.perf_counter()
                for i in range(1, steps - 1):
                    dec.step(nxt[:, i:i + 1], pos[:, -1:] + 1 + i)
                wall = time.perf_counter() - t
        parts = {"matmul": 0.0, "attention": 0.0, "other_ops": 0.0}
        for e in prof.key_averages():
            if e.key.startswith(("aten::", "mkldnn::")):  # self time of every op, each counted once
                kind = next((k for k, names in _KINDS if e.key.startswith(names)), "other_ops")
                parts[kind] += e.self_cpu_time_total / 1e6
        profiled = max(1, steps - 2)
        per_step = {k: v / profiled for k, v in parts.items()}
        per_step["python_and_dispatch"] = max(0.0, wall / profiled - sum(per_step.values()))
    finally:
        torch.set_num_threads(was)
    return {"generate_s": generate, "plain_generate_s": plain_generate, "prefill_s": prefill, "decode_s": decode,
            "steps": steps, "rows": rows,
            "engine_rest_s": generate - prefill - decode, "step_forward_s": decode / max(1, steps - 1),
            "step_parts_s": per_step, "threads": threads, "dtype": dtype}


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
