"""Run metrics as Ray metrics: the gauges the Ray dashboard charts and its Prometheus endpoint serves.

Every step's phase timings (`timing/*`), tokens/s, reward, #Parallel, weight-sync figures and the
fault counters become gauges named `parallax_<key>` (Ray prefixes `ray_`), tagged with the run's
name and stage. A local cluster serves them at `http://127.0.0.1:<cluster.metrics_export_port>/metrics`.
"""

from __future__ import annotations

import math
import re
from typing import Any

# Prefixes and keys exported (the rest stays in W&B and metrics.jsonl).
EXPORTED_PREFIXES = ("timing/", "throughput/", "sync/", "rollout/", "reward/")
EXPORTED_KEYS = ("parallel/ratio", "parallel/valid", "parallel/speedup", "sft/loss", "actor/pg_loss",
                 "actor/grad_norm", "response/length", "eval/acc")


def gauge_name(key: str) -> str:
    """`timing/update` -> `parallax_timing_update` (Prometheus names: letters, digits, `_`)."""
    return "parallax_" + re.sub(r"[^a-zA-Z0-9_]", "_", key.replace("@", "_at_")).strip("_")


def exported(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numeric metrics a step exports, by gauge name."""
    out = {}
    for k, v in metrics.items():
        if not (k.startswith(EXPORTED_PREFIXES) or k in EXPORTED_KEYS):
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            continue
        out[gauge_name(k)] = float(v)
    return out


class RayMetrics:
    """Gauges made on first use; `record` sets them from one step's metrics."""

    def __init__(self, run: str):
        self.run = run
        self._gauges: dict[str, Any] = {}

    def record(self, metrics: dict[str, Any], step: int, stage: str) -> None:
        from ray.util.metrics import Gauge

        values = exported(metrics) | {"parallax_step": float(step)}
        for name, v in values.items():
            if name not in self._gauges:
                self._gauges[name] = Gauge(name, description=f"Parallax run metric {name}", tag_keys=("run", "stage"))
            self._gauges[name].set(v, tags={"run": self.run, "stage": stage})
