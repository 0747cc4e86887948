"""Benchmark: the request executor (vLLM's path) against the KV executor, on the same trajectories.

The tiny model (random weights) replays toyworld Parason teacher traces (`Replay`, passed to the
hf engine as an engine-level processor), so every run writes the same tokens (checked) and only
the execution differs. Per batch size B, in one process, runs alternating per repeat:

* requests, sequential: one request chain per trajectory; every tag ends an engine request and
  the next one re-reads the whole context (the hf engine re-prefills it; vLLM would hit its prefix
  cache);
* requests, executed: one request per branch, batched across trajectories; a join re-reads
  prefix + branches;
* kv, executed: the KV executor (fork the prefix KV, merge branch KV at the join) for reference.

Figures:

* token_speedup = response tokens / critical-path tokens (from the KV executor's record);
* req_wall_speedup = wall(requests, sequential) / wall(requests, executed); req_realisation =
  that / token_speedup (Parason's definition; 0.81-0.93 on SGLang/A800);
* kv_wall_speedup, kv_over_req = wall(requests, executed) / wall(kv, executed): what merging KV
  saves over re-reading contexts on this engine;
* rounds (engine calls) per mode, context tokens re-read per generated token (`reread_per_token`:
  the prefill work the engine repeats; prefix caching makes most of it cache hits on vLLM);
* `--grammar`: grammar_overhead = wall(requests, executed, each request under its grammar
  fragment; xgrammar bitmasks on every row and step of the hf engine) / wall(same, no grammar) - 1;
* learner tokens: the rows the learner scores for these records, over one text-order row per
  trajectory — `tw_tokens_ratio` for threadweaver (one causal row per request: the prefix once
  per request), `struct_tokens_ratio` for structured (the text plus copies of later branches,
  parallax/layouts/reprefill.py). Both are exact; the KV executor's records need ratio 1.0.

    python bench/bench_requests.py [--n 16] [--batch 1 4 16] [--repeat 3] [--threads 1] [--grammar]

Prints a table and a final JSON line. On CPU the engine re-prefills every request: this measures
the executor's scheduling and the re-read cost, not what vLLM would reach (that needs the GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from functools import partial

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.append(os.path.join(ROOT, "tests"))  # the tests' replay double (tests/doubles/replay.py)

import torch
from doubles.replay import SCRIPT_PROCESSOR, Replay, role_scripts, sequential_script

from parallax import toyworld
from parallax.contract.batch import SamplingParams, Trajectory, with_advantages
from parallax.contract.config import ExecutorConfig
from parallax.executors.kv import KVExecutor
from parallax.executors.requests import RequestExecutor
from parallax.formats import parse
from parallax.layouts import build_train_batch


class Counting:
    """The engine, counting what it is asked to read and write (instrumentation, not a double)."""

    def __init__(self, engine):
        self.engine, self.read, self.calls = engine, 0, 0

    def __getattr__(self, name):  # streams, stop_ids, poll, abort: the engine's own
        return getattr(self.engine, name)

    def generate(self, prompts, params, **kw):
        self.read += sum(len(p) for p in prompts)
        self.calls += 1
        return self.engine.generate(prompts, params, **kw)

    def submit(self, key, prompt, *a, **kw):
        self.read += len(prompt)
        return self.engine.submit(key, prompt, *a, **kw)


def run_once(engine, tok, problems, dispatch: str, mode: str, grammar: bool = False, driver: str = "rounds"):
    """(wall seconds, executions, engine counter) of one run over `problems`."""
    trees = [parse(p.traces["parason"], "parason").tree for p in problems]
    scripts = [role_scripts(t, "parason", tok) if mode == "executed" else sequential_script(t, "parason", tok)
               for t in trees]
    cfg = ExecutorConfig(mode=mode, max_branches=8, max_branch_tokens=512, grammar=grammar, driver=driver)
    prompts = [tok.encode(p.prompt) for p in problems]
    params = SamplingParams(max_new_tokens=1024, seed=0)
    counter = Counting(engine)
    if dispatch == "requests":
        ex = RequestExecutor(counter, tok, cfg, "parason", Replay(scripts, tok.eos_token_id))
    else:
        ex = KVExecutor(engine.model, tok, cfg, "parason", Replay(scripts, tok.eos_token_id))
    t0 = time.perf_counter()
    res = ex.run(prompts, params)
    if dispatch == "requests" and ex.streaming:
        counter.calls = ex.rounds  # engine steps: no rounds to count
    return time.perf_counter() - t0, res, counter


def time_variants(runs: dict, repeat: int) -> tuple[dict, dict]:
    """Best wall time and last (executions, counter) of each `run_once` partial, alternating per repeat
    so every variant sees the same load; every variant must write the KV executor's tokens."""
    best, outs = dict.fromkeys(runs, float("inf")), {}
    for _ in range(repeat):
        for key, run in runs.items():
            t, res, counter = run()
            best[key] = min(best[key], t)
            outs[key] = (res, counter)
    texts = {k: [r.token_ids for r in res] for k, (res, _) in outs.items()}
    assert all(t == texts["kv_exec"] for t in texts.values()), "variants wrote different tokens"
    return best, outs


VARIANTS = (("req_seq", "requests", "sequential", False), ("req_exec", "requests", "executed", False),
            ("kv_exec", "kv", "executed", False))
GRAMMAR = (("req_exec_grammar", "requests", "executed", True),)


def bench_batch(engine, tok, problems, B: int, repeat: int, grammar: bool = False) -> dict:
    variants = VARIANTS + (GRAMMAR if grammar else ())
    wall = {k: 0.0 for k, *_ in variants}
    ratios, calls, read, gen, row_tokens = [], {"req_seq": 0, "req_exec": 0}, 0, 0, 0
    learner = {"threadweaver": 0, "structured": 0}
    for i in range(0, len(problems), B):
        chunk = problems[i:i + B]
        best, outs = time_variants({key: partial(run_once, engine, tok, chunk, dispatch, mode, constrained)
                                    for key, dispatch, mode, constrained in variants}, repeat)
        for k in wall:
            wall[k] += best[k]
        for k in calls:
            calls[k] += outs[k][1].calls
        prompts = [tok.encode(p.prompt) for p in chunk]
        kv_res, (req_res, counter) = outs["kv_exec"][0], outs["req_exec"]
        read += counter.read
        gen += sum(len(r.token_ids) for r in req_res)
        ratios += [len(r.token_ids) / (max(r.record.position_ids) + 1 - len(p)) for r, p in zip(kv_res, prompts)]
        trajs = [Trajectory(str(j), p, r.token_ids, r.logprobs, r.finish_reason, "", r.record)
                 for j, (p, r) in enumerate(zip(prompts, req_res))]
        trajs = with_advantages(trajs, [0.0] * len(trajs))
        for layout in learner:
            learner[layout] += int(build_train_batch(layout, trajs, 0).attention_mask.sum())
        row_tokens += sum(len(p) + len(r.token_ids) for p, r in zip(prompts, req_res))
    token_speedup = sum(ratios) / len(ratios)
    req = wall["req_seq"] / wall["req_exec"]
    return {
        "batch": B,
        "token_speedup": round(token_speedup, 3),
        "req_wall_speedup": round(req, 3),
        "req_realisation": round(req / token_speedup, 3),
        "kv_wall_speedup_vs_req_seq": round(wall["req_seq"] / wall["kv_exec"], 3),
        "kv_over_req": round(wall["req_exec"] / wall["kv_exec"], 3),
        "rounds_seq": calls["req_seq"],
        "rounds_exec": calls["req_exec"],
        "reread_per_token": round(read / gen, 2),
        "tw_tokens_ratio": round(learner["threadweaver"] / row_tokens, 3),
        "struct_tokens_ratio": round(learner["structured"] / row_tokens, 3),
        "t_req_seq_s": round(wall["req_seq"], 3),
        "t_req_exec_s": round(wall["req_exec"], 3),
        "t_kv_exec_s": round(wall["kv_exec"], 3),
        **({"grammar_overhead": round(wall["req_exec_grammar"] / wall["req_exec"] - 1, 3)} if grammar else {}),
    }


VLLM_VARIANTS = (("vllm_seq", "requests", "sequential", "async"), ("vllm_exec", "requests", "executed", "async"),
                 ("vllm_exec_rounds", "requests", "executed", "rounds"))
KV_VARIANTS = (("kv_seq", "kv", "sequential", "rounds"), ("kv_exec", "kv", "executed", "rounds"))


def bench_vllm_batch(vllm_engine, hf_engine, tok, problems, B: int, repeat: int) -> dict:
    """vLLM (prefix caching, scripts pinned in its workers) with the async driver and with rounds, next
    to the hf KV executor, on the same trajectories: realisation = wall speed-up / token speed-up."""
    variants = [(k, vllm_engine, *v) for k, *v in VLLM_VARIANTS] + [(k, hf_engine, *v) for k, *v in KV_VARIANTS]
    wall, steps, ratios = dict.fromkeys((k for k, *_ in variants), 0.0), {}, []
    for _, engine, dispatch, mode, driver in variants:  # warm-up, untimed (vLLM's first steps are slow)
        run_once(engine, tok, problems[:B], dispatch, mode, driver=driver)
    for i in range(0, len(problems), B):
        chunk = problems[i:i + B]
        best, outs = time_variants({key: partial(run_once, engine, tok, chunk, dispatch, mode, driver=driver)
                                    for key, engine, dispatch, mode, driver in variants}, repeat)
        for k in wall:
            wall[k] += best[k]
        for k in ("vllm_seq", "vllm_exec", "vllm_exec_rounds"):
            steps[k] = steps.get(k, 0) + outs[k][1].calls
        prompts = [tok.encode(p.prompt) for p in chunk]
        ratios += [len(r.token_ids) / (max(r.record.position_ids) + 1 - len(p))
                   for r, p in zip(outs["kv_exec"][0], prompts)]
    token_speedup = sum(ratios) / len(ratios)

    def real(seq: str, exe: str) -> float:
        return round(wall[seq] / wall[exe] / token_speedup, 3)

    return {
        "batch": B,
        "token_speedup": round(token_speedup, 3),
        "vllm_realisation": real("vllm_seq", "vllm_exec"),
        "vllm_rounds_realisation": real("vllm_seq", "vllm_exec_rounds"),
        "kv_realisation": real("kv_seq", "kv_exec"),
        "async_over_rounds": round(wall["vllm_exec_rounds"] / wall["vllm_exec"], 3),
        "steps_async": steps["vllm_exec"],
        "calls_rounds": steps["vllm_exec_rounds"],
        **{f"t_{k}_s": round(v, 3) for k, v in wall.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--difficulty", type=int, default=3)
    ap.add_argument("--family", default="subtask")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--grammar", action="store_true", help="also time executed requests under their grammars")
    ap.add_argument("--engine", default="hf", choices=("hf", "vllm"),
                    help="vllm: the vLLM engine (CPU build or GPU), async driver and rounds, "
                         "next to the hf KV executor")
    ap.add_argument("--kv-gib", type=int, default=1, help="vLLM on CPU: KV cache GiB")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from parallax.engines.hf import HFEngine
    from parallax.tinylm import TinyModelConfig, build_tiny_model

    mcfg = TinyModelConfig(hidden_size=args.hidden, num_layers=args.layers, intermediate_size=3 * args.hidden)
    path = build_tiny_model(tempfile.mkdtemp(prefix="bench_req_"), mcfg, toyworld.corpus(500, 0))
    engine = HFEngine(str(path))
    tok = engine.tokenizer
    problems = toyworld.generate(args.family, args.n, seed=0, difficulty=args.difficulty)
    print(f"load: {os.getloadavg()}  n={args.n} family={args.family} difficulty={args.difficulty} "
          f"model: hidden={args.hidden} layers={args.layers} threads={args.threads}")
    if args.engine == "vllm":
        from parallax.engines.vllm import VLLMEngine

        dtype = "bfloat16" if torch.cuda.is_available() else "float32"
        vllm_engine = VLLMEngine(str(path), dtype=dtype, max_batch_size=max(64, 4 * max(args.batch)),
                                 enforce_eager=True, cpu_kvcache_gib=args.kv_gib,
                                 logits_processors=[SCRIPT_PROCESSOR],
                                 gpu_memory_utilization=0.3)
        try:
            rows = [bench_vllm_batch(vllm_engine, engine, tok, problems, B, args.repeat) for B in args.batch]
        finally:
            vllm_engine.close()
    else:
        rows = [bench_batch(engine, tok, problems, B, args.repeat, args.grammar) for B in args.batch]
    keys = list(rows[0])
    print(" ".join(f"{k:>12.12}" for k in keys))
    for r in rows:
        print(" ".join(f"{r[k]!s:>12.12}" for k in keys))
    print(json.dumps({"bench": "requests", "engine": args.engine, "threads": args.threads, "load": os.getloadavg(),
                      "n": args.n, "family": args.family, "difficulty": args.difficulty, "hidden": args.hidden,
                      "layers": args.layers, "rows": rows}))


if __name__ == "__main__":
    main()
