"""One table of final metrics per sweep: every job's `summary.json`, keyed by its overrides.

A Hydra multirun writes each job into `<sweep dir>/<job number>/` (conf/config.yaml), where
the trainer leaves `summary.json` (per-stage held-out metrics) and Hydra `.hydra/overrides.yaml`.
`write_sweep_summary` reads them all and writes `sweep_summary.md` and `sweep_summary.json`
into the sweep dir: one row per combination, the swept values as the first columns, then the
last stage's metrics. A job that wrote no summary (it failed or is still running) stays in
the table with status `missing`, so a hole in the grid is visible.

Launch (the callback runs it when the multirun ends; experiments that sweep name it):
    python -m orchestrator -m +experiment=parason_pa_grpo reward.beta_sub=0.025,0.05,0.1 reward.beta_trial=0.05,0.1
    python -m orchestrator.sweep runs/sweep_2025-01-01_12-00-00     # rebuild the table by hand
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SUMMARY_MD, SUMMARY_JSON = "sweep_summary.md", "sweep_summary.json"


def job_dirs(sweep_dir: Path) -> list[Path]:
    """Job directories of a sweep (those Hydra or the trainer wrote into), in job-number order."""
    dirs = [d for d in Path(sweep_dir).iterdir()
            if d.is_dir() and ((d / ".hydra").is_dir() or (d / "summary.json").exists())]
    return sorted(dirs, key=lambda d: (not d.name.isdigit(), int(d.name) if d.name.isdigit() else 0, d.name))


def read_overrides(job_dir: Path) -> dict[str, str]:
    """The job's command-line overrides (`key=value`) from Hydra's `.hydra/overrides.yaml`."""
    path = job_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return {}
    import yaml

    items = yaml.safe_load(path.read_text()) or []
    pairs = dict(str(o).split("=", 1) for o in items if "=" in str(o))
    return {k: v for k, v in pairs.items() if k not in LAUNCHER_KEYS}


# What the parallax_ray launcher adds to every job's command line (not the sweep's own overrides).
LAUNCHER_KEYS = ("cluster.address", "cluster.placement_timeout_s")


def job_row(job_dir: Path) -> dict[str, Any]:
    """One row: job name, overrides, status, and the last evaluated stage's metrics."""
    row: dict[str, Any] = {"job": job_dir.name, "overrides": read_overrides(job_dir)}
    path = job_dir / "summary.json"
    if not path.exists():
        return {**row, "status": "missing", "metrics": {}}
    summary = json.loads(path.read_text())
    stages = summary.get("stages") or []
    last = stages[-1] if stages else {}
    metrics = {k: v for k, v in last.items() if k != "stage"}
    return {**row, "status": "ok", "steps": summary.get("steps"), "final_stage": last.get("stage"),
            "metrics": metrics}


def swept_keys(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Override keys whose value differs between jobs (the sweep's axes), in first-seen order."""
    keys = list(dict.fromkeys(k for r in rows for k in r["overrides"]))
    return [k for k in keys if len({r["overrides"].get(k) for r in rows}) > 1]


def to_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """A markdown table: job, swept values, status, steps, then every final metric (sorted)."""
    if not rows:
        return "(no jobs)"
    axes = swept_keys(rows)
    metric_cols = sorted({k for r in rows for k in r["metrics"]})
    cols = ["job", *axes, "status", "steps", *metric_cols]

    def cell(r: dict[str, Any], c: str) -> str:
        v = r["overrides"].get(c) if c in axes else r["metrics"].get(c, r.get(c))
        return f"{v:.4g}" if isinstance(v, float) else ("" if v is None else str(v))

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r, c) for c in cols) + " |" for r in rows]
    shared = {k: v for k, v in rows[0]["overrides"].items() if k not in axes}
    header = f"Shared overrides: {' '.join(f'{k}={v}' for k, v in shared.items()) or '(none)'}\n\n"
    return header + "\n".join(lines) + "\n"


def write_sweep_summary(sweep_dir: str | Path) -> dict[str, Any]:
    """Collect every job of ``sweep_dir`` into `sweep_summary.md` / `.json`; returns the JSON."""
    sweep_dir = Path(sweep_dir)
    rows = [job_row(d) for d in job_dirs(sweep_dir)]
    table = {"sweep_dir": str(sweep_dir), "axes": swept_keys(rows), "jobs": rows}
    (sweep_dir / SUMMARY_JSON).write_text(json.dumps(table, indent=1))
    (sweep_dir / SUMMARY_MD).write_text(to_markdown(rows))
    return table


try:  # the callback needs Hydra; the collector above does not
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover
    Callback = object  # type: ignore[assignment,misc]


class SweepSummary(Callback):
    """Hydra callback: write the sweep table when a multirun ends. Wire it in a config:

        hydra:
          callbacks:
            sweep_summary:
              _target_: orchestrator.sweep.SweepSummary
    """

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        table = write_sweep_summary(sweep_dir)
        print(f"sweep summary ({len(table['jobs'])} jobs): {sweep_dir / SUMMARY_MD}")
        print((sweep_dir / SUMMARY_MD).read_text())


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python -m orchestrator.sweep SWEEP_DIR", file=sys.stderr)
        return 2
    write_sweep_summary(args[0])
    print((Path(args[0]) / SUMMARY_MD).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
