"""Weight sync, learner -> engine, through the real actors: object store, the collective group, and the
collective group sending what changed (`rollout.weight_sync.delta`).

One DeepSpeed learner and one rollout actor (hf engine, or vLLM with --engine vllm) on a local Ray
cluster, the same model; each path pushes the learner's weights `--repeat` times after one warm-up
push (the collective path opens its group there), each push after a real update (one AdamW step of
SFT on random tokens at `--lr`, untimed: what moves between two RL steps). Reported per path: the
median and best push time, the bytes moved (the delta's: what changed), and GB/s; then the
object-store / collective time ratio and the dense / delta one. After the last push of each path the hf
engine's weights are compared with the learner's, tensor by tensor, bit for bit.

Usage: ``PYTHONPATH=. python bench/bench_sync.py [--model smollm2_135m|tiny] [--repeat 5]
[--bucket-mb 64] [--engine hf|vllm] [--lr 1e-5] [--dtype bfloat16]``. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import statistics
import tempfile
import time


def _model(name: str) -> str:
    if name == "tiny":
        from parallax import toyworld
        from parallax.tinylm import TinyModelConfig, build_tiny_model

        return str(build_tiny_model(tempfile.mkdtemp(prefix="bench_sync_"), TinyModelConfig(), toyworld.corpus(200, 0)))
    # (the tiny model's temp folder is removed at the end of main)
    from parallax.models import materialize

    return str(materialize(name))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2_135m", help="tiny, or a packaged model name")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--bucket-mb", type=int, default=64)
    ap.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    ap.add_argument("--lr", type=float, default=1e-5, help="the update between two pushes (AdamW, SFT)")
    ap.add_argument("--dtype", default="bfloat16", help="the engine's weights (rollout.dtype); the learner's fp32")
    ap.add_argument("--threads", type=int, nargs=2, default=[1, 1], metavar=("LEARNER", "ENGINE"),
                    help="torch threads of the learner and of the rollout actor")
    args = ap.parse_args()

    import ray
    import torch

    from orchestrator.setup import build_groups, start_cluster
    from orchestrator.weights import CollectiveSync, make_weight_sync
    from parallax.contract.batch import SFTBatch
    from parallax.contract.config import ClusterConfig, LearnerConfig, ParallaxConfig, RolloutConfig
    from parallax.contract.engine import VLLMConfig, WeightSyncConfig

    path = _model(args.model)
    cfg = ParallaxConfig()
    cfg.rollout = RolloutConfig(engine=args.engine, num_cpus=0.5, torch_threads=args.threads[1], dtype=args.dtype,
                                vllm=VLLMConfig(enforce_eager=True, cpu_kvcache_gib=1),
                                weight_sync=WeightSyncConfig(bucket_mb=args.bucket_mb))
    cfg.learner = LearnerConfig(num_cpus=0.5, torch_threads=args.threads[0])
    start_cluster(ClusterConfig(num_cpus=4, include_dashboard=False))
    groups = build_groups(cfg, path, f"bench-sync-{os.getpid()}")
    collective = groups.sync
    rows, versions = [], itertools.count(1)  # the policy version each push hands the engine
    ids = torch.randint(0, 100, (4, 64), generator=torch.Generator().manual_seed(0))
    update = SFTBatch(ids, torch.ones_like(ids), torch.ones(ids.shape))

    def paths():
        yield "object_store", make_weight_sync(WeightSyncConfig(method="object_store"))
        for delta in (False, True):  # each forms its own group on its first push
            yield ("collective_delta" if delta else "collective",
                   CollectiveSync(dataclasses.replace(collective.cfg, delta=delta), collective.store))
        # the engine on the learner's node maps the buckets it casts into (rollout.weight_sync.cpu_handoff)
        yield "cpu_handoff", CollectiveSync(dataclasses.replace(collective.cfg, cpu_handoff=True), collective.store)

    try:
        for method, sync in paths():
            # warm-up (the collective path opens here)
            figures = sync.push(groups.learner, groups.rollout, next(versions))
            times, sends, sent = [], [], []
            for _ in range(args.repeat):
                ray.get(groups.learner.async_sft_step(update, args.lr))
                t = time.perf_counter()
                figures = sync.push(groups.learner, groups.rollout, next(versions))
                times.append(time.perf_counter() - t)
                sends.append(figures.get("timing/sync_send"))
                sent.append(figures["sync/bytes"])
            equal = None
            if args.engine == "hf":
                learner = ray.get(groups.learner.async_state_dict())
                engine = ray.get(groups.rollout.actors[0].get_weights.remote())
                equal = all(torch.equal(engine[k], v.to(engine[k].dtype)) for k, v in learner.items())
            med = statistics.median(times)
            rows.append({"method": method, "median_s": med, "min_s": min(times), "bytes": statistics.median(sent),
                         "dense_bytes": figures.get("sync/dense_bytes"),
                         "gb_per_s": statistics.median(sent) / med / 1e9, "buckets": figures.get("sync/buckets"),
                         "send_s": statistics.median(sends) if sends[0] is not None else None, "equal": equal})
    finally:
        groups.shutdown()
        ray.shutdown()
        if args.model == "tiny":
            import shutil

            shutil.rmtree(path, ignore_errors=True)
    ratio = rows[0]["median_s"] / rows[1]["median_s"]
    delta_ratio = rows[1]["median_s"] / rows[2]["median_s"]
    print(f"weight sync, {args.model} ({rows[1]['bytes'] / 2**20:.0f} MiB sent once), engine {args.engine}, "
          f"median of {args.repeat}, each push after an update at lr {args.lr:g}; load {os.getloadavg()[0]:.2f}")
    print(f"{'method':<14}{'median s':>10}{'best s':>10}{'send s':>8}{'MiB':>8}{'GB/s':>8}{'equal':>7}")
    for r in rows:
        send = "-" if r["send_s"] is None else f"{r['send_s']:.3f}"
        print(f"{r['method']:<14}{r['median_s']:>10.3f}{r['min_s']:>10.3f}{send:>8}{r['bytes'] / 2**20:>8.0f}"
              f"{r['gb_per_s']:>8.2f}{r['equal']!s:>7}")
    print(f"object store / collective: {ratio:.2f}x; collective / collective_delta: {delta_ratio:.2f}x, "
          f"{rows[2]['bytes'] / rows[1]['bytes']:.3f} of the bytes")
    print(json.dumps({"bench": "sync", "model": args.model, "engine": args.engine, "repeat": args.repeat,
                      "bucket_mb": args.bucket_mb, "lr": args.lr, "dtype": args.dtype, "load": os.getloadavg()[0],
                      "rows": rows,
                      "object_store_over_collective": ratio, "collective_over_delta": delta_ratio}))


if __name__ == "__main__":
    main()
