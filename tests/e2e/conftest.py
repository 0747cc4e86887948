"""The suite's one shared smoke run: several end-to-end tests read its outputs instead of each paying
for a run of their own (a run costs ~60 s here, most of it Ray, actor and model start-up).

It is the visible run (tests/e2e/test_visible_run.py): `+experiment=smoke` (80 SFT steps) with 6 RL
steps of executed branches over whole engine requests, scored with the structured layout, on 2
DeepSpeed learners, each with its engine on its bundle (`rollout.colocate`, asleep at level 2 through
every update), the dashboard and the Prometheus endpoint on, progress bar and sample tables,
evaluated before and after each stage. While it trains, the fixture scrapes the endpoint and lists the
process tree's listening sockets; tests/e2e/test_cli.py's `requests` case reads the same run's files."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from leftovers import shm_files  # tests/e2e is on sys.path
from listeners import listeners

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class SmokeRun:
    run_dir: Path
    returncode: int
    stdout: str
    stderr: str
    port: int
    scraped: dict[str, float] = field(default_factory=dict)  # the endpoint's ray_parallax_* values
    sockets: dict[tuple[str, int], str] = field(default_factory=dict)  # (ip, port) -> process name
    names: set[str] = field(default_factory=set)  # names of the run's processes
    shm_left: set[str] = field(default_factory=set)  # shared memory the run made and left in /dev/shm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[str, float]:
    """`ray_parallax_<name>{...run="run"...} value` lines of the endpoint -> {name: value}."""
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    out = {}
    for line in body.splitlines():
        m = re.match(r'ray_parallax_(\w+)\{([^}]*)\} (\S+)$', line)
        if m and 'run="run"' in m.group(2):
            out[m.group(1)] = float(m.group(3))
    return out


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> SmokeRun:
    port = _free_port()
    run_dir = tmp_path_factory.mktemp("smoke") / "run"
    cmd = [sys.executable, "-m", "orchestrator", "+experiment=smoke", "curriculum.stages.rl.steps=6",
           "rollout.executor.mode=executed", "rollout.executor.dispatch=requests", "learner.layout=structured",
           "data.n_train=64", "logging.table_every=2", "logging.table_rows=3",
           "logging.progress_bar=true", f"cluster.metrics_export_port={port}", "cluster.include_dashboard=true",
           "learner.num_actors=2", "rollout.colocate=true", "rollout.num_actors=2", "rollout.sleep_level=2",
           # held out: 2 samples a problem, no greedy one (the readers check the rows, not a figure's noise):
           # each of the three evaluations ~2 s instead of ~8
           "trainer.eval_samples=2", "trainer.eval_greedy=false", f"hydra.run.dir={run_dir}"]
    # the run's output goes to files: a pipe nobody reads until the end would stop the run once it filled
    out_path, err_path = run_dir.parent / "stdout.txt", run_dir.parent / "stderr.txt"
    before = shm_files()
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=err, text=True)
        root = psutil.Process(proc.pid)
        run = SmokeRun(run_dir, -1, "", "", port)
        deadline = time.time() + 900
        while proc.poll() is None and time.time() < deadline:
            t0 = time.process_time()
            run.scraped |= _scrape(port)
            run.sockets |= listeners(root)
            try:
                run.names |= {p.name() for p in root.children(recursive=True) if p.is_running()}
            except psutil.Error:  # a process ended while listed
                pass
            # the polling is this process's CPU, taken from the run's 2 cores: at most ~1/10 of one
            time.sleep(max(0.5, 10 * (time.process_time() - t0)))
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
    run.stdout, run.stderr, run.returncode = out_path.read_text(), err_path.read_text(), proc.returncode
    run.shm_left = shm_files() - before
    return run
