"""The run's PNG: the SFT loss, then accuracy, #Parallel, first-<Parallel> position and speed-up per
step (Figure 3's view), every panel over the whole run with the stage boundaries marked.

The y axes do not turn noise into swings: shares and positions are drawn on [0, 1] whatever they
span, and the other panels on at least `min_span` around their values (a speed-up of 1.37-1.39 is
drawn flat, not as a cliff)."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

# (train-batch key, held-out key, title, fixed y-limits or None, minimum y span when not fixed)
PANELS = (
    ("sft/loss", None, "SFT loss", None, 0.5),
    ("reward/acc", "eval/acc", "accuracy", (0.0, 1.0), 0.0),
    ("parallel/ratio", "eval/parallel/ratio", "#Parallel (share of samples)", (0.0, 1.0), 0.0),
    ("parallel/first_pos", "eval/parallel/first_pos", "first <Parallel> position", (0.0, 1.0), 0.0),
    ("parallel/speedup", "eval/parallel/speedup", "speed-up (total / critical path)", None, 0.5),
)
_PAD = 0.04  # of the span, above and below


@dataclass
class Panel:
    title: str
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # label -> (step, value)
    ylim: tuple[float, float] = (0.0, 1.0)


def load_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def y_limits(values: list[float], fixed: tuple[float, float] | None, min_span: float) -> tuple[float, float]:
    """The panel's y-limits: `fixed` (padded), or the values' range widened to at least `min_span`."""
    if fixed is not None:
        lo, hi = fixed
    elif not values:
        lo, hi = 0.0, max(min_span, 1.0)
    else:
        lo, hi = min(values), max(values)
        if hi - lo < min_span:
            mid = (lo + hi) / 2
            lo, hi = mid - min_span / 2, mid + min_span / 2
    pad = (hi - lo) * _PAD
    return lo - pad, hi + pad


def panels(rows: list[dict]) -> list[Panel]:
    """What `summary.png` draws, one `Panel` per entry of PANELS."""
    out = []
    for train_key, eval_key, title, fixed, min_span in PANELS:
        panel = Panel(title)
        for key, label in ((train_key, "train batch"), (eval_key, "held-out")):
            pts = [(r["step"], float(r[key])) for r in rows if key and r.get(key) is not None]
            if pts:
                panel.series[label] = pts
        panel.ylim = y_limits([v for pts in panel.series.values() for _, v in pts], fixed, min_span)
        out.append(panel)
    return out


def plot_run(run_dir: Path, out: Path | None = None) -> Path:
    """Write `summary.png` (see the module's docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = load_metrics(run_dir)
    last = max((r["step"] for r in rows if "step" in r), default=1)
    stage_starts = [r["step"] for prev, r in itertools.pairwise(rows)
                    if r.get("curriculum/stage") != prev.get("curriculum/stage") and "curriculum/stage" in r]
    drawn = panels(rows)
    fig, axes = plt.subplots(1, len(drawn), figsize=(4.0 * len(drawn), 3.2))
    for ax, panel in zip(axes, drawn):
        for label, pts in panel.series.items():
            ax.plot(*zip(*pts), "o--" if label == "held-out" else "-", label=label, ms=3)
        for s in stage_starts:
            ax.axvline(s, color="grey", lw=0.6, ls=":")
        ax.set_xlim(0, max(last, 1))
        ax.set_ylim(*panel.ylim)
        ax.set_title(panel.title, fontsize=9)
        ax.set_xlabel("step")
        if panel.series:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not logged in this run", ha="center", va="center", fontsize=8, transform=ax.transAxes)
    fig.tight_layout()
    out = out or Path(run_dir) / "summary.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
