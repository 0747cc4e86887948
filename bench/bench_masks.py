"""Structured-attention benchmarks: training-step cost of the mask, and learner/engine consistency.

    PYTHONPATH=. python bench/bench_masks.py step [--lengths 1024 4096] [--steps 5] [--threads 1]
    PYTHONPATH=. python bench/bench_masks.py consistency [--n 8]

``step``: forward+backward of a tiny Qwen3 (fp32, CPU, batch 1) per layout; step time is the min
over interleaved steps (robust to a shared machine), peak RSS is measured in a fresh subprocess:
  causal      plain causal attention (HF's SDPA is_causal path, no mask tensor);
  structured  actors/masks.py: layout tensors -> vectorised 4-D SDPA mask + predictor gather
              (mask construction is inside the timed step);
  naive       the same 4-D mask built the way the public Parallel-R1 code does it in spirit: a
              Python loop over every (query, key) pair (build time reported separately).
The synthetic layout: a 10% prompt, then blocks of 4 branches (each 1/20 of L) and a join.
Prints a table and one JSON line.

``consistency``: replays toy-world teacher traces through the real executor (executed and
sequential modes, both formats) and prints max |learner logprob - engine logprob| per mode.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from actors import masks
from orchestrator.batch import ExecutionRecord


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
    from orchestrator.algo import token_logprobs

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

    from transformers import AutoModelForCausalLM, AutoTokenizer

    import toyworld
    from actors.executor import ExecutorConfig, ParallelExecutor
    from orchestrator.algo import token_logprobs
    from orchestrator.batch import SamplingParams, Trajectory
    from orchestrator.structured import build_train_batch, replay_processor, teacher_role_scripts
    from tinylm import TinyModelConfig, build_tiny_model

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
            cfg = ExecutorConfig(format=fmt, mode=mode, num_paths=3)  # difficulty 2: 3 branches
            runs = ParallelExecutor(model, tok, cfg, replay_processor(scripts, tok.eos_token_id)).run(
                prompts, SamplingParams(max_new_tokens=400, temperature=1.0, seed=0)
            )
            trajs = [
                Trajectory(p.uid, pr, r.token_ids, r.logprobs, r.finish_reason, "", r.record)
                for p, pr, r in zip(problems, prompts, runs)
            ]
            for layout in ("structured", "causal", "threadweaver"):
                batch = build_train_batch(layout, trajs, [0.0] * len(trajs), tok.pad_token_id)
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
    args = ap.parse_args()
    torch.set_num_threads(1 if args.cmd == "consistency" else args.threads)
    run_step(args) if args.cmd == "step" else run_consistency(args)


if __name__ == "__main__":
    main()
