"""Weight sync, learner -> engine, through the real actors: object store against the collective group.

One DeepSpeed learner and one rollout actor (hf engine, or vLLM with --engine vllm) on a local Ray
cluster, the same model; each path pushes the learner's weights `--repeat` times after one warm-up
push (the collective path opens its group there). Reported per path: the median and best push
time, the bytes moved, and GB/s; then the object-store / collective time ratio. After the last
push of each path the hf engine's weights are compared with the learner's, tensor by tensor.

Usage: ``PYTHONPATH=. python bench/bench_sync.py [--model smollm2_135m|tiny] [--repeat 5]
[--bucket-mb 64] [--engine hf|vllm]``. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
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
    args = ap.parse_args()

    import ray
    import torch

    from orchestrator.setup import build_groups, start_cluster
    from orchestrator.weights import make_weight_sync
    from parallax.contract.config import ClusterConfig, LearnerConfig, ParallaxConfig, RolloutConfig
    from parallax.contract.engine import VLLMConfig, WeightSyncConfig

    path = _model(args.model)
    cfg = ParallaxConfig()
    cfg.rollout = RolloutConfig(engine=args.engine, num_cpus=0.5, torch_threads=1,
                                vllm=VLLMConfig(enforce_eager=True, cpu_kvcache_gib=1),
                                weight_sync=WeightSyncConfig(bucket_mb=args.bucket_mb))
    cfg.learner = LearnerConfig(num_cpus=0.5, torch_threads=1)
    start_cluster(ClusterConfig(num_cpus=4, include_dashboard=False))
    groups = build_groups(cfg, path, f"bench-sync-{os.getpid()}")
    collective = groups.sync
    rows, versions = [], itertools.count(1)  # the policy version each push hands the engine
    try:
        for method in ("object_store", "collective"):
            sync = collective if method == "collective" else make_weight_sync(WeightSyncConfig(method=method))
            # warm-up (the collective path opens here)
            figures = sync.push(groups.learner, groups.rollout, next(versions))
            times, sends = [], []
            for _ in range(args.repeat):
                t = time.perf_counter()
                figures = sync.push(groups.learner, groups.rollout, next(versions))
                times.append(time.perf_counter() - t)
                sends.append(figures.get("timing/sync_send"))
            equal = None
            if args.engine == "hf":
                learner = ray.get(groups.learner.async_state_dict())
                engine = ray.get(groups.rollout.actors[0].get_weights.remote())
                equal = all(torch.equal(engine[k], v) for k, v in learner.items())
            med = statistics.median(times)
            rows.append({"method": method, "median_s": med, "min_s": min(times), "bytes": figures["sync/bytes"],
                         "gb_per_s": figures["sync/bytes"] / med / 1e9, "buckets": figures.get("sync/buckets"),
                         "send_s": statistics.median(sends) if sends[0] is not None else None, "equal": equal})
    finally:
        groups.shutdown()
        ray.shutdown()
        if args.model == "tiny":
            import shutil

            shutil.rmtree(path, ignore_errors=True)
    ratio = rows[0]["median_s"] / rows[1]["median_s"]
    print(f"weight sync, {args.model} ({rows[1]['bytes'] / 2**20:.0f} MiB sent once), engine {args.engine}, "
          f"median of {args.repeat}")
    print(f"{'method':<14}{'median s':>10}{'best s':>10}{'send s':>8}{'MiB':>8}{'GB/s':>8}{'equal':>7}")
    for r in rows:
        send = "-" if r["send_s"] is None else f"{r['send_s']:.3f}"
        print(f"{r['method']:<14}{r['median_s']:>10.3f}{r['min_s']:>10.3f}{send:>8}{r['bytes'] / 2**20:>8.0f}"
              f"{r['gb_per_s']:>8.2f}{r['equal']!s:>7}")
    print(f"object store / collective: {ratio:.2f}x")
    print(json.dumps({"bench": "sync", "model": args.model, "engine": args.engine, "repeat": args.repeat,
                      "bucket_mb": args.bucket_mb, "load": os.getloadavg()[0], "rows": rows,
                      "object_store_over_collective": ratio}))


if __name__ == "__main__":
    main()
