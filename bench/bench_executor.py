"""Benchmark: executed branches vs sequential decoding of the same trajectories, and grammar cost.

The tiny model (random weights) is driven by `Replay` (tests/doubles/replay.py) to write toyworld
Parason teacher traces, so both modes produce exactly the same tokens (checked) and only the
execution differs:

* (a) sequential: one request per trajectory, the whole trace causally;
* (b) executed: main chain until `</Outlines>`, one request per thread (batched across all
  trajectories), join, continuation.

Figures, per batch size B (trajectories decoded together):

* token speed-up  = total response tokens / critical-path tokens, averaged over trajectories
  (critical path from the record: the last position id);
* step speed-up   = decode steps sequential / decode steps executed — what a lock-step batch
  can realise (the longest trajectory of the batch sets the pace);
* wall speed-up   = wall time sequential / wall time executed (best of `--repeat`);
* realisation     = wall speed-up / step speed-up (1.0: no scheduling/merge overhead), and
  wall speed-up / token speed-up (Parason's definition; 0.81-0.93 on A800);
* the same from process CPU time (`cpu_*`): one torch thread, so CPU time is the work done and
  far less sensitive than wall time to other processes on a shared machine;
* device speed-up = model-only time of the sequential schedule / of the executed one: every decode
  step of both runs (rows, cache width, masked or not; `DecodeBatch.shapes`) replayed through the
  same `KVDecoder` with nothing else running — what an executor with zero scheduling, sampling
  and fork/join cost would reach on this device. One CPU thread does more work per step for
  more rows, so at larger batches the executed mode's wider steps cost more and the device
  itself caps the speed-up below the step speed-up (a GPU decoding a small model is flat in
  rows over this range);
* realisation_vs_device = wall speed-up / device speed-up: the executor's own overhead.

Grammar: the same runs with xgrammar on, in both modes, interleaved in one process (off,
speculative, full mask, off, ... `--repeat` times), so every variant sees the same load:

* grammar_mask_over_decode = masker seconds (fills, token checks, accepts) / decode seconds, with
  the executor's speculative masking (draw unmasked, check, mask only refused rows; the default);
* grammar_full_mask_over_decode = the same with a full mask on every row and step (the old way);
* grammar_cpu_overhead(_full) = process CPU time with the grammar / without - 1 (the off runs
  are interleaved with the grammar runs; one torch thread, so CPU time is the work done);
* sampled_*: the random model sampling freely under the grammar (no replay; executed mode,
  `--sampled-tokens` per trajectory). It draws grammar-invalid tokens often (about every other
  step), so this is speculation's worst case; a trained model almost never is refused.

    python bench/bench_executor.py [--n 32] [--difficulty 3] [--batch 1 8 32] [--repeat 3]
                                   [--hidden 128 --layers 4] [--sampled-tokens 128] [--device cuda]

Prints a table and a final JSON line. One torch thread unless `--threads`; report `uptime` with it.
`--device cuda` runs the model on the GPU (transformers' decode path; `bench/gpu_check.sh`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.append(os.path.join(ROOT, "tests"))  # the tests' replay double (tests/doubles/replay.py)

import torch
from doubles.replay import Replay, role_scripts, sequential_script

from parallax import toyworld
from parallax.contract.batch import SamplingParams
from parallax.contract.config import ExecutorConfig
from parallax.engines.decode_kv import KVDecoder
from parallax.executors.kv import KVExecutor
from parallax.formats import parse


def timed_run(model, tok, problems, mode: str, grammar: bool, repeat: int, speculative: bool = True):
    """Best-of-`repeat` (wall, CPU) seconds of one `run` over `problems`; returns (times, executions, executor)."""
    trees = [parse(p.traces["parason"], "parason").tree for p in problems]
    prompts = [tok.encode(p.prompt) for p in problems]
    cfg = ExecutorConfig(mode=mode, grammar=grammar, max_branches=8, max_branch_tokens=512)
    best, cpu, res, ex = float("inf"), float("inf"), None, None
    for _ in range(repeat):
        scripts = [role_scripts(t, "parason", tok) if mode == "executed" else sequential_script(t, "parason", tok)
                   for t in trees]
        ex = KVExecutor(model, tok, cfg, "parason", Replay(scripts, tok.eos_token_id))
        ex.speculative_grammar = speculative
        t0, c0 = time.perf_counter(), time.process_time()
        res = ex.run(prompts, SamplingParams(max_new_tokens=1024, seed=0))
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return (best, cpu), res, ex


GRAMMAR_VARIANTS = {"off": (False, True), "spec": (True, True), "full": (True, False)}  # (grammar, speculative)


def grammar_runs(model, tok, chunk, repeat: int, acc: dict) -> None:
    """Replayed runs, both modes, the variants interleaved `repeat` times; sums into acc[variant]."""
    for _ in range(repeat):
        for mode in ("sequential", "executed"):
            for name, (grammar, spec) in GRAMMAR_VARIANTS.items():
                (_, cpu), _, ex = timed_run(model, tok, chunk, mode, grammar, 1, spec)
                _add(acc[name], ex, cpu)


def sampled_runs(model, tok, chunk, max_new_tokens: int, acc: dict) -> None:
    """The random model sampling freely under the grammar (executed mode), speculative then full mask."""
    prompts = [tok.encode(p.prompt) for p in chunk]
    cfg = ExecutorConfig(mode="executed", grammar=True, max_branch_tokens=32)
    for name, spec in (("sampled_spec", True), ("sampled_full", False)):
        ex = KVExecutor(model, tok, cfg, "parason")
        ex.speculative_grammar = spec
        c0 = time.process_time()
        ex.run(prompts, SamplingParams(max_new_tokens=max_new_tokens, seed=0))
        _add(acc[name], ex, time.process_time() - c0)


def _add(a: dict, ex, cpu: float) -> None:
    a["cpu"] += cpu
    a["decode"] += ex.timing["decode"]
    if ex.grammar is not None:
        a["grammar"] += ex.grammar.seconds
        a["masked"] += ex.grammar.calls  # rows that got a full mask
        a["checked"] += ex.grammar.checks  # draws checked speculatively


@torch.no_grad()
def device_time(model, shapes: list[tuple[int, int, bool]]) -> float:
    """Seconds the model alone takes for a schedule of decode steps (rows, cache width, masked).

    Each step runs through the executor's own `KVDecoder` on a cache of that shape (zeros; a
    masked step gets one padding column), rebuilt only where the shape does not simply grow by
    one column; only the steps are timed.
    """
    cfg, dev = model.config, next(model.parameters()).device
    Hkv, D = cfg.num_key_value_heads, getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    dec, total, prev = KVDecoder(model), 0.0, None
    for R, W, padded in shapes:
        if prev != (R, W - 1, padded):
            mask = torch.ones((R, W), dtype=torch.long, device=dev)
            mask[0, 0] = 0 if padded else 1
            kv = [tuple(torch.zeros(R, Hkv, W + dec.spare, D, device=dev, dtype=model.dtype) for _ in "kv")
                  for _ in range(cfg.num_hidden_layers)]
            dec.load(kv, mask)
            ids = torch.zeros((R, 1), dtype=torch.long, device=dev)
            pos = torch.full((R, 1), W, dtype=torch.long, device=dev)
        sync()
        t0 = time.perf_counter()
        dec.step(ids, pos)
        sync()
        total += time.perf_counter() - t0
        pos, prev = pos + 1, (R, W, padded)
    return total


def critical_path(e, prompt_len: int) -> int:
    return max(e.record.position_ids) + 1 - prompt_len


def bench_batch(model, tok, problems, B: int, repeat: int, sampled_tokens: int, grammar: bool = True) -> dict:
    """Speed-ups over `problems` decoded B at a time."""
    out = {"B": B, "t_seq": 0.0, "t_exec": 0.0, "c_seq": 0.0, "c_exec": 0.0, "steps_seq": 0, "steps_exec": 0,
           "d_seq": 0.0, "d_exec": 0.0, "tok": []}
    acc = {k: dict.fromkeys(("cpu", "decode", "grammar", "masked", "checked"), 0.0)
           for k in (*GRAMMAR_VARIANTS, "sampled_spec", "sampled_full")}
    for i in range(0, len(problems), B):
        chunk = problems[i:i + B]
        plen = [len(tok.encode(p.prompt)) for p in chunk]
        ts, te = (float("inf"),) * 2, (float("inf"),) * 2
        for _ in range(repeat):  # the modes alternate, so both see the same load
            t, seq, ex_seq = timed_run(model, tok, chunk, "sequential", False, 1)
            ts = tuple(map(min, ts, t))
            t, exe, ex_exe = timed_run(model, tok, chunk, "executed", False, 1)
            te = tuple(map(min, te, t))
        for _ in range(repeat):
            out["d_seq"] += device_time(model, ex_seq.shapes) / repeat
            out["d_exec"] += device_time(model, ex_exe.shapes) / repeat
        for a, b in zip(seq, exe):
            assert a.token_ids == b.token_ids, "modes wrote different tokens"
        out["t_seq"] += ts[0]
        out["t_exec"] += te[0]
        out["c_seq"] += ts[1]
        out["c_exec"] += te[1]
        out["steps_seq"] += max(len(e.token_ids) for e in seq)
        out["steps_exec"] += max(critical_path(e, n) for e, n in zip(exe, plen))
        out["tok"] += [len(e.token_ids) / critical_path(e, n) for e, n in zip(exe, plen)]
        if grammar:
            grammar_runs(model, tok, chunk, repeat, acc)
        if grammar and sampled_tokens:
            sampled_runs(model, tok, chunk, sampled_tokens, acc)
    tok_speedup = sum(out["tok"]) / len(out["tok"])
    step_speedup = out["steps_seq"] / out["steps_exec"]
    wall = out["t_seq"] / out["t_exec"]
    cpu = out["c_seq"] / out["c_exec"]
    device = out["d_seq"] / out["d_exec"]
    return {
        "batch": B,
        "token_speedup": round(tok_speedup, 3),
        "step_speedup": round(step_speedup, 3),
        "wall_speedup": round(wall, 3),
        "realisation_vs_steps": round(wall / step_speedup, 3),
        "realisation_vs_tokens": round(wall / tok_speedup, 3),
        "cpu_speedup": round(cpu, 3),
        "cpu_realisation_vs_steps": round(cpu / step_speedup, 3),
        "device_speedup": round(device, 3),
        "realisation_vs_device": round(wall / device, 3),
        "rows_per_step_exec": round(sum(r for r, _, _ in ex_exe.shapes) / len(ex_exe.shapes), 2),
        "t_seq_s": round(out["t_seq"], 3),
        "t_exec_s": round(out["t_exec"], 3),
        **(grammar_figures(acc) if grammar else {}),
    }


def grammar_figures(acc: dict) -> dict:
    def share(k):  # masker seconds / decode seconds
        return round(acc[k]["grammar"] / acc[k]["decode"], 4) if acc[k]["decode"] else None

    def refused(k):  # share of speculative draws the grammar refused (then masked and redrawn)
        return round(acc[k]["masked"] / acc[k]["checked"], 3) if acc[k]["checked"] else None

    return {
        "grammar_mask_over_decode": share("spec"),
        "grammar_full_mask_over_decode": share("full"),
        "grammar_cpu_overhead": round(acc["spec"]["cpu"] / acc["off"]["cpu"] - 1, 3),
        "grammar_full_cpu_overhead": round(acc["full"]["cpu"] / acc["off"]["cpu"] - 1, 3),
        "grammar_refused": refused("spec"),
        "sampled_mask_over_decode": share("sampled_spec"),
        "sampled_full_mask_over_decode": share("sampled_full"),
        "sampled_refused": refused("sampled_spec"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--difficulty", type=int, default=3)
    ap.add_argument("--family", default="subtask")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=128, help="tiny model width (grammar cost vs decode cost)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--sampled-tokens", type=int, default=128, help="free-sampling grammar runs (0: skip)")
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the rollout actor's default is 2)")
    ap.add_argument("--no-grammar", action="store_true", help="skip the grammar runs (no xgrammar installed)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from parallax.tinylm import TinyModelConfig, build_tiny_model

    mcfg = TinyModelConfig(hidden_size=args.hidden, num_layers=args.layers, intermediate_size=3 * args.hidden)
    path = build_tiny_model(tempfile.mkdtemp(prefix="bench_exec_"), mcfg, toyworld.corpus(500, 0))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(args.device).eval()
    tok = AutoTokenizer.from_pretrained(path)
    problems = toyworld.generate(args.family, args.n, seed=0, difficulty=args.difficulty)
    print(f"load: {os.getloadavg()}  n={args.n} family={args.family} difficulty={args.difficulty} "
          f"model: hidden={args.hidden} layers={args.layers} device={args.device} threads={args.threads}")
    rows = [bench_batch(model, tok, problems, B, args.repeat, args.sampled_tokens, not args.no_grammar)
            for B in args.batch]
    keys = list(rows[0])
    print(" ".join(f"{k:>12.12}" for k in keys))
    for r in rows:
        print(" ".join(f"{r[k]!s:>12.12}" for k in keys))
    print(json.dumps({"bench": "executor", "device": args.device, "threads": args.threads, "load": os.getloadavg(),
                      "n": args.n, "family": args.family, "difficulty": args.difficulty, "hidden": args.hidden,
                      "layers": args.layers, "rows": rows}))


if __name__ == "__main__":
    main()
