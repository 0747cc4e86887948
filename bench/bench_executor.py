"""Benchmark: executed branches vs sequential decoding of the same trajectories, and grammar cost.

The tiny model (random weights) is driven by `actors.executor_replay.Replay` to write toyworld
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
  far less sensitive than wall time to other processes on a shared machine.

Grammar: the same runs with xgrammar masking on; cost = masking seconds / decode seconds, and
the wall-clock overhead.

    python bench/bench_executor.py [--n 32] [--difficulty 3] [--batch 1 8 32] [--repeat 3]
                                   [--hidden 128 --layers 4]

Prints a table and a final JSON line. Uses torch.set_num_threads(1); report `uptime` with it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

import toyworld
from actors.executor import ExecutorConfig, ParallelExecutor
from actors.executor_replay import Replay, role_scripts, sequential_script
from formats import parse
from orchestrator.batch import SamplingParams


def timed_run(model, tok, problems, mode: str, grammar: bool, repeat: int):
    """Best-of-`repeat` (wall, CPU) seconds of one `run` over `problems`; returns (times, executions, executor)."""
    trees = [parse(p.traces["parason"], "parason").tree for p in problems]
    prompts = [tok.encode(p.prompt) for p in problems]
    cfg = ExecutorConfig(format="parason", mode=mode, grammar=grammar, max_branches=8, max_branch_tokens=512)
    best, cpu, res, ex = float("inf"), float("inf"), None, None
    for _ in range(repeat):
        scripts = [role_scripts(t, "parason", tok) if mode == "executed" else sequential_script(t, "parason", tok)
                   for t in trees]
        ex = ParallelExecutor(model, tok, cfg, Replay(scripts, tok.eos_token_id))
        t0, c0 = time.perf_counter(), time.process_time()
        res = ex.run(prompts, SamplingParams(max_new_tokens=1024, seed=0))
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return (best, cpu), res, ex


def critical_path(e, prompt_len: int) -> int:
    return max(e.record.position_ids) + 1 - prompt_len


def bench_batch(model, tok, problems, B: int, repeat: int) -> dict:
    """Speed-ups over `problems` decoded B at a time."""
    out = {"B": B, "t_seq": 0.0, "t_exec": 0.0, "c_seq": 0.0, "c_exec": 0.0, "steps_seq": 0, "steps_exec": 0, "tok": [], "t_seq_g": 0.0,
           "t_exec_g": 0.0, "mask_s": 0.0, "decode_s_g": 0.0, "mask_rows": 0}
    for i in range(0, len(problems), B):
        chunk = problems[i:i + B]
        plen = [len(tok.encode(p.prompt)) for p in chunk]
        ts, seq, _ = timed_run(model, tok, chunk, "sequential", False, repeat)
        te, exe, _ = timed_run(model, tok, chunk, "executed", False, repeat)
        for a, b in zip(seq, exe):
            assert a.token_ids == b.token_ids, "modes wrote different tokens"
        out["t_seq"] += ts[0]
        out["t_exec"] += te[0]
        out["c_seq"] += ts[1]
        out["c_exec"] += te[1]
        out["steps_seq"] += max(len(e.token_ids) for e in seq)
        out["steps_exec"] += max(critical_path(e, n) for e, n in zip(exe, plen))
        out["tok"] += [len(e.token_ids) / critical_path(e, n) for e, n in zip(exe, plen)]
        for mode, key in (("sequential", "t_seq_g"), ("executed", "t_exec_g")):
            tg, _, ex = timed_run(model, tok, chunk, mode, True, 1)
            out[key] += tg[0]
            out["mask_s"] += ex.grammar.seconds
            out["decode_s_g"] += ex.timing["decode"]
            out["mask_rows"] += ex.grammar.calls
    tok_speedup = sum(out["tok"]) / len(out["tok"])
    step_speedup = out["steps_seq"] / out["steps_exec"]
    wall = out["t_seq"] / out["t_exec"]
    cpu = out["c_seq"] / out["c_exec"]
    return {
        "batch": B,
        "token_speedup": round(tok_speedup, 3),
        "step_speedup": round(step_speedup, 3),
        "wall_speedup": round(wall, 3),
        "realisation_vs_steps": round(wall / step_speedup, 3),
        "realisation_vs_tokens": round(wall / tok_speedup, 3),
        "cpu_speedup": round(cpu, 3),
        "cpu_realisation_vs_steps": round(cpu / step_speedup, 3),
        "t_seq_s": round(out["t_seq"], 3),
        "t_exec_s": round(out["t_exec"], 3),
        "grammar_mask_over_decode": round(out["mask_s"] / out["decode_s_g"], 4),
        "grammar_us_per_row": round(1e6 * out["mask_s"] / max(1, out["mask_rows"]), 1),
        "grammar_wall_overhead_seq": round(out["t_seq_g"] / out["t_seq"] - 1, 3),
        "grammar_wall_overhead_exec": round(out["t_exec_g"] / out["t_exec"] - 1, 3),
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
    args = ap.parse_args()
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tinylm import TinyModelConfig, build_tiny_model

    mcfg = TinyModelConfig(hidden_size=args.hidden, num_layers=args.layers, intermediate_size=3 * args.hidden)
    path = build_tiny_model(tempfile.mkdtemp(prefix="bench_exec_"), mcfg, toyworld.corpus(500, 0))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    problems = toyworld.generate(args.family, args.n, seed=0, difficulty=args.difficulty)
    print(f"load: {os.getloadavg()}  n={args.n} family={args.family} difficulty={args.difficulty} "
          f"model: hidden={args.hidden} layers={args.layers}")
    rows = [bench_batch(model, tok, problems, B, args.repeat) for B in args.batch]
    keys = list(rows[0])
    print(" ".join(f"{k:>12.12}" for k in keys))
    for r in rows:
        print(" ".join(f"{r[k]!s:>12.12}" for k in keys))
    print(json.dumps({"bench": "executor", "load": os.getloadavg(), "n": args.n, "family": args.family,
                      "difficulty": args.difficulty, "hidden": args.hidden, "layers": args.layers, "rows": rows}))


if __name__ == "__main__":
    main()
