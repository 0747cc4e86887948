"""The learner's SFT and GRPO steps against a plain transformers training step on the same model and
batch, in GFLOP/s, in fp32 and under bf16 autocast (`learner.autocast=bf16`).

The plain step is what the hardware gives a causal LM with no framework around it: forward with the
labels, backward, AdamW step. The learner's steps are `LearnerWorker.sft_step` and `grpo_step` (DeepSpeed,
ZeRO-0, one rank, in this process) on a batch of the same shape. GFLOP/s counts 6 x parameters x
tokens per step (attention ignored, the same for every row). Every path runs `--warmup` steps, then
`--steps` timed ones; the table gives the median.

    python bench/bench_learner_speed.py --model smollm2_135m          # SmolLM2-135M, 4 x 256 tokens
    python bench/bench_learner_speed.py --model tiny --tokens 64      # a quick look

Prints a table, then one JSON line: {"bench": "learner_speed", "rows": [...], ...}; each learner row has
`vs_plain`: its GFLOP/s over the plain step's at the same precision.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def model_dir(root: Path, model: str) -> Path:
    if model == "tiny":
        import toyworld
        from tinylm import TinyModelConfig, build_tiny_model

        return Path(build_tiny_model(root / "tiny", TinyModelConfig(), toyworld.corpus(500, 0)))
    from formats import ALL_SPECIAL_TOKENS
    from models import materialize, prepare_model_dir

    return Path(prepare_model_dir(materialize(model), root / "base", ALL_SPECIAL_TOKENS).path)


def _timed(step, warmup: int, steps: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def plain(path: Path, ids, bf16: bool, warmup: int, steps: int) -> float:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return _timed(step, warmup, steps)


def make_learner(path: Path, batch: int, threads: int):
    """One learner for every timed step (DeepSpeed's process group lives once per process); the
    precision is switched on its config between runs."""
    from actors.learner import LearnerWorker
    from contract.config import LearnerConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = LearnerConfig(micro_batch_size=batch, torch_threads=threads, zero_stage=0)
    return LearnerWorker(cfg, str(path), "float32", 0, 1, f"tcp://127.0.0.1:{port}", port)


def learner(worker, ids, bf16: bool, kind: str, warmup: int, steps: int) -> float:
    import torch

    from contract.batch import SFTBatch, TrainBatch

    worker.cfg.autocast = "bf16" if bf16 else "off"
    ones = torch.ones_like(ids)
    scored = ones.float()
    scored[:, 0] = 0  # the first token has no prefix
    if kind == "sft":
        batch = SFTBatch(input_ids=ids, attention_mask=ones, loss_mask=scored)
        return _timed(lambda: worker.sft_step(batch, int(scored.sum()), lr=1e-6), warmup, steps)
    adv = torch.where(torch.arange(ids.shape[0])[:, None] % 2 == 0, 1.0, -1.0) * scored
    old = worker.compute_logprobs(TrainBatch(ids, ones, scored, scored * 0, adv))
    batch = TrainBatch(input_ids=ids, attention_mask=ones, response_mask=scored, old_logprobs=old, advantages=adv)
    return _timed(lambda: worker.grpo_step(batch, int(scored.sum()), len(batch), lr=1e-6), warmup, steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2_135m", help="tiny, or a packaged model (smollm2_135m)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kinds", default="sft,grpo", help="learner steps to time (sft, grpo)")
    ap.add_argument("--precisions", default="fp32,bf16",
                    help="fp32, bf16 (autocast); bf16 where the CPU lacks AVX512_BF16/AMX is ~70x slower")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="parallax-speed-") as tmp:
        path = model_dir(Path(tmp), args.model)
        from transformers import AutoConfig, AutoModelForCausalLM

        n_params = sum(p.numel()
                       for p in AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path)).parameters())
        vocab = AutoConfig.from_pretrained(path).vocab_size
        ids = torch.randint(0, vocab, (args.batch, args.tokens), generator=torch.Generator().manual_seed(0))
        flop = 6 * n_params * args.batch * args.tokens
        rows = []
        worker = make_learner(path, args.batch, args.threads)
        for bf16 in [p == "bf16" for p in args.precisions.split(",")]:
            precision = "bf16 autocast" if bf16 else "fp32"
            base = plain(path, ids, bf16, args.warmup, args.steps)
            rows.append({"path": "plain transformers", "precision": precision, "s": round(base, 3),
                         "gflops": round(flop / base / 1e9, 1)})
            for kind in args.kinds.split(","):
                took = learner(worker, ids, bf16, kind, args.warmup, args.steps)
                rows.append({"path": f"learner {kind}", "precision": precision, "s": round(took, 3),
                             "gflops": round(flop / took / 1e9, 1), "vs_plain": round(base / took, 2)})
    from actors.devices import native_bf16

    print(f"native bf16 on this CPU: {native_bf16('cpu')}")
    print(f"load {os.getloadavg()[0]:.2f}; {args.model} ({n_params / 1e6:.1f}M parameters), "
          f"{args.batch} x {args.tokens} tokens, {args.threads} threads; median of {args.steps} steps")
    print(f"{'path':<20} {'precision':<14} {'s':>8} {'GFLOP/s':>8} {'vs plain':>9}")
    for r in rows:
        print(f"{r['path']:<20} {r['precision']:<14} {r['s']:>8} {r['gflops']:>8} {r.get('vs_plain', ''):>9}")
    print(json.dumps({"bench": "learner_speed", "loadavg": os.getloadavg()[0], "native_bf16": native_bf16("cpu"),
                      "model": args.model,
                      "params": n_params, "batch": args.batch, "tokens": args.tokens, "threads": args.threads,
                      "rows": rows}))


if __name__ == "__main__":
    main()
