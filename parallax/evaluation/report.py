"""Reports of :func:`parallax.evaluation.metrics.evaluate_outputs` results: JSON, markdown tables, W&B.

Markdown tables are laid out like the papers' (one row per evaluated model, so several results
can be compared side by side):

1. main table (Parallel-R1 Table 2): ``#Parallel | <bench> Mean@k | <bench> Pass@k | ... | Avg.``;
2. budget table (Parason Exp. 2): accuracy under each critical-path budget B, per benchmark;
3. latency table (Parason Exp. 3): trigger rate, first-<Parallel> position, tokens, T, speed-up;
4. strata table (Parason Exp. 4): per difficulty stratum, tokens / longest path / speed-up / saved.

Numbers are percentages with one decimal where the papers use them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from parallax.evaluation.metrics import flatten_metrics

__all__ = ["log_wandb", "markdown_report", "write_report"]

#: Preferred column order (the papers' benchmarks first); others follow alphabetically.
_ORDER = ("aime25", "aime24", "amc23", "math500", "gsm8k", "toyworld")
_NAMES = {"aime25": "AIME25", "aime24": "AIME24", "amc23": "AMC23", "math500": "MATH", "gsm8k": "GSM8K",
          "toyworld": "Toy", "dapo_math_17k": "DAPO"}


def _benches(results: dict[str, dict]) -> list[str]:
    names = {b for r in results.values() for b in r["benchmarks"]}
    return [b for b in _ORDER if b in names] + sorted(names - set(_ORDER))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _main_table(results: dict[str, dict]) -> str:
    benches = _benches(results)
    header = ["Method", "#Parallel"]
    ks = {r["k"] for r in results.values()}
    k = ks.pop() if len(ks) == 1 else "k"
    for b in benches:
        header += [f"{_NAMES.get(b, b)} Mean@{k}", f"{_NAMES.get(b, b)} Pass@{k}"]
    header.append("Avg.")
    rows = []
    for label, r in results.items():
        row = [label, _pct(r["overall"]["parallel_ratio"])]
        for b in benches:
            s = r["benchmarks"].get(b)
            row += [_pct(s[f"mean@{r['k']}"]) if s else "-", _pct(s.get(f"pass@{r['k']}")) if s else "-"]
        row.append(_pct(r["overall"][f"avg_mean@{r['k']}"]))
        rows.append(row)
    return _table(header, rows)


def _budget_table(results: dict[str, dict]) -> str:
    budgets = sorted({int(b) for r in results.values() for b in r["budgets"]})
    header = ["Method", "Benchmark"] + [f"B={b:,}" for b in budgets] + ["no budget"]
    rows = []
    for label, r in results.items():
        for b in _benches({label: r}):
            s = r["benchmarks"][b]
            rows.append([label, _NAMES.get(b, b)] + [_pct(s["budget_acc"].get(str(x))) for x in budgets]
                        + [_pct(s[f"mean@{r['k']}"])])
    return _table(header, rows)


def _latency_table(results: dict[str, dict]) -> str:
    header = ["Method", "Benchmark", "#Parallel", "Format valid", "First <Parallel> pos.", "Tokens",
              "Critical path", "Speed-up", "Subtask share", "Trial share"]
    rows = []
    for label, r in results.items():
        for b in _benches({label: r}) + ["overall"]:
            s = r["overall"] if b == "overall" else r["benchmarks"][b]
            rows.append([label, _NAMES.get(b, b), _pct(s["parallel_ratio"]), _pct(s["format_valid"]),
                         _num(s["first_parallel_pos"], 3), _num(s["total_tokens"]), _num(s["critical_path_tokens"]),
                         f"{s['speedup']:.2f}x", _pct(s["subtask_share"]), _pct(s["trial_share"])])
    return _table(header, rows)


def _strata_table(results: dict[str, dict]) -> str | None:
    header = ["Method", "Benchmark", "Stratum", "Problems", "Mean@k", "Tokens", "Longest path", "Speed-up",
              "Saved tokens", "#Parallel"]
    rows = []
    for label, r in results.items():
        for b in _benches({label: r}):
            for name, s in r["benchmarks"][b].get("strata", {}).items():
                rows.append([label, _NAMES.get(b, b), name, str(s["n_problems"]), _pct(s[f"mean@{r['k']}"]),
                             _num(s["total_tokens"]), _num(s["critical_path_tokens"]), f"{s['speedup']:.2f}x",
                             _num(s["total_tokens"] - s["critical_path_tokens"]), _pct(s["parallel_ratio"])])
    return _table(header, rows) if rows else None


def markdown_report(results: dict[str, dict], title: str = "Parallax evaluation") -> str:
    """The four tables for ``{label: evaluate_outputs result}``."""
    if not results:
        raise ValueError("no results to report")
    parts = [f"# {title}", "", ("Accuracy in %, k samples per problem; #Parallel = share of samples with a "
             "well-formed parallel block; Avg. = mean of Mean@k over benchmarks."), "", "## Accuracy", "",
             _main_table(results), "", "## Accuracy under a critical-path budget B", "",
             "A sample counts as correct under B only if it is correct and its critical path is at most B tokens.",
             "", _budget_table(results), "", "## Parallelism and latency", "", _latency_table(results)]
    strata = _strata_table(results)
    if strata:
        parts += ["", "## Difficulty strata", "", strata]
    return "\n".join(parts) + "\n"


def write_report(result: dict[str, Any], out_dir: str | Path, label: str = "model",
                 plots: bool = True) -> dict[str, Any]:
    """Write ``metrics.json``, ``report.md`` and (when a plotting backend exists) PNG plots.

    Returns ``{"json": path, "markdown": path, "plots": [paths], "plot_backend": name | None}``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(result, indent=1, sort_keys=False))
    (out / "report.md").write_text(markdown_report({label: result}))
    paths: list[str] = []
    backend = None
    if plots:
        from parallax.evaluation.plots import plot_all

        paths, backend = plot_all(result, out)
    return {"json": str(out / "metrics.json"), "markdown": str(out / "report.md"), "plots": paths,
            "plot_backend": backend}


def log_wandb(result: dict[str, Any], *, project: str = "parallax", run_name: str | None = None,
              mode: str = "offline", out_dir: str | Path | None = None, step: int | None = None,
              plot_paths: list[str] | None = None) -> str:
    """Log the flattened metrics (and plots, the main table) to a W&B run; returns the run dir."""
    import wandb  # lazy: only when asked

    run = wandb.init(project=project, name=run_name, mode=mode, dir=str(out_dir) if out_dir else None,
                     job_type="eval", config={"format": result["format"], "k": result["k"]})
    try:
        payload: dict[str, Any] = dict(flatten_metrics(result))
        for p in plot_paths or []:
            payload[f"eval/plots/{Path(p).stem}"] = wandb.Image(p)
        rows = [[b, s[f"mean@{result['k']}"], s.get(f"pass@{result['k']}"), s["parallel_ratio"], s["speedup"]]
                for b, s in result["benchmarks"].items()]
        payload["eval/table"] = wandb.Table(columns=["benchmark", "mean@k", "pass@k", "parallel", "speedup"],
                                            data=rows)
        run.log(payload, step=step)
        return str(run.dir)
    finally:
        run.finish()
