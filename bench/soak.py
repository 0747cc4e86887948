"""Soak: a long RL run while rollout and reward actors are SIGKILLed at random, from outside.

    python bench/soak.py --rl-steps 60 --kill-every 4

Runs the toy experiment (`python -m orchestrator +experiment=smoke`, 2 rollout and 2 reward actors)
as a subprocess and, from this process, SIGKILLs a random `ray::RolloutWorker` or `ray::RewardWorker`
process of its tree every `--kill-every` seconds (uniform in [0.5, 1.5] x that), as an operator or
a node failure would. Then it reads the run's metrics.jsonl and checks what a lost actor must never
cost: every RL step logged once, each with exactly prompts x n samples, and every metric finite.

Prints a table (kills, retries, steps) and one JSON line:
{"bench": "soak", "rl_steps", "kills", "rollout_retries", "reward_retries", "samples_exact", "finite",
 "rc", "wall_s", "loadavg"}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VICTIMS = ("ray::RolloutWorker", "ray::RewardWorker")


def victims(root_pid: int) -> list[tuple[int, str]]:
    """(pid, name) of the run's rollout and reward actor processes."""
    import psutil

    try:
        procs = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in procs:
        try:
            name = p.name()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if name.startswith(VICTIMS):
            out.append((p.pid, name))
    return out


def killer(root_pid: int, every: float, stop: threading.Event, log: list, rng: random.Random) -> None:
    started = False
    while not stop.wait(every * rng.uniform(0.5, 1.5)):
        found = victims(root_pid)
        started = started or bool(found)
        if not found:
            continue
        pid, name = rng.choice(found)
        try:
            os.kill(pid, signal.SIGKILL)
            log.append((time.monotonic(), name))
        except ProcessLookupError:
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rl-steps", type=int, default=60)
    ap.add_argument("--kill-every", type=float, default=4.0, help="mean seconds between kills")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=3000)
    args = ap.parse_args()

    run = Path(tempfile.mkdtemp(prefix="parallax-soak-")) / "run"
    prompts, n = 4, 2
    cmd = [sys.executable, "-m", "orchestrator", "+experiment=smoke", "curriculum.stages.sft.steps=4",
           f"curriculum.stages.rl.steps={args.rl_steps}", "data.n_train=64", "trainer.eval_after_stage=false",
           f"trainer.prompts_per_step={prompts}", f"rollout.n={n}", "rollout.max_new_tokens=24",
           "rollout.num_actors=2", "reward.num_actors=2", "rollout.num_cpus=0.25", "reward.num_cpus=0.25",
           "learner.num_cpus=0.25", "cluster.max_restarts=1000", "logging.progress_bar=false",
           # a rollout actor killed while the sync group forms leaves learner rank 0 in the rendezvous until
           # this timeout: bounded at 30 s (the tiny model's group forms in well under a second)
           "rollout.weight_sync.timeout_s=30",
           "logging.wandb_mode=disabled", "logging.print_every=0", f"hydra.run.dir={run}"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    stop, kills = threading.Event(), []
    thread = threading.Thread(target=killer, args=(proc.pid, args.kill_every, stop, kills, random.Random(args.seed)),
                              daemon=True)
    thread.start()
    try:
        out, _ = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    stop.set()
    wall = time.monotonic() - t0
    rows = ([json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            if (run / "metrics.jsonl").exists() else [])
    rl = [r for r in rows if "reward/mean" in r]
    steps = [r["step"] for r in rows]
    exact = len(rl) == args.rl_steps and len(steps) == len(set(steps)) and all(
        r["rollout/samples"] == prompts * n for r in rl)
    finite = all(math.isfinite(v) for r in rows for v in r.values() if isinstance(v, float))
    retries = {k: int(sum(r.get(k, 0) for r in rl)) for k in ("rollout/retries", "reward/retries")}
    by_kind = {v: sum(name.startswith(v) for _, name in kills) for v in VICTIMS}
    print(f"{'rl steps':>10} {'kills':>6} {'rollout':>8} {'reward':>7} {'rollout retries':>16} "
          f"{'reward retries':>15} {'exact':>6} {'finite':>7} {'rc':>3} {'wall s':>7}")
    print(f"{len(rl):>10} {len(kills):>6} {by_kind[VICTIMS[0]]:>8} {by_kind[VICTIMS[1]]:>7} "
          f"{retries['rollout/retries']:>16} {retries['reward/retries']:>15} {exact!s:>6} {finite!s:>7} "
          f"{proc.returncode:>3} {wall:>7.0f}")
    if proc.returncode != 0:
        print(out[-3000:], file=sys.stderr)
    print(json.dumps({"bench": "soak", "rl_steps": len(rl), "kills": len(kills),
                      "rollout_kills": by_kind[VICTIMS[0]], "reward_kills": by_kind[VICTIMS[1]],
                      "rollout_retries": retries["rollout/retries"], "reward_retries": retries["reward/retries"],
                      "samples_exact": exact, "finite": finite, "rc": proc.returncode, "wall_s": round(wall, 1),
                      "loadavg": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
