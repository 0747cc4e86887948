"""Benchmark: the HF engine's decode step, copy-free (`parallax.engines.decode_kv`) vs transformers' own path.

The same `HFEngine.generate` calls (same prompts, seeds and tokens: checked) run with
`KVDecoder.fast` on and off, alternating `--repeat` times so both see the same load; best of
each. Off is what transformers does by default (DynamicCache appended by torch.cat, a 2-D mask
expanded every step, K/V repeated per query head under a mask).

    python bench/bench_decode.py [--rows 16 64] [--tokens 64 256] [--repeat 5] [--threads 1]

Prints a table (rows, new tokens, s per call off / on, ratio, tokens/s on) and a JSON line.
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

from parallax import toyworld
from parallax.contract.batch import SamplingParams
from parallax.engines import decode_kv
from parallax.engines.hf import HFEngine


class _Switch:
    """Turns `KVDecoder.fast` off for the decoders built while `off` is set."""

    off = False

    def __init__(self):
        self._init = decode_kv.KVDecoder.__init__
        switch = self

        def init(dec, model):
            switch._init(dec, model)
            dec.fast = dec.fast and not switch.off

        decode_kv.KVDecoder.__init__ = init


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--tokens", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from parallax.tinylm import TinyModelConfig, build_tiny_model

    path = build_tiny_model(tempfile.mkdtemp(prefix="bench_decode_"), TinyModelConfig(), toyworld.corpus(500, 0))
    engine = HFEngine(path, max_batch_size=max(args.rows))
    problems = toyworld.generate("subtask", max(args.rows), seed=0, difficulty=2)
    switch = _Switch()
    rows = []
    for R in args.rows:
        prompts = [engine.tokenizer.encode(p.prompt) for p in problems[:R]]
        for T in args.tokens:
            best, outs = {False: float("inf"), True: float("inf")}, {}
            for rep in range(args.repeat):
                for fast in (False, True):
                    switch.off = not fast
                    t0 = time.perf_counter()
                    outs[fast] = engine.generate(prompts, SamplingParams(max_new_tokens=T, seed=rep))
                    best[fast] = min(best[fast], time.perf_counter() - t0)
                assert [c.token_ids for c in outs[False]] == [c.token_ids for c in outs[True]], "paths differ"
            n = sum(len(c.token_ids) for c in outs[True])
            rows.append({"rows": R, "new_tokens": T, "s_transformers": round(best[False], 3),
                         "s_copy_free": round(best[True], 3), "ratio": round(best[False] / best[True], 3),
                         "tok_s_copy_free": round(n / best[True], 1)})
    keys = list(rows[0])
    print(f"load: {os.getloadavg()}  threads={args.threads}")
    print(" ".join(f"{k:>16}" for k in keys))
    for r in rows:
        print(" ".join(f"{r[k]!s:>16}" for k in keys))
    print(json.dumps({"bench": "decode", "load": os.getloadavg(), "threads": args.threads, "rows": rows}))


if __name__ == "__main__":
    main()
