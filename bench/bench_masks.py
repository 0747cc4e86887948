"""Structured-attention benchmarks: training-step cost of the mask, and learner/engine consistency.

    PYTHONPATH=. python bench/bench_masks.py step [--lengths 1024 4096] [--steps 5] [--threads 1]
    PYTHONPATH=. python bench/bench_masks.py consistency [--n 8]

``step``: forward+backward of a tiny Qwen3 (fp32, CPU, batch 1) per layout; step time is the min
over interleaved steps (robust to a shared machine), peak RSS is measured in a fresh subprocess:
  causal      plain causal attention (HF's SDPA is_causal path, no mask tensor);
  structured  parallax/layouts/masks.py: layout tensors -> vectorised 4-D SDPA mask + predictor gather
              (mask construction is inside the timed step);
  naive       the same 4-D mask built the way the public Parallel-R1 code does it in spirit: a
              Python loop over every (query, key) pair (build time reported separately).
The synthetic layout: a 10% prompt, then blocks of 4 branches (each 1/20 of L) and a join.
Prints a table and one JSON line.

``consistency``: replays toy-world teacher traces through the real executor (executed and
sequential modes, both formats) and prints max |learner logprob - engine logprob| per mode.

    PYTHONPATH=. python bench/bench_masks.py sft-packing [--batch 64] [--pack-lengths 128 256 512]

``sft-packing``: one cold-start SFT step (the learner's micro-batching, packing, loss, backward and
AdamW step; no DeepSpeed wrapper, which costs the same either way) on the default toy SFT data and
tiny model, unpacked vs packed at each pack length, for the causal and structured layouts. Reports
the min and median wall time over interleaved steps, the median process CPU time (with one
thread, the figure a loaded shared machine disturbs least; `x unpacked` compares it) and the
padding share of the scored cells.

    PYTHONPATH=. python bench/bench_masks.py flex [--length 4096] [--device cuda --dtype bfloat16]

``flex``: FlexAttention (learner.attn_implementation=flex_attention) against the block-sparse SDPA
on the synthetic structured row and the tiny model: max |logprob diff|, and where FlexAttention has a
backward (CUDA; not CPU) the gradients' max relative diff and forward+backward times, else forward
times; interleaved min times, peak CUDA memory, and the masks' sizes. The GPU check runs it on CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.append(os.path.join(ROOT, "tests"))  # the tests' replay double (tests/doubles/replay.py)

from parallax.contract.batch import ExecutionRecord, with_advantages
from parallax.layouts import masks


def synthetic_record(L: int, branches: int = 4) -> ExecutionRecord:
    """Prompt (10%), then blocks of `branches` branches (L/20 each) + a join segment, until L tokens."""
    seg, pos, vis, n = [0] * (L // 10), list(range(L // 10)), [[]], L // 10
    p, history, b_len = n, [0], max(1, L // 20)
    while n < L:
        ends = []
        for _ in range(branches):
            k = min(b_len, L - n)
            if k <= 0:
                break
            vis.append(list(history))
            seg += [len(vis) - 1] * k
            pos += range(p, p + k)
            ends.append(len(vis) - 1)
            n += k
        history = history + ends
        k = min(b_len, L - n)
        p += b_len
        if k > 0:
            vis.append(list(history))
            seg += [len(vis) - 1] * k
            pos += range(p, p + k)
            history.append(len(vis) - 1)
            n, p = n + k, p + k
    return ExecutionRecord(pos, seg, vis, [-1] * len(vis), [True] * L)


def naive_mask(rec: ExecutionRecord) -> torch.Tensor:
    """Dense [1, 1, L, L] bool mask from a per-token-pair Python loop (the approach we replace)."""
    L = len(rec.segment_ids)
    rows = []
    for i in range(L):
        si = rec.segment_ids[i]
        seen = set(rec.segment_visible[si]) | {si}
        rows.append([j <= i and rec.segment_ids[j] in seen for j in range(L)])
    return torch.tensor(rows)[None, None]


def tiny_model(max_pos: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=400,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=max_pos,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=1,
        pad_token_id=0,
    )
    return Qwen3ForCausalLM(cfg)


def _stepper(layout: str, L: int):
    """(model, step function) for one layout; the structured step builds its mask inside."""
    from parallax.layouts.logprobs import token_logprobs

    model = tiny_model(2 * L)
    ids = torch.randint(2, 400, (1, L), generator=torch.Generator().manual_seed(0))
    rec = synthetic_record(L)
    dense = naive_mask(rec) if layout == "naive" else None

    def step() -> None:
        if layout == "causal":
            logp = token_logprobs(model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits, ids)
        else:
            pos, seg, vis = masks.pack_records([rec])
            if layout == "structured":
                logp = masks.structured_logprobs(model, ids, pos, seg, vis)
            else:
                logits = model(input_ids=ids, attention_mask=dense, position_ids=pos).logits
                logp = masks.structured_token_logprobs(logits, ids, masks.predictor_index(seg, vis))
        (-logp.mean()).backward()
        model.zero_grad(set_to_none=True)

    return step


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def worker(layout: str, L: int) -> dict:
    """Peak RSS during the first training step above the RSS just before it (sampled every 2 ms)."""
    import threading

    step = _stepper(layout, L)  # no warm-up: a freed warm-up peak would stay in the RSS baseline
    base, peak, done = _rss_mib(), [0.0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_mib())
            time.sleep(0.002)

    watcher = threading.Thread(target=sample)
    watcher.start()
    step()
    done.set()
    watcher.join()
    return {"layout": layout, "L": L, "peak_mib": max(0.0, max(peak[0], _rss_mib()) - base)}


LAYOUT_NAMES = ("causal", "structured", "naive")


def time_layouts(L: int, steps: int) -> dict[str, float]:
    """Min step time per layout, layouts interleaved round-robin so machine load hits them alike."""
    steppers = {name: _stepper(name, L) for name in LAYOUT_NAMES}
    for step in steppers.values():
        step()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in LAYOUT_NAMES}
    for _ in range(steps):
        for name, step in steppers.items():
            t0 = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t0)
    return {name: min(ts) for name, ts in times.items()}


def run_step(args) -> None:
    rows = []
    for L in args.lengths:
        t0 = time.perf_counter()
        naive_mask(synthetic_record(L))
        build = time.perf_counter() - t0
        step_s = time_layouts(L, args.steps)
        for layout in LAYOUT_NAMES:
            cmd = [sys.executable, __file__, "_worker", layout, str(L), str(args.threads)]
            out = (
                subprocess.run(cmd, capture_output=True, text=True, check=True)
                .stdout.strip()
                .splitlines()[-1]
            )
            row = json.loads(out)
            row.update(
                step_s=step_s[layout],
                vs_causal=step_s[layout] / step_s["causal"],
                mask_build_s=build if layout == "naive" else 0.0,
                segments=len(synthetic_record(L).segment_visible),
            )
            rows.append(row)
    print(f"{'L':>6} {'layout':<11} {'step s':>8} {'x causal':>9} {'peak MiB':>9} {'naive mask build s':>19}")
    for r in rows:
        print(
            f"{r['L']:>6} {r['layout']:<11} {r['step_s']:>8.3f} {r['vs_causal']:>9.2f} {r['peak_mib']:>9.1f} "
            f"{r['mask_build_s']:>19.3f}"
        )
    print(json.dumps({"bench": "masks_step", "threads": args.threads, "steps": args.steps, "rows": rows}))


def run_consistency(args) -> None:
    import tempfile

    from doubles.replay import Replay
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from parallax import toyworld
    from parallax.contract.batch import SamplingParams, Trajectory
    from parallax.contract.config import ExecutorConfig
    from parallax.executors.kv import KVExecutor
    from parallax.layouts import build_train_batch
    from parallax.layouts.logprobs import token_logprobs
    from parallax.layouts.sft_records import teacher_role_scripts
    from parallax.tinylm import TinyModelConfig, build_tiny_model

    path = build_tiny_model(
        tempfile.mkdtemp(), TinyModelConfig(max_position_embeddings=2048), toyworld.corpus(500, 0)
    )
    model, tok = AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    problems, _ = toyworld.make_splits(args.n, 1, seed=1, difficulty=2, family="mixed")
    prompts = [tok(p.prompt, add_special_tokens=False)["input_ids"] for p in problems]
    result = {}
    for fmt in ("parason", "parallel_r1"):
        for mode in ("executed", "sequential"):
            scripts = [
                teacher_role_scripts(pr, p.traces[fmt], fmt, tok, mode) for pr, p in zip(prompts, problems)
            ]
            cfg = ExecutorConfig(mode=mode, num_paths=3)  # difficulty 2: 3 branches
            runs = KVExecutor(model, tok, cfg, fmt, Replay(scripts, tok.eos_token_id)).run(
                prompts, SamplingParams(max_new_tokens=400, temperature=1.0, seed=0)
            )
            trajs = [
                Trajectory(p.uid, pr, r.token_ids, r.logprobs, r.finish_reason, "", r.record)
                for p, pr, r in zip(problems, prompts, runs)
            ]
            for layout in ("structured", "causal", "threadweaver"):
                batch = build_train_batch(layout, with_advantages(trajs, [0.0] * len(trajs)), tok.pad_token_id)
                with torch.no_grad():
                    if layout == "structured":
                        logp = masks.structured_logprobs(model, batch.input_ids, *batch.structure())
                    else:  # causal and threadweaver rows are scored with plain causal attention
                        logp = token_logprobs(
                            model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits,
                            batch.input_ids,
                        )
                mask = batch.response_mask  # structured / threadweaver: sampled tokens only
                if layout == "causal":
                    mask = mask * _pad_rows(
                        [[float(s) for s in t.record.sampled] for t in trajs], mask.shape[1]
                    )
                diff = float(((logp - batch.old_logprobs) * mask).abs().max())
                result[f"{fmt}/{mode}/{layout}"] = diff
                n_tok = int(mask.sum())
                print(f"{fmt:<12} {mode:<11} learner={layout:<13} tokens={n_tok:>5} max|dlogp|={diff:.2e}")
    print(json.dumps({"bench": "masks_consistency", "max_abs_diff": result}))


def run_sft_packing(args) -> None:
    import dataclasses
    import statistics
    import tempfile

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from actors.scoring import sft_loss, sft_micro_batches
    from parallax.contract.config import DataConfig, LearnerConfig
    from parallax.layouts.causal import sft_batch
    from parallax.layouts.structured import structured_sft_batch
    from parallax.tinylm import TinyModelConfig, build_tiny_model
    from parallax.trainingdata.streams import batches, load_problems, tokenizer_corpus

    data = DataConfig()  # the default run's toy data: parallel_r1 traces, difficulty 1
    train, _ = load_problems(data)
    path = build_tiny_model(tempfile.mkdtemp(), TinyModelConfig(), tokenizer_corpus(data))
    tok = AutoTokenizer.from_pretrained(path)
    stream = batches(train, args.batch, seed=0)
    problems = [next(stream) for _ in range(args.steps + 1)]
    base = LearnerConfig(micro_batch_size=args.micro_batch_size)
    variants = {"unpacked": base} | {
        f"packed@{n}": dataclasses.replace(base, sft_packing=True, sft_pack_length=n) for n in args.pack_lengths
    }
    rows = []
    for layout in ("causal", "structured"):
        built = [
            structured_sft_batch(ps, data.trace, tok) if layout == "structured" else sft_batch(ps, data.trace, tok)
            for ps in problems
        ]
        models = {}
        for name in variants:  # one model + optimizer per variant, same init
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).train()
            models[name] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4))
        times: dict[str, list[float]] = {name: [] for name in variants}
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        pads: dict[str, float] = {}
        for k, batch in enumerate(built):
            for name, cfg in variants.items():  # interleaved: machine load hits every variant alike
                model, opt = models[name]
                tokens = int(batch.loss_mask.sum())
                t0, c0 = time.perf_counter(), time.process_time()
                micro = sft_micro_batches(batch, cfg)
                for mb in micro:
                    sft_loss(model, mb, tokens).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if k:  # the first step is a warm-up
                    times[name].append(time.perf_counter() - t0)
                    cpu[name].append(time.process_time() - c0)
                cells = sum(mb.attention_mask.numel() for mb in micro)
                pads[name] = pads.get(name, 0.0) + (1 - sum(int(mb.attention_mask.sum()) for mb in micro) / cells)
        for name in variants:
            rows.append({"layout": layout, "variant": name, "min_s": min(times[name]),
                         "median_s": statistics.median(times[name]), "cpu_s": statistics.median(cpu[name]),
                         "pad_frac": pads[name] / len(built)})
        ref = next(r for r in rows if r["layout"] == layout and r["variant"] == "unpacked")
        for r in rows:
            if r["layout"] == layout:
                r["vs_unpacked"] = r["cpu_s"] / ref["cpu_s"]
    print(f"{'layout':<11} {'variant':<12} {'min s':>7} {'median s':>9} {'cpu s':>7} {'x unpacked':>11} {'padding':>8}")
    for r in rows:
        print(f"{r['layout']:<11} {r['variant']:<12} {r['min_s']:>7.3f} {r['median_s']:>9.3f} {r['cpu_s']:>7.3f} "
              f"{r['vs_unpacked']:>11.2f} {r['pad_frac']:>8.1%}")
    print(json.dumps({"bench": "sft_packing", "batch": args.batch, "micro_batch_size": args.micro_batch_size,
                      "threads": args.threads, "steps": args.steps, "loadavg": os.getloadavg()[0], "rows": rows}))


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_flex(args) -> None:
    """FlexAttention against the block-sparse SDPA on one structured row: same logprobs (and, where
    FlexAttention has a backward, same gradients), forward (+backward) time, and the masks' sizes."""
    L, device = args.length, args.device
    dtype = getattr(torch, args.dtype)
    ids = torch.randint(2, 400, (1, L), generator=torch.Generator().manual_seed(0)).to(device)
    pos, seg, vis = (t.to(device) for t in masks.pack_records([synthetic_record(L)]))
    models = {}
    for impl in ("sdpa", "flex_attention"):
        models[impl] = tiny_model(2 * L).to(device=device, dtype=dtype)
        models[impl].config._attn_implementation = impl

    def score(impl: str, backward: bool):
        m = models[impl]
        m.zero_grad(set_to_none=True)
        with torch.set_grad_enabled(backward):
            logp = masks.structured_logprobs(m, ids, pos, seg, vis)
            if backward:
                logp.float().sum().backward()
        return logp.detach().float()

    backward = "ok"
    try:  # FlexAttention's backward: CUDA has it; CPU (torch 2.13) raises
        score("flex_attention", True)
    except NotImplementedError as e:
        backward = str(e).split(".")[0]
    grad = backward == "ok"
    t0 = time.perf_counter()
    out = {k: score(k, grad) for k in models}  # warm-up: compile
    first = time.perf_counter() - t0
    grad_diff = None
    if grad:
        flat = {k: torch.cat([p.grad.float().flatten() for p in m.parameters()]) for k, m in models.items()}
        grad_diff = float((flat["sdpa"] - flat["flex_attention"]).abs().max() / flat["sdpa"].abs().max())
    times: dict[str, list[float]] = {k: [] for k in models}
    peak: dict[str, float | None] = {k: None for k in models}
    for _ in range(args.steps):
        for k in models:  # interleaved: load hits both alike
            if device.startswith("cuda"):
                torch.cuda.reset_peak_memory_stats()
            _sync(device)
            t0 = time.perf_counter()
            score(k, grad)
            _sync(device)
            times[k].append(time.perf_counter() - t0)
            if device.startswith("cuda"):
                peak[k] = torch.cuda.max_memory_allocated() / 2**20
    block = masks.flex_block_mask(seg, vis)
    block_bytes = sum(t.numel() * t.element_size() for t in block.as_tuple() if isinstance(t, torch.Tensor))
    row = {"L": L, "device": device, "dtype": args.dtype, "timed": "forward+backward" if grad else "forward",
           "sdpa_s": min(times["sdpa"]), "flex_s": min(times["flex_attention"]),
           "flex_over_sdpa": min(times["flex_attention"]) / min(times["sdpa"]), "first_calls_s": first,
           "max_abs_diff": float((out["sdpa"] - out["flex_attention"]).abs().max()), "grad_rel_diff": grad_diff,
           "sdpa_peak_mib": peak["sdpa"], "flex_peak_mib": peak["flex_attention"],
           "dense_mask_mib": L * L / 2**20, "block_mask_kib": block_bytes / 2**10, "flex_backward": backward}
    for k, v in row.items():
        print(f"{k:<16} {v:.4g}" if isinstance(v, float) else f"{k:<16} {v}")
    print(json.dumps({"bench": "flex", "loadavg": os.getloadavg()[0], **row}))


def _pad_rows(rows: list[list[float]], width: int) -> torch.Tensor:
    return torch.tensor([r + [0.0] * (width - len(r)) for r in rows])  # [B, width]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_worker":
        layout, L, threads = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        torch.set_num_threads(threads)
        print(json.dumps(worker(layout, L)))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("step")
    st.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    st.add_argument("--steps", type=int, default=5)
    st.add_argument("--threads", type=int, default=1)
    co = sub.add_parser("consistency")
    co.add_argument("--n", type=int, default=8)
    sp = sub.add_parser("sft-packing")
    sp.add_argument("--batch", type=int, default=64)
    sp.add_argument("--micro-batch-size", type=int, default=32)
    sp.add_argument("--pack-lengths", type=int, nargs="+", default=[128, 256, 512])
    sp.add_argument("--steps", type=int, default=5)
    sp.add_argument("--threads", type=int, default=2)
    fx = sub.add_parser("flex")
    fx.add_argument("--length", type=int, default=4096)
    fx.add_argument("--device", default="cpu", help="cpu, or cuda: forward and backward there")
    fx.add_argument("--dtype", default="float32", help="float32, or bfloat16 (the GPU learner's)")
    fx.add_argument("--steps", type=int, default=5)
    fx.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(1 if args.cmd == "consistency" else args.threads)
    run = {"step": run_step, "consistency": run_consistency, "sft-packing": run_sft_packing, "flex": run_flex}
    run[args.cmd](args)


if __name__ == "__main__":
    main()
