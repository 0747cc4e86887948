"""Benchmark: parse + metrics throughput of ``formats`` on one core.

Generates a corpus of 10,000 mixed synthetic trajectories of ~4k default units each (half
Parallel-R1, half Parason with nesting; ~10% sequential-only, ~10% truncated), then times
``parse`` + ``compute_metrics`` (default units, no tokenizer) over it.

    python bench/bench_formats.py [--n 10000] [--tokens 4000] [--repeat 3] [--seed 0]

Prints a table and one final JSON line (``{"bench": "formats", "traj_per_s": ..., ...}``):
``traj_per_s``/``mb_per_s`` from wall time, ``traj_per_cpu_s`` from process CPU time (less
sensitive to other load on the machine), a CPU calibration figure to compare machines, and
``speedups``: whether the optional C accelerator ``parallax.formats._speedups`` was used (build it with
``pip install -e .``; ``PARALLAX_FORMATS_PURE=1`` measures the pure-Python path).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from parallax.formats import PARALLEL_R1, PARASON, compute_metrics, parse
from parallax.formats.units import speedups_enabled

_WORDS = [
    "we",
    "compute",
    "the",
    "value",
    "of",
    "x",
    "so",
    "3*4=12",
    "then",
    "5+7=12",
    "and",
    "hence",
    "total",
    "is",
    "42",
    "check",
    "y",
    "<",
    "3",
    "because",
    "(a+b)^2",
    "=",
    "a^2+2ab+b^2",
    "therefore",
    "answer",
    "follows",
    "let",
    "n",
    "=",
    "10",
    "sum",
    "over",
    "k",
]


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(_WORDS, k=max(n, 1)))


def _parason_block(rng: random.Random, budget: int, depth: int, max_depth: int) -> str:
    """A Parason block of about ``budget`` units (2-4 branches, nested with probability 0.3)."""
    n = rng.randint(2, 4)
    kinds = [rng.choice(("Subtask", "Trial")) for _ in range(n)]
    out = ["<Parallel>\n<Outlines>"]
    for k in kinds:
        out.append(f"<{k}>{_words(rng, 6)}</{k}>")
    out.append("</Outlines>\n")
    per = max((budget - 10 * n) // n, 8)
    for _ in range(n):
        out.append("<Thread>")
        if depth < max_depth and rng.random() < 0.3:
            out.append(_words(rng, per // 4))
            out.append(_parason_block(rng, per // 2, depth + 1, max_depth))
            out.append(_words(rng, per // 4))
        else:
            out.append(_words(rng, per))
        out.append("</Thread>\n")
    out.append("</Parallel>")
    return "".join(out)


def _r1_block(rng: random.Random, budget: int) -> str:
    """A Parallel-R1 block of about ``budget`` units (2-4 paths and a summary)."""
    n = rng.randint(2, 4)
    per = max(budget // (n + 1), 8)
    paths = "".join(f"<Path>{_words(rng, per)}</Path>\n" for _ in range(n))
    return f"<Parallel>\n{paths}<Summary>{_words(rng, per)}</Summary>\n</Parallel>"


def make_corpus(n: int, tokens: int, seed: int) -> list[tuple[str, object]]:
    """``n`` mixed trajectories of about ``tokens`` default units: odd indices Parason, even
    Parallel-R1; 10% without blocks; 10% truncated at a random point of their second half."""
    rng = random.Random(seed)
    corpus = []
    for i in range(n):
        parason = i % 2 == 1
        spec = PARASON if parason else PARALLEL_R1
        nblocks = 0 if rng.random() < 0.1 else rng.randint(1, 3)
        if nblocks:
            block_budget = int(tokens * 0.7) // nblocks
            seq = (tokens - block_budget * nblocks) // (nblocks + 1)
        else:
            seq = tokens
        parts = [_words(rng, seq)]
        for _ in range(nblocks):
            parts.append(_parason_block(rng, block_budget, 1, 3) if parason else _r1_block(rng, block_budget))
            parts.append(_words(rng, seq))
        parts.append("#### 42")
        text = " ".join(parts)
        if rng.random() < 0.1:
            text = text[: rng.randint(len(text) // 2, len(text))]  # truncated output
        corpus.append((text, spec))
    return corpus


def run(corpus) -> tuple[float, float, int, int]:
    """One pass over the corpus: (wall seconds, CPU seconds, valid count, summed units)."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    ok = 0
    units = 0
    for text, spec in corpus:
        r = parse(text, spec)
        if r.ok:
            ok += 1
            units += compute_metrics(r, spec).total_tokens
    return time.perf_counter() - t0, time.process_time() - c0, ok, units


def calibration_us() -> float:
    """CPU microseconds for ``sum(range(1000))`` -- ~8-12 us on an unloaded modern core; compare
    figures from different machines (or loads) relative to it."""
    best = 1e9
    for _ in range(5):
        c0 = time.process_time()
        for _ in range(200):
            sum(range(1000))
        best = min(best, (time.process_time() - c0) / 200 * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    corpus = make_corpus(args.n, args.tokens, args.seed)
    mb = sum(len(t.encode()) for t, _ in corpus) / 1e6
    run(corpus[: min(200, len(corpus))])  # warm-up
    calib = calibration_us()
    best = best_cpu = None
    for _ in range(args.repeat):
        dt, cpu, ok, units = run(corpus)
        best = dt if best is None else min(best, dt)
        best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
    row = {
        "bench": "formats",
        "trajectories": args.n,
        "valid": ok,
        "avg_units": round(units / max(ok, 1), 1),
        "avg_bytes": round(mb * 1e6 / args.n),
        "corpus_mb": round(mb, 2),
        "wall_s": round(best, 4),
        "traj_per_s": round(args.n / best, 1),
        "mb_per_s": round(mb / best, 2),
        "cpu_s": round(best_cpu, 4),
        "traj_per_cpu_s": round(args.n / best_cpu, 1),
        "us_per_traj": round(best / args.n * 1e6, 2),
        "calib_sum_range_1000_us": round(calib, 2),
        "speedups": speedups_enabled(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    w = max(len(k) for k in row)
    print(f"parse + compute_metrics (default units, one core, best of {args.repeat})")
    print("-" * (w + 16))
    for k, v in row.items():
        print(f"{k:<{w}}  {v}")
    print("-" * (w + 16))
    print(json.dumps(row))


if __name__ == "__main__":
    main()
