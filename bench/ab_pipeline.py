"""A/B of the pipeline on a real training run: synchronous vs trainer.max_staleness=1 vs 2.

    python bench/ab_pipeline.py --staleness 0 1 2 -- curriculum.stages.sft.steps=400 trainer.seed=0

Its smoke test is tests/e2e/test_pipeline.py's staleness test, which reads the runs it keeps (--out).

Runs `python -m orchestrator` once per staleness with the same overrides (the default experiment:
the RL-beats-SFT test's run with those two), one after the other, and reads each run's summary.json
and metrics.jsonl: held-out mean@8, answered share and greedy accuracy after SFT and after the last
stage, the mean RL step time (`timing/step`) and the mean staleness of the samples trained on, and
the run's wall time. Every RL step must keep its prompts x n samples.

Prints a table and one JSON line: {"bench": "ab_pipeline", "rows": [{"staleness", "acc_sft",
"acc_rl", "gain", "answered_sft", "answered_rl", "greedy_sft", "greedy_rl", "rl_step_s", "rl_steps",
"staleness_mean", "samples_exact", "wall_s"}, ...], "loadavg"}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean

ROOT = Path(__file__).resolve().parents[1]


def run(staleness: int, overrides: list[str], run_dir: Path) -> dict:
    cmd = [sys.executable, "-m", "orchestrator", *overrides, f"trainer.max_staleness={staleness}",
           f"hydra.run.dir={run_dir}", "logging.progress_bar=false"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"staleness {staleness}: exit {out.returncode}\n{out.stderr[-3000:]}")
    stages = {s["stage"]: s for s in json.loads((run_dir / "summary.json").read_text())["stages"]}
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "reward/mean" in r]
    # trainer.eval_after_stage=false (a run timed for its steps alone): no accuracy columns
    first = stages.get("sft") or stages.get("init") or {}
    last = list(stages.values())[-1] if stages else {}
    want = {r["step"]: r["rollout/samples"] for r in rl}
    gain = last["eval/acc"] - first["eval/acc"] if "eval/acc" in first and "eval/acc" in last else None
    return {"staleness": staleness,
            "acc_sft": first.get("eval/acc"), "acc_rl": last.get("eval/acc"), "gain": gain,
            "answered_sft": first.get("eval/answered"), "answered_rl": last.get("eval/answered"),
            "greedy_sft": first.get("eval/acc_greedy"), "greedy_rl": last.get("eval/acc_greedy"),
            "rl_step_s": mean(r["timing/step"] for r in rl) if rl else 0.0, "rl_steps": len(rl),
            "staleness_mean": mean(r["actor/staleness"] for r in rl) if rl else 0.0,
            "samples_exact": len(set(want.values())) <= 1, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", type=Path, help="keep each run's directory here (s0, s1, ...); default: a temp dir")
    ap.add_argument("overrides", nargs="*", help="orchestrator overrides, after --")
    args = ap.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="ab_pipeline_"))
    load = {"start": os.getloadavg()}
    rows = [run(s, args.overrides, root / f"s{s}") for s in args.staleness]
    load["end"] = os.getloadavg()
    head = (f"{'staleness':>9} {'mean@8 SFT -> RL':>18} {'gain':>7} {'answered':>12} {'greedy':>12} "
            f"{'RL step s':>9} {'versions behind':>15} {'wall s':>7}")
    print(head)
    print("-" * len(head))
    def f(x, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    for r in rows:
        print(f"{r['staleness']:>9} {f(r['acc_sft'], '>8.3f')} -> {f(r['acc_rl'], '.3f')} {f(r['gain'], '>+7.3f')} "
              f"{f(r['answered_sft'], '.2f')} -> {f(r['answered_rl'], '.2f')} {f(r['greedy_sft'], '.3f')} -> "
              f"{f(r['greedy_rl'], '.3f')} {r['rl_step_s']:>9.2f} {r['staleness_mean']:>15.2f} {r['wall_s']:>7.0f}")
    print(json.dumps({"bench": "ab_pipeline", "overrides": args.overrides, "rows": rows,
                      "loadavg": {k: [round(x, 2) for x in v] for k, v in load.items()}}))


if __name__ == "__main__":
    main()
