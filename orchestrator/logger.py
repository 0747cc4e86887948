"""Metrics out: W&B (offline by default), a console line per step, a progress bar."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from parallax.contract.config import LoggingConfig


class Timer:
    """Collects `timing/<phase>` seconds for one step."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.times[f"timing/{phase}"] = self.times.get(f"timing/{phase}", 0.0) + time.perf_counter() - t0


_CONSOLE_KEYS = ("curriculum/stage", "sft/loss", "reward/mean", "reward/acc", "parallel/ratio",
                 "response/length", "actor/pg_loss", "timing/step")


class Logger:
    def __init__(self, cfg: LoggingConfig, run_dir: Path, config: dict[str, Any], total_steps: int,
                 run_id: str | None = None, start: int = 0):
        import wandb
        from tqdm import tqdm

        self.cfg = cfg
        self.run_dir = run_dir
        self.jsonl = (run_dir / "metrics.jsonl").open("a")
        self.run = wandb.init(project=cfg.project, group=cfg.group, name=cfg.run_name, dir=str(run_dir),
                              mode=cfg.wandb_mode, config=config, id=run_id, resume="allow")
        self.bar = tqdm(total=total_steps, initial=start, desc="parallax", disable=not cfg.progress_bar,
                        dynamic_ncols=True)
        self.ray_metrics = None
        if cfg.ray_metrics:
            from orchestrator.ray_metrics import RayMetrics

            self.ray_metrics = RayMetrics(run_dir.name)

    @property
    def run_id(self) -> str:
        return self.run.id

    def log(self, metrics: dict[str, Any], step: int, advance: bool = True, stage: str = "") -> None:
        """Record ``metrics`` at ``step``; ``advance`` moves the progress bar (a training step,
        not an evaluation logged between steps)."""
        self.run.log(metrics, step=step)
        self.jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
        self.jsonl.flush()
        if self.ray_metrics is not None:
            self.ray_metrics.record(metrics, step, stage)
        if advance:
            self.bar.set_postfix_str(progress_line(metrics, stage), refresh=False)
            self.bar.update(1)
        if self.cfg.print_every and step % self.cfg.print_every == 0:
            shown = {k.split("/")[-1]: metrics[k] for k in _CONSOLE_KEYS if k in metrics}
            self.bar.write(f"step {step:4d} " + " ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items()))

    def log_table(self, rows: list[dict[str, Any]], step: int) -> Path:
        """Sampled trajectories of a step: a W&B table (`samples`) and `samples/step_<N>.jsonl`."""
        out = self.run_dir / "samples" / f"step_{step}.jsonl"
        out.parent.mkdir(exist_ok=True)
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        if rows:
            import wandb

            cols = list(rows[0])
            self.run.log({"samples": wandb.Table(columns=cols, data=[[_cell(r[c]) for c in cols] for r in rows])},
                         step=step)
        return out

    def abort(self) -> None:
        """Close without a summary: the run goes on in a new try that resumes this W&B run."""
        self.bar.close()
        self.jsonl.close()
        self.run.finish(exit_code=1)

    def close(self, summary: dict[str, Any]) -> None:
        for k, v in summary.items():
            self.run.summary[k] = v
        self.bar.close()
        self.jsonl.close()
        self.run.finish()


def progress_line(metrics: dict[str, Any], stage: str = "") -> str:
    """The bar's postfix: stage, reward (or SFT loss), #Parallel."""
    parts = [f"stage={stage}"] if stage else []
    for key, label in (("reward/mean", "reward"), ("sft/loss", "loss"), ("parallel/ratio", "#Parallel")):
        if isinstance(metrics.get(key), (int, float)):
            parts.append(f"{label}={metrics[key]:.3g}")
    return " ".join(parts)


def _cell(v: Any) -> Any:
    """A W&B table cell: numbers and strings as they are, anything else as JSON."""
    return v if v is None or isinstance(v, (int, float, str, bool)) else json.dumps(v)
