"""Reward throughput: rewards/s for format-only rewards and with math verification.

Runs the real :class:`actors.reward_worker.RewardWorker` on synthetic groups (8 samples
per group) and reports samples scored per second:

* ``format``        -- parse + well-formedness only (no answer verification, no processes);
* ``tiered/int``    -- Parallel-R1 texts, integer answers: exact fast path, no sympy;
* ``pa_grpo/int``   -- Parason texts (nested metrics, z-scores), integer answers;
* ``accuracy/mv``   -- ``\\boxed{\\frac{a}{b}}`` against decimal golds: every item goes to
  math-verify in the process pool (``--workers`` processes, per-item timeout).

Usage: ``PYTHONPATH=. python bench/bench_rewards.py [--n 2000] [--n-mv 200] [--workers 2]``.
Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from actors.reward_worker import RewardGroup, RewardWorker


def _r1_text(rng: random.Random, ans: int, parallel: bool) -> str:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    body = f"We need {a} and {b}. " * rng.randint(1, 4)
    if parallel:
        body += (
            f"<Parallel><Path>try {a}*{b}</Path><Path>try {b}*{a}</Path>"
            f"<Summary>both give the same</Summary></Parallel> "
        )
    return body + f"so the result is {ans}.\n#### {ans}"


def _parason_text(rng: random.Random, ans: int) -> str:
    sub = "<Subtask>part one</Subtask><Subtask>part two</Subtask>"
    thr = "<Thread>" + "step " * rng.randint(1, 30) + "</Thread>"
    inner = (
        f"<Parallel><Outlines><Trial>guess a</Trial><Trial>guess b</Trial></Outlines>{thr}{thr}</Parallel>"
    )
    return (
        f"Plan. <Parallel><Outlines>{sub}</Outlines><Thread>{inner} ok</Thread>"
        f"<Thread>{'work ' * rng.randint(1, 40)}</Thread></Parallel> done #### {ans}"
    )


def _groups(kind: str, n: int, rng: random.Random, g: int = 8) -> list[RewardGroup]:
    out = []
    for _ in range(max(1, n // g)):
        ans = rng.randint(1, 10_000)
        if kind == "mv":
            num, den = rng.randint(1, 50), rng.choice([2, 4, 5, 8])
            gold = repr(num / den)
            texts = [
                f"Compute... \\boxed{{\\frac{{{num}}}{{{den}}}}}"
                if rng.random() < 0.7
                else f"\\boxed{{\\frac{{{num + 1}}}{{{den}}}}}"
                for _ in range(g)
            ]
        elif kind == "parason":
            gold = str(ans)
            texts = [_parason_text(rng, ans if rng.random() < 0.6 else ans + 1) for _ in range(g)]
        else:
            gold = str(ans)
            texts = [
                _r1_text(rng, ans if rng.random() < 0.6 else ans + 1, rng.random() < 0.5) for _ in range(g)
            ]
        out.append(RewardGroup(texts, gold))
    return out


def _run(reward: str, params: dict, groups: list[RewardGroup], workers: int) -> dict:
    w = RewardWorker(reward, params, workers=workers, timeout_s=10.0)
    try:
        w.score(groups[:2])  # warm: pool start-up and imports are not throughput
        t0 = time.perf_counter()
        out = w.score(groups, step=8)
        dt = time.perf_counter() - t0
    finally:
        w.close()
    n = sum(len(g.texts) for g in groups)
    return {
        "samples": n,
        "seconds": round(dt, 3),
        "rewards_per_s": round(n / dt, 1),
        "acc": round(out.metrics.get("reward/correct", 0.0), 3),
        "errors": sum(out.errors.values()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="samples for the fast cases")
    ap.add_argument("--n-mv", type=int, default=200, help="samples for the math-verify case")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    rng = random.Random(0)
    cases = {
        "format": ("format", {}, _groups("r1", args.n, rng)),
        "tiered/int": ("tiered", {}, _groups("r1", args.n, rng)),
        "pa_grpo/int": (
            "pa_grpo",
            {"alpha": 0.1, "beta_sub": 0.1, "rho": 1.0},
            _groups("parason", args.n, rng),
        ),
        "accuracy/mv": ("accuracy", {}, _groups("mv", args.n_mv, rng)),
    }
    results = {name: _run(r, p, g, args.workers) for name, (r, p, g) in cases.items()}
    print(f"{'case':<14}{'samples':>9}{'seconds':>10}{'rewards/s':>12}{'acc':>7}{'errors':>8}")
    for name, r in results.items():
        print(
            f"{name:<14}{r['samples']:>9}{r['seconds']:>10}{r['rewards_per_s']:>12}{r['acc']:>7}{r['errors']:>8}"
        )
    print(json.dumps({"bench": "rewards", "workers": args.workers, "results": results}))


if __name__ == "__main__":
    main()
