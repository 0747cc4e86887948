"""Soak: a long RL run while rollout and reward actors are SIGKILLed at random, from outside.

    python bench/soak.py --rl-steps 60 --kill-every 4
    python bench/soak.py --rl-steps 500 --kill-every 60 --max-staleness 1   # memory over a long run

Runs the toy experiment (`python -m orchestrator +experiment=smoke`, 2 rollout and 2 reward actors)
as a subprocess and, from this process, SIGKILLs a random `ray::RolloutWorker` or `ray::RewardWorker`
process of its tree every `--kill-every` seconds (uniform in [0.5, 1.5] x that), as an operator or
a node failure would. Then it reads the run's metrics.jsonl and checks what a lost actor must never
cost: every RL step logged once, each with exactly prompts x n samples, and every metric finite.

Memory: every `--rss-every` seconds it records the resident set size of the driver and of each actor
process (learner, rollout, reward) against the step the run is at, and fits a line to each process's
samples after the warm-up (`--warmup` steps) and before the last step (the run's end: its final save and
plot): the slope, in MB per 100 steps, is what a long run would
grow by. The driver's and the largest actor's slopes are in the JSON line, with `rss_flat`: both within
`--rss-bound` MB per 100 steps (a restarted actor starts a new series; series under 20 samples are left out).

Prints a table (kills, retries, steps) and one JSON line:
{"bench": "soak", "rl_steps", "kills", "rollout_retries", "reward_retries", "samples_exact", "finite",
 "rc", "wall_s", "loadavg", "rss_driver_mb", "rss_driver_mb_per_100_steps", "rss_actor_mb_per_100_steps",
 "rss_bound_mb_per_100_steps", "rss_flat"}.
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
ACTORS = (*VICTIMS, "ray::LearnerWorker")


def steps_logged(metrics: Path) -> int:
    try:
        return sum(1 for line in metrics.read_text().splitlines() if line.strip())
    except OSError:
        return 0


def sample_rss(root_pid: int, metrics: Path, every: float, stop: threading.Event, out: list) -> None:
    """(step, process, pid, RSS in MB) of the driver and each actor process, every `every` seconds."""
    import psutil

    try:
        root = psutil.Process(root_pid)
    except psutil.NoSuchProcess:
        return
    while not stop.wait(every):
        step = steps_logged(metrics)
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for p in procs:
            try:  # an actor's title is its class while idle, `ray::Class.method` while it runs one
                name = "driver" if p.pid == root_pid else " ".join(p.cmdline())
                if name == "driver" or name.startswith(ACTORS):
                    role = name.removeprefix("ray::").split(".")[0].split()[0]
                    out.append((step, role, p.pid, p.memory_info().rss / 2**20))
            except psutil.Error:
                continue


def slope_per_100(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of RSS (MB) against the step, times 100."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return 100 * sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


def rss_slopes(samples: list, warmup: int) -> dict[tuple[str, int], tuple[float, float, int, float]]:
    """(process, pid) -> (slope in MB per 100 steps, last RSS in MB, samples, the slope over the second half
    of them: near the whole one, steady growth; near 0, growth that has settled) after the warm-up."""
    series: dict[tuple[str, int], list[tuple[int, float]]] = {}
    roles: dict[int, str] = {}
    end = max((step for step, *_ in samples), default=0)  # the last step's samples: the run's end (plot, save)
    for step, name, pid, rss in samples:
        if warmup <= step < end:
            series.setdefault((roles.setdefault(pid, name), pid), []).append((step, rss))
    return {k: (slope_per_100(v), v[-1][1], len(v), slope_per_100(v[len(v) // 2:])) for k, v in series.items()
            if len(v) >= 20 and v[-1][0] - v[0][0] >= 50}


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
    ap.add_argument("--max-staleness", type=int, default=0, help="trainer.max_staleness (the pipeline)")
    ap.add_argument("--rss-every", type=float, default=2.0, help="seconds between RSS samples")
    ap.add_argument("--warmup", type=int, default=50, help="steps before the RSS slope is fitted")
    ap.add_argument("--rss-bound", type=float, default=2.0, help="MB per 100 steps that counts as flat")
    ap.add_argument("--rss-out", type=Path, help="write every RSS sample here (JSON lines)")
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
           "logging.wandb_mode=disabled", "logging.print_every=0", f"hydra.run.dir={run}",
           f"trainer.max_staleness={args.max_staleness}",
           *(["rollout.torch_threads=1", "learner.torch_threads=1"] if args.max_staleness else [])]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    stop, kills = threading.Event(), []
    thread = threading.Thread(target=killer, args=(proc.pid, args.kill_every, stop, kills, random.Random(args.seed)),
                              daemon=True)
    thread.start()
    rss: list = []
    sampler = threading.Thread(target=sample_rss, args=(proc.pid, run / "metrics.jsonl", args.rss_every, stop, rss),
                               daemon=True)
    sampler.start()
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
    if args.rss_out:
        args.rss_out.write_text("".join(json.dumps({"step": st, "process": nm, "pid": pid, "rss_mb": round(mb, 2)})
                                        + "\n" for st, nm, pid, mb in rss))
    slopes = rss_slopes(rss, args.warmup)
    for (name, pid), (slope, last, n_samples, late) in sorted(slopes.items()):
        print(f"rss {name:>14} pid {pid:>7}: {last:7.0f} MB at the end, {slope:+7.2f} MB per 100 steps "
              f"({late:+.2f} over the second half; {n_samples} samples after step {args.warmup})")
    driver = [v for (name, _), v in slopes.items() if name == "driver"]
    actors = [v[0] for (name, _), v in slopes.items() if name != "driver"]
    worst_actor = max(actors, key=abs) if actors else None
    print(json.dumps({"bench": "soak", "rl_steps": len(rl), "kills": len(kills),
                      "rollout_kills": by_kind[VICTIMS[0]], "reward_kills": by_kind[VICTIMS[1]],
                      "rollout_retries": retries["rollout/retries"], "reward_retries": retries["reward/retries"],
                      "samples_exact": exact, "finite": finite, "rc": proc.returncode, "wall_s": round(wall, 1),
                      "loadavg": os.getloadavg()[0],
                      "rss_driver_mb": round(driver[0][1], 1) if driver else None,
                      "rss_driver_mb_per_100_steps": round(driver[0][0], 3) if driver else None,
                      "rss_actor_mb_per_100_steps": None if worst_actor is None else round(worst_actor, 3),
                      "rss_bound_mb_per_100_steps": args.rss_bound,
                      "rss_flat": bool(driver) and all(abs(x) <= args.rss_bound
                                                       for x in [driver[0][0], *actors])}))


if __name__ == "__main__":
    main()
