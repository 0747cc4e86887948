"""A study's report from its runs on disk: curves per arm and seed, a table, a plot.

Reads ``<out>/<arm>/seed_<s>/metrics.jsonl`` (every step's training-batch metrics, and the
held-out ones every ``trainer.eval_every`` steps) and the held-out evaluation of the starting model
(the job's "init" row, or the SFT run's last one).  Writes ``results.json`` (every curve), ``results.md`` (the
table) and ``summary.png`` (the curves: thin lines per seed, a thick line per arm's seed mean).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import mean

from parallax.studies.specs import Study

__all__ = ["arm_curves", "load_study", "summarise", "to_markdown", "write_report"]


def _rows(job: Path) -> list[dict]:
    path = job / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: the job wrote no metrics (did it run?)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _init_eval(job: Path) -> dict:
    """The held-out evaluation of the job's starting model: its own "init" row, or else the SFT run's
    last evaluation (``<study>/sft/summary.json``: the same weights and sampling stream)."""
    for path, pick in ((job / "summary.json", "init"), (job.parents[1] / "sft" / "summary.json", None)):
        stages = json.loads(path.read_text()).get("stages", []) if path.exists() else []
        found = [s for s in stages if pick is None or s.get("stage") == pick]
        if found:
            return found[-1]
    return {}


def arm_curves(job: Path, study: Study) -> dict[str, list[tuple[int, float]]]:
    """``{metric: [(step, value), ...]}`` of one job: training metrics at each step, held-out ones
    at each evaluation (step 0: the starting model, before the first RL step)."""
    rows, init = _rows(job), _init_eval(job)
    out: dict[str, list[tuple[int, float]]] = {}
    for key in study.curves:
        out[key] = [(r["step"], r[key]) for r in rows if r.get(key) is not None and "eval/acc" not in r]
    for key in study.eval_curves:
        pts = [(0, init[key])] if init.get(key) is not None else []
        out[key] = pts + [(r["step"], r[key]) for r in rows if r.get(key) is not None and "eval/acc" in r]
    return out


def load_study(out: Path, study: Study) -> dict[str, dict[int, dict[str, list[tuple[int, float]]]]]:
    """``{arm: {seed: curves}}`` for every seed directory each arm holds."""
    found = {}
    for arm in study.arms:
        jobs = sorted((Path(out) / arm.name).glob("seed_*"), key=lambda p: int(p.name.removeprefix("seed_")))
        if not jobs:
            raise FileNotFoundError(f"{Path(out) / arm.name}: no seed_* job directories (run the study first)")
        found[arm.name] = {int(j.name.removeprefix("seed_")): arm_curves(j, study) for j in jobs}
    return found


def _finite(xs) -> list[float]:
    return [x for x in xs if x is not None and math.isfinite(x)]


def _edge(pts: list[tuple[int, float]], last: bool, n: int = 5) -> float | None:
    """Mean of the first (or last) ``n`` values of a per-step curve; None if it is empty."""
    vals = _finite(v for _, v in pts)
    vals = vals[-n:] if last else vals[:n]
    return mean(vals) if vals else None


def summarise(curves: dict[str, dict[int, dict]], study: Study) -> list[dict]:
    """One row per arm: held-out start / peak / final per eval metric and training-batch start /
    end (mean of the first and last 5 steps) per training metric, each as the mean over seeds
    with the per-seed values beside it."""
    table = []
    for arm, seeds in curves.items():
        row: dict = {"arm": arm, "seeds": sorted(seeds)}
        for key in study.eval_curves:
            per = {s: [v for _, v in c[key]] for s, c in seeds.items() if _finite(v for _, v in c[key])}
            for name, pick in (("start", lambda v: v[0]), ("peak", max), ("final", lambda v: v[-1])):
                vals = {s: pick(_finite(v)) for s, v in per.items()}
                row[f"{key}:{name}"] = {"mean": mean(vals.values()) if vals else None, "per_seed": vals}
        for key in study.curves:
            for name, last in (("first5", False), ("last5", True)):
                vals = {s: _edge(c[key], last) for s, c in seeds.items()}
                vals = {s: v for s, v in vals.items() if v is not None}
                row[f"{key}:{name}"] = {"mean": mean(vals.values()) if vals else None, "per_seed": vals}
        table.append(row)
    return table


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _seeds(entry: dict) -> str:
    return "/".join(f"{v:.2f}" for v in entry["per_seed"].values())


def to_markdown(table: list[dict], study: Study) -> str:
    """The report's table, one row per arm, means over seeds (each seed's end value in brackets):
    held-out metrics as start -> final (peak), training-batch ones as the first 5 steps -> the last 5."""
    head = [f"{k} (held-out): start -> final (peak)" for k in study.eval_curves]
    head += [f"{k} (training batch): first 5 steps -> last 5" for k in study.curves]
    lines = [study.question, "", "| arm | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for r in table:
        cells = [f"{_num(r[k + ':start']['mean'])} -> **{_num(r[k + ':final']['mean'])}** "
                 f"({_num(r[k + ':peak']['mean'])}) [{_seeds(r[k + ':final'])}]" for k in study.eval_curves]
        cells += [f"{_num(r[k + ':first5']['mean'])} -> **{_num(r[k + ':last5']['mean'])}** [{_seeds(r[k + ':last5'])}]"
                  for k in study.curves]
        lines.append(f"| {r['arm']} (seeds {', '.join(map(str, r['seeds']))}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _plot(curves: dict[str, dict[int, dict]], study: Study, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(study.curves) + list(study.eval_curves)
    fig, axes = plt.subplots(1, len(keys), figsize=(3.6 * len(keys), 3.1))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, key in zip(axes, keys):
        for colour, (arm, seeds) in zip(colours, curves.items()):
            by_step: dict[int, list[float]] = {}
            for c in seeds.values():
                pts = c[key]
                if pts:
                    ax.plot(*zip(*pts), color=colour, lw=0.5, alpha=0.35)
                for step, v in pts:
                    by_step.setdefault(step, []).append(v)
            if by_step:
                steps = sorted(by_step)
                ax.plot(steps, [mean(by_step[s]) for s in steps], color=colour, lw=2,
                        marker="o" if key.startswith("eval/") else None, ms=3, label=arm)
        ax.set_title(key + (" (held-out)" if key.startswith("eval/") else " (training batch)"), fontsize=8)
        ax.set_xlabel("RL step")
        ax.legend(fontsize=7)
    fig.suptitle(f"{study.name}: {study.question}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(out: Path, study: Study, times: dict | None = None) -> dict:
    """Write ``results.json``, ``results.md`` and ``summary.png`` into ``out``; return the results."""
    out = Path(out)
    curves = load_study(out, study)
    table = summarise(curves, study)
    results = {"study": study.name, "question": study.question, "shared": list(study.shared),
               "sft_steps": study.sft_steps, "rl_steps": study.rl_steps, "table": table, "times_s": times or {},
               "curves": {a: {str(s): c for s, c in seeds.items()} for a, seeds in curves.items()}}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "results.md").write_text(to_markdown(table, study))
    _plot(curves, study, out / "summary.png")
    return results
