"""PNG plots of an evaluation result: the budget curve, accuracy per benchmark, tokens per stratum.

matplotlib draws them when it is installed; otherwise a small Pillow renderer draws the same
charts (plain axes, lines / bars, a legend) so a run without matplotlib still gets figures.
With neither, no plots are written and the caller is told (backend ``None``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Chart", "plot_all", "render"]

_COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75)]


@dataclass
class Chart:
    """A backend-free chart: ``kind`` "line" (x numeric) or "bar" (x categories)."""

    kind: str
    title: str
    xlabel: str
    ylabel: str
    x: list  # numbers (line) or category names (bar)
    series: dict[str, list[float]]  # name -> one y per x
    logx: bool = False


def charts_for(result: dict[str, Any]) -> dict[str, Chart]:
    """The charts of one result, by file stem."""
    k = result["k"]
    benches = list(result["benchmarks"])
    budgets = [int(b) for b in result["budgets"]]
    out = {
        "budget_curve": Chart("line", "Accuracy under a critical-path budget", "budget B (critical-path tokens)",
                              "accuracy (%)", budgets,
                              {b: [100 * result["benchmarks"][b]["budget_acc"][str(x)] for x in budgets]
                               for b in benches}, logx=len(budgets) > 1 and budgets[-1] / budgets[0] > 8),
        "accuracy": Chart("bar", f"Accuracy (k={k})", "benchmark", "%", benches,
                          {f"mean@{k}": [100 * result["benchmarks"][b][f"mean@{k}"] for b in benches],
                           f"pass@{k}": [100 * result["benchmarks"][b].get(f"pass@{k}", 0.0) for b in benches],
                           "#Parallel": [100 * result["benchmarks"][b]["parallel_ratio"] for b in benches]}),
    }
    cats, tot, crit = [], [], []
    for b in benches:
        for name, s in result["benchmarks"][b].get("strata", {}).items():
            cats.append(f"{b}:{name}" if len(benches) > 1 else name)
            tot.append(s["total_tokens"])
            crit.append(s["critical_path_tokens"])
    if cats:
        out["strata_tokens"] = Chart("bar", "Tokens per difficulty stratum", "stratum", "tokens per sample",
                                     cats, {"generated": tot, "critical path": crit})
    return out


def _mpl(chart: Chart, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    if chart.kind == "line":
        for name, ys in chart.series.items():
            ax.plot(chart.x, ys, marker="o", label=name)
        if chart.logx:
            ax.set_xscale("log", base=2)
    else:
        n = len(chart.series)
        width = 0.8 / max(n, 1)
        for i, (name, ys) in enumerate(chart.series.items()):
            ax.bar([j + (i - (n - 1) / 2) * width for j in range(len(chart.x))], ys, width, label=name)
        ax.set_xticks(range(len(chart.x)), chart.x, rotation=30 if len(chart.x) > 4 else 0)
    ax.set(title=chart.title, xlabel=chart.xlabel, ylabel=chart.ylabel)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _pil(chart: Chart, path: Path) -> None:
    import math

    from PIL import Image, ImageDraw

    W, H, L, R, T, B = 640, 400, 60, 150, 30, 50
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    ys = [y for v in chart.series.values() for y in v if y is not None] or [0.0]
    ymax = max(ys) * 1.1 or 1.0
    px = lambda y: H - B - (H - T - B) * (y / ymax)
    d.line([(L, T), (L, H - B), (W - R, H - B)], fill="black")
    for i in range(5):  # y ticks
        y = ymax * i / 4
        d.text((5, px(y) - 5), f"{y:.3g}", fill="black")
        d.line([(L, px(y)), (W - R, px(y))], fill=(225, 225, 225))
    d.text((L, 8), chart.title, fill="black")
    d.text(((L + W - R) // 2 - 40, H - 18), chart.xlabel, fill="black")
    n = len(chart.x)
    if chart.kind == "line":
        xs = [math.log2(x) if chart.logx else float(x) for x in chart.x]
        lo, hi = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
        pxs = [L + 10 + (W - R - L - 20) * (x - lo) / (hi - lo) for x in xs]
        for x, label in zip(pxs, chart.x):
            d.text((x - 10, H - B + 5), str(label), fill="black")
        for c, (name, ys_) in enumerate(chart.series.items()):
            pts = [(x, px(y)) for x, y in zip(pxs, ys_)]
            d.line(pts, fill=_COLORS[c % 6], width=2)
            for x, y in pts:
                d.ellipse([x - 3, y - 3, x + 3, y + 3], fill=_COLORS[c % 6])
    else:
        slot = (W - R - L) / max(n, 1)
        m = len(chart.series)
        for j, label in enumerate(chart.x):
            d.text((L + slot * j + 2, H - B + 5), str(label)[:14], fill="black")
            for c, ys_ in enumerate(chart.series.values()):
                x0 = L + slot * j + slot * 0.1 + c * slot * 0.8 / m
                d.rectangle([x0, px(ys_[j]), x0 + slot * 0.8 / m - 1, H - B], fill=_COLORS[c % 6])
    for c, name in enumerate(chart.series):  # legend
        d.rectangle([W - R + 10, T + 15 * c, W - R + 20, T + 15 * c + 10], fill=_COLORS[c % 6])
        d.text((W - R + 25, T + 15 * c), name[:18], fill="black")
    img.save(path, "PNG")


def backend() -> str | None:
    """``"matplotlib"``, ``"pillow"`` or ``None`` (no plotting library installed)."""
    import importlib.util

    for name, mod in (("matplotlib", "matplotlib"), ("pillow", "PIL")):
        if importlib.util.find_spec(mod) is not None:
            return name
    return None


def render(chart: Chart, path: Path, which: str | None = None) -> None:
    """Draw ``chart`` to ``path`` with ``which`` backend (default: the best installed)."""
    which = which or backend()
    if which is None:
        raise RuntimeError("no plotting backend: install matplotlib (or Pillow)")
    (_mpl if which == "matplotlib" else _pil)(chart, path)


def plot_all(result: dict[str, Any], out_dir: str | Path, which: str | None = None) -> tuple[list[str], str | None]:
    """Write every chart of ``result`` as ``<out_dir>/<stem>.png``; returns (paths, backend)."""
    which = which or backend()
    if which is None:
        return [], None
    paths = []
    for stem, chart in charts_for(result).items():
        p = Path(out_dir) / f"{stem}.png"
        render(chart, p, which)
        paths.append(str(p))
    return paths, which
