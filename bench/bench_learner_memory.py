"""Peak memory of the learner's log-probability and entropy path, per vocabulary: the dense path (an fp32
log-softmax of the whole [B, L, V] logits, what the learner did before) against actors/algo.py's
chunked one (one [B, LOGIT_CHUNK, V] fp32 chunk alive at a time, checkpointed under autograd).

Each path runs in a fresh process on bf16 logits (the learner's dtype on GPU), forward and backward of
a policy-gradient-shaped loss plus the entropy metric, and reports the peak resident memory above the
process's baseline (ru_maxrss, so the two never share an allocator's cache) and the time. The two
paths' logprobs and gradients are compared in a third process at a size both hold.

    python bench/bench_learner_memory.py                          # Qwen3's vocabulary, 4k tokens
    python bench/bench_learner_memory.py --tokens 256 --vocab 4096   # a quick look
    python bench/bench_learner_memory.py --device cuda               # the GPU check: peak from torch.cuda

Prints a table, then one JSON line: {"bench": "learner_memory", "rows": [...], "max_abs_diff": ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QWEN3_VOCAB = 151_936


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _dense(logits, ids, temperature):
    """The pre-chunking path: fp32 log-softmax over the whole tensor, kept for backward."""
    logp = (logits.float() / temperature).log_softmax(-1)  # [B, L, V] fp32
    picked = logp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return picked, entropy.detach()


def _chunked(logits, ids, temperature):
    from parallax.layouts import logprobs as chunked

    lse, ent = chunked.logsumexp_chunked(logits, temperature, entropy=True)
    return chunked.token_logprobs(logits, ids, temperature, lse)[:, 1:], ent


PATHS = {"dense": _dense, "chunked": _chunked}


def _inputs(batch: int, tokens: int, vocab: int, seed: int = 0, dtype: str = "bfloat16"):
    import torch

    g = torch.Generator().manual_seed(seed)
    logits = torch.empty(batch, tokens, vocab, dtype=getattr(torch, dtype))
    for s in range(0, tokens, 64):  # filled a slice at a time: no fp32 copy raises the baseline's high-water mark
        logits[:, s:s + 64] = torch.randn(batch, min(64, tokens - s), vocab, generator=g) * 2
    logits.requires_grad_()
    ids = torch.randint(0, vocab, (batch, tokens), generator=g)
    adv = torch.randn(batch, tokens - 1, generator=g)
    return logits, ids, adv


def _on(device: str, *tensors):
    import torch

    out = [t.detach().to(device).requires_grad_(t.requires_grad) for t in tensors]
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return out


def worker(path: str, batch: int, tokens: int, vocab: int, threads: int, device: str = "cpu") -> dict:
    """One path's forward and backward. CPU: peak resident memory above the baseline (ru_maxrss);
    CUDA: peak allocated above what the inputs hold (torch's allocator statistics)."""
    import torch

    torch.set_num_threads(threads)
    cuda = device.startswith("cuda")
    small, small_ids, _ = _on(device, *_inputs(1, 8, 16))
    PATHS[path](small, small_ids, 1.0)[0].sum().backward()  # lazy imports and first-call set-up: not the path's memory
    logits, ids, adv = _on(device, *_inputs(batch, tokens, vocab))
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() / 2**20 if cuda else _rss_mib()  # the bf16 logits: alive in both paths
    t0 = time.perf_counter()
    picked, entropy = PATHS[path](logits, ids, 1.0)
    loss = -(picked * adv).mean()
    loss.backward()
    if cuda:
        torch.cuda.synchronize()
    took = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else _rss_mib()
    return {"path": path, "device": device, "batch": batch, "tokens": tokens, "vocab": vocab,
            "peak_mib": round(peak - base, 1), "logits_mib": round(logits.numel() * 2 / 2**20, 1), "s": round(took, 3),
            "tokens_per_s": round(batch * tokens / took), "entropy_mean": float(entropy.float().mean())}


def agreement(batch: int, tokens: int, vocab: int) -> dict[str, float]:
    """max |difference| between the two paths on fp32 logits (the math, not bf16's rounding of the
    gradient): logprobs, entropy and the logits' gradient."""
    out = {}
    for path, fn in PATHS.items():
        logits, ids, adv = _inputs(batch, tokens, vocab, dtype="float32")
        picked, entropy = fn(logits, ids, 1.0)
        (-(picked * adv).mean()).backward()
        out[path] = (picked.detach(), entropy, logits.grad)
    return {name: float((a - b).abs().max()) for name, a, b in zip(("logprobs", "entropy", "grad"), *out.values())}


def _run_worker(args, path: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", path, "--batch", str(args.batch), "--tokens", str(args.tokens),
           "--vocab", str(args.vocab), "--threads", str(args.threads), "--device", args.device]
    # every tensor-sized allocation its own mapping, returned when freed: the high-water mark is what was
    # alive at once, not what glibc's heap kept after a dynamic threshold moved
    env = os.environ | {"MALLOC_MMAP_THRESHOLD_": "131072"}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False, env=env)
    if out.returncode != 0:
        return {"path": path, "batch": args.batch, "tokens": args.tokens, "vocab": args.vocab, "peak_mib": None,
                "error": (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=QWEN3_VOCAB)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--agree-tokens", type=int, default=256, help="sequence length of the agreement check")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (the GPU check: peak from torch's allocator)")
    ap.add_argument("--worker", choices=sorted(PATHS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.batch, args.tokens, args.vocab, args.threads, args.device)))
        return
    rows = [_run_worker(args, p) for p in PATHS]
    diff = agreement(1, args.agree_tokens, min(args.vocab, 8192))
    print(f"load {os.getloadavg()[0]:.2f}; bf16 logits [{args.batch}, {args.tokens}, {args.vocab}] on {args.device}")
    print(f"{'path':<8} {'peak MiB':>10} {'logits MiB':>11} {'s':>8} {'tokens/s':>9}")
    for r in rows:
        print(f"{r['path']:<8} {r['peak_mib'] if r['peak_mib'] is not None else 'failed':>10} "
              f"{r.get('logits_mib', '-'):>11} {r.get('s', '-'):>8} {r.get('tokens_per_s', '-'):>9}  "
              f"{r.get('error', '')}")
    dense, chunked = (r["peak_mib"] for r in rows)
    ratio = round(dense / chunked, 2) if dense and chunked else None
    print(f"dense / chunked peak: {ratio}; max |difference|: " + ", ".join(f"{k} {v:.1e}" for k, v in diff.items()))
    print(json.dumps({"bench": "learner_memory", "device": args.device, "loadavg": os.getloadavg()[0], "rows": rows,
                      "dense_over_chunked": ratio, "max_abs_diff": diff}))


if __name__ == "__main__":
    main()
