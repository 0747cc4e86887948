"""The run's PNG: held-out accuracy, #Parallel and first-<Parallel> position per step (Figure 3 view)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

PANELS = (
    ("reward/acc", "eval/acc", "accuracy"),
    ("parallel/ratio", "eval/parallel/ratio", "#Parallel (share of samples)"),
    ("parallel/first_pos", "eval/parallel/first_pos", "first <Parallel> position"),
    ("parallel/speedup", "eval/parallel/speedup", "speed-up (total / critical path)"),
)


def load_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_run(run_dir: Path, out: Path | None = None) -> Path:
    """Write `summary.png`: each panel shows the training-batch metric and the held-out one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = load_metrics(run_dir)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.2))
    for ax, (train_key, eval_key, title) in zip(axes, PANELS):
        for key, style in ((train_key, "-"), (eval_key, "o--")):
            pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts), style, label="held-out" if key == eval_key else "train batch")
        stage_starts = [r["step"] for prev, r in itertools.pairwise(rows)
                        if r.get("curriculum/stage") != prev.get("curriculum/stage") and "curriculum/stage" in r]
        for s in stage_starts:
            ax.axvline(s, color="grey", lw=0.6, ls=":")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    out = out or Path(run_dir) / "summary.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
