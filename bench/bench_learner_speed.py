"""The learner's SFT and GRPO steps against a plain transformers training step on the same model and
batch, in GFLOP/s and tokens/s, in fp32 and under bf16 autocast (`learner.autocast=bf16`).

The plain step is what the hardware gives a causal LM with no framework around it: forward with the
labels, backward, AdamW step. The learner's steps are `LearnerWorker.sft_step` and `grpo_step` (DeepSpeed,
one rank, in this process; `--zero-stage`, `--gradient-checkpointing`) on a batch of the same shape:
causal rows, or `--layout structured` (parallel branches and joins, parallax/layouts/masks.py: FlexAttention on
CUDA, the block-sparse SDPA on CPU; the plain step stays causal). GFLOP/s counts 6 x parameters x
tokens per step (attention ignored, the same for every row; a `score` pass, forward only, does a third
of that work: its `vs_plain` is not a like-for-like ratio). Every path runs `--warmup` steps, then
`--steps` timed ones; the table gives the median, and on CUDA each row's peak allocated memory.
`--export` also times the learner's weight export (`state_dict`, bucket by bucket) and its weight sync
to one receiver (gloo, as to a CPU engine), and checks the two agree bit for bit.

    python bench/bench_learner_speed.py --model smollm2_135m          # SmolLM2-135M, 4 x 256 tokens
    python bench/bench_learner_speed.py --model tiny --tokens 64      # a quick look
    python bench/bench_learner_speed.py --device cuda --model qwen3_0_6b --dtype bfloat16 --batch 2 \
        --tokens 4096 --layout structured --zero-stage 3 --gradient-checkpointing --precisions bf16 --export
                                                                      # the GPU check: the paper learner's path

`qwen3_*` are the Qwen3 family's shapes (151,936-token vocabulary) with random weights: what a step
costs, not what the model knows. Prints a table, then one JSON line: {"bench": "learner_speed",
"rows": [...], ...}; each learner row has `vs_plain`: its GFLOP/s over the plain step's at the same precision.
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


# The Qwen3 family's shapes (their config.json); every one ties its embeddings and has head_dim 128.
QWEN3 = {
    "qwen3_0_6b": {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16},
    "qwen3_1_7b": {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16},
    "qwen3_4b": {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32},
}


def qwen3_dir(root: Path, model: str, device: str) -> Path:
    """A Qwen3-shaped model with random weights (built on `device`: a 4B model's init is slow on a CPU)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=151_936, head_dim=128, num_key_value_heads=8, max_position_embeddings=40_960,
                      rms_norm_eps=1e-6, tie_word_embeddings=True, **QWEN3[model])
    torch.manual_seed(0)
    with torch.device(device):
        m = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    m.save_pretrained(root / model)
    return root / model


def model_dir(root: Path, model: str, device: str = "cpu") -> Path:
    if model in QWEN3:
        return qwen3_dir(root, model, device)
    if model == "tiny":
        from parallax import toyworld
        from parallax.tinylm import TinyModelConfig, build_tiny_model

        return Path(build_tiny_model(root / "tiny", TinyModelConfig(), toyworld.corpus(500, 0)))
    from parallax.formats import ALL_SPECIAL_TOKENS
    from parallax.models import materialize, prepare_model_dir

    return Path(prepare_model_dir(materialize(model), root / "base", ALL_SPECIAL_TOKENS).path)


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _timed(step, warmup: int, steps: int, device: str) -> tuple[float, float | None]:
    """(median seconds of the timed steps, peak CUDA memory allocated over them in MiB; None on CPU)."""
    import torch

    for _ in range(warmup):
        step()
    _sync(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
    return statistics.median(times), peak


def plain(path: Path, ids, bf16: bool, dtype: str, device: str, warmup: int, steps: int):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device).train()
    held = {"model": model, "opt": torch.optim.AdamW(model.parameters(), lr=1e-6)}
    del model
    ids = ids.to(device)

    def step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = held["model"](input_ids=ids, labels=ids).loss
        loss.backward()
        held["opt"].step()
        held["opt"].zero_grad(set_to_none=True)

    try:
        return _timed(step, warmup, steps, device)
    finally:  # freed before the learner loads its own copy
        held.clear()
        if device == "cuda":
            torch.cuda.empty_cache()


def make_learner(path: Path, batch: int, threads: int, dtype: str = "float32", zero_stage: int = 0,
                 checkpointing: bool = False):
    """One learner for every timed step (DeepSpeed's process group lives once per process); the
    precision is switched on its config between runs. It takes the device DeepSpeed finds (CUDA where
    this process sees a GPU)."""
    from actors.learner import LearnerWorker
    from parallax.contract.config import LearnerConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = LearnerConfig(micro_batch_size=batch, torch_threads=threads, zero_stage=zero_stage,
                        gradient_checkpointing=checkpointing)
    return LearnerWorker(cfg, str(path), dtype, 0, 1, f"tcp://127.0.0.1:{port}", port)


def structure_of(batch: int, tokens: int):
    """(position_ids, segment_ids, segment_visible) of `batch` rows of parallel branches and joins."""
    from bench_masks import synthetic_record

    from parallax.layouts import masks

    return masks.pack_records([synthetic_record(tokens) for _ in range(batch)])


def learner(worker, ids, structure, bf16: bool, kind: str, warmup: int, steps: int):
    import torch

    from parallax.contract.batch import SFTBatch, TrainBatch

    worker.cfg.autocast = "bf16" if bf16 else "off"
    ones = torch.ones_like(ids)
    scored = ones.float()
    scored[:, : ids.shape[1] // 10] = 0  # the prompt (the structured rows' first segment) is not scored
    if kind == "sft":
        batch = SFTBatch(ids, ones, scored, *structure)
        return _timed(lambda: worker.sft_step(batch, int(scored.sum()), lr=1e-6), warmup, steps, worker.device.type)
    adv = torch.where(torch.arange(ids.shape[0])[:, None] % 2 == 0, 1.0, -1.0) * scored
    batch = TrainBatch(ids, ones, scored, scored * 0, adv, *structure)
    if kind == "score":  # the no-grad pass of recompute_old_logprobs and the reference policy
        return _timed(lambda: worker.compute_logprobs(batch), warmup, steps, worker.device.type)
    old = worker.compute_logprobs(batch)
    batch = TrainBatch(ids, ones, scored, old, adv, *structure)
    return _timed(lambda: worker.grpo_step(batch, int(scored.sum()), len(batch), lr=1e-6), warmup, steps,
                  worker.device.type)


def export(worker) -> dict:
    """The learner's weight export and its sync to one receiver (a gloo group, the receiver in a thread
    of this process, as a CPU engine would hold it): seconds each, and whether both carry the same bits."""
    import threading

    import torch

    from parallax.weightsync.sync_group import SyncGroup

    t0 = time.perf_counter()
    state = worker.state_dict()
    export_s = time.perf_counter() - t0
    plan = worker._plan(worker.EXPORT_BUCKET_BYTES)  # what open_sync plans (from metadata: no gather)
    got: dict = {}
    with tempfile.TemporaryDirectory(prefix="parallax-sync-") as tmp:
        address = f"file://{tmp}/store"

        def receive():
            group = SyncGroup(address, 1, 2, "gloo", 120)
            got.update((k, v.clone()) for k, v in group.receive(plan))

        receiver = threading.Thread(target=receive, daemon=True)
        receiver.start()
        worker.open_sync(address, 2, "gloo", 120, worker.EXPORT_BUCKET_BYTES, abandonable=False)  # meets the receiver
        t0 = time.perf_counter()
        sent = worker.send_weights()
        receiver.join(120)
        sync_s = time.perf_counter() - t0
        worker.close_sync()
    same = set(got) == set(state) and all(torch.equal(got[k], state[k]) for k in state)
    return {"export_s": round(export_s, 3), "sync_s": round(sync_s, 3), "sync_bytes": int(sent["sync/bytes"]),
            "export_equals_sync": same, "tensors": len(state)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2_135m",
                    help=f"tiny, a packaged model (smollm2_135m), or a Qwen3 shape: {', '.join(QWEN3)}")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kinds", default="sft,grpo",
                    help="learner steps to time: sft, grpo (its loss is verl's, which imports Ray), "
                         "score (compute_logprobs: a no-grad pass)")
    ap.add_argument("--precisions", default="fp32,bf16",
                    help="fp32, bf16 (autocast); bf16 where the CPU lacks AVX512_BF16/AMX is ~70x slower")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--dtype", default="float32", help="the weights' dtype (model.dtype): float32 or bfloat16")
    ap.add_argument("--layout", default="causal", choices=("causal", "structured"))
    ap.add_argument("--zero-stage", type=int, default=0, choices=(0, 1, 2, 3))
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--export", action="store_true", help="also time the weight export and sync, and compare them")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this process sees no CUDA device")
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the learner takes what it sees: keep it off any GPU
    with tempfile.TemporaryDirectory(prefix="parallax-speed-") as tmp:
        path = model_dir(Path(tmp), args.model, args.device)
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(path)
        with torch.device("meta"):  # the count alone: no weights allocated
            n_params = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
        ids = torch.randint(0, config.vocab_size, (args.batch, args.tokens), generator=torch.Generator().manual_seed(0))
        structure = structure_of(args.batch, args.tokens) if args.layout == "structured" else (None, None, None)
        flop = 6 * n_params * args.batch * args.tokens
        rows, exported = [], None
        precisions = [p == "bf16" for p in args.precisions.split(",")]
        base = {bf16: plain(path, ids, bf16, args.dtype, args.device, args.warmup, args.steps) for bf16 in precisions}
        worker = make_learner(path, args.batch, args.threads, args.dtype, args.zero_stage, args.gradient_checkpointing)
        assert worker.device.type == args.device, f"the learner took {worker.device}, not {args.device}"
        for bf16 in precisions:
            precision = "bf16 autocast" if bf16 else "fp32"
            took, peak = base[bf16]
            rows.append({"path": "plain transformers", "precision": precision, "s": round(took, 3),
                         "gflops": round(flop / took / 1e9, 1), "tokens_per_s": round(ids.numel() / took),
                         "peak_mib": peak and round(peak)})
            for kind in args.kinds.split(","):
                t, peak = learner(worker, ids, structure, bf16, kind, args.warmup, args.steps)
                rows.append({"path": f"learner {kind}", "precision": precision, "s": round(t, 3),
                             "gflops": round(flop / t / 1e9, 1), "tokens_per_s": round(ids.numel() / t),
                             "peak_mib": peak and round(peak), "vs_plain": round(took / t, 2)})
        if args.export:
            exported = export(worker)
    from actors.devices import native_bf16

    print(f"native bf16 on {args.device}: {native_bf16(args.device)}")
    print(f"load {os.getloadavg()[0]:.2f}; {args.model} ({n_params / 1e6:.1f}M parameters, {args.dtype}), "
          f"{args.batch} x {args.tokens} tokens ({args.layout}), {args.device}, ZeRO-{args.zero_stage}"
          f"{', gradient checkpointing' if args.gradient_checkpointing else ''}, {args.threads} threads; "
          f"median of {args.steps} steps")
    print(f"{'path':<20} {'precision':<14} {'s':>8} {'GFLOP/s':>8} {'tokens/s':>9} {'peak MiB':>9} {'vs plain':>9}")
    for r in rows:
        print(f"{r['path']:<20} {r['precision']:<14} {r['s']:>8} {r['gflops']:>8} {r['tokens_per_s']:>9} "
              f"{r['peak_mib'] or '':>9} {r.get('vs_plain', ''):>9}")
    if exported:
        print("export: " + ", ".join(f"{k} {v}" for k, v in exported.items()))
    print(json.dumps({"bench": "learner_speed", "loadavg": os.getloadavg()[0],
                      "native_bf16": native_bf16(args.device), "model": args.model, "params": n_params,
                      "batch": args.batch, "tokens": args.tokens, "threads": args.threads, "device": args.device,
                      "dtype": args.dtype, "layout": args.layout, "zero_stage": args.zero_stage,
                      "gradient_checkpointing": args.gradient_checkpointing, "rows": rows, "export": exported}))


if __name__ == "__main__":
    main()
