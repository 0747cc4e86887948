"""A visible run that exposes nothing, checked on one run while it trains (2 DeepSpeed learners, the
collective weight sync, the dashboard on):

* the Prometheus endpoint the Ray dashboard reads serves the run's step metrics, W&B gets tables of
  sampled trajectories, and the progress bar shows stage, reward and #Parallel;
* every listening socket of the run's process tree is on the loopback: none on a wildcard address
  (0.0.0.0, ::) and none on the machine's own address (a local run, `cluster.loopback`)."""

from __future__ import annotations

import json
import math
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from listeners import listeners, loopback  # tests/e2e is on sys.path

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
WANTED = ("timing_update", "timing_generate", "timing_sync", "throughput_tokens_per_s", "reward_mean",
          "parallel_ratio", "rollout_samples")


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


def test_metrics_endpoint_tables_and_progress_bar(tmp_path):
    port = _free_port()
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "orchestrator", "+experiment=smoke", "curriculum.stages.sft.steps=4",
           "curriculum.stages.rl.steps=6", "trainer.eval_after_stage=false", "data.n_train=64",
           "logging.table_every=2", "logging.table_rows=3", "logging.progress_bar=true",
           f"cluster.metrics_export_port={port}", "cluster.include_dashboard=true", "learner.num_actors=2",
           f"hydra.run.dir={run}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root = psutil.Process(proc.pid)
    seen: dict[str, float] = {}
    sockets: dict[tuple[str, int], str] = {}
    names: set[str] = set()
    deadline = time.time() + 900
    while proc.poll() is None and time.time() < deadline:
        seen |= _scrape(port)
        sockets |= listeners(root)
        names |= {p.name() for p in root.children(recursive=True) if p.is_running()}
        time.sleep(0.5)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    # nothing beyond the loopback; and the listing saw the run: Ray's servers and the learners
    assert "ray::LearnerWorker" in names and {"gcs_server", "raylet"} <= set(sockets.values()), sorted(names)
    exposed = {f"{ip}:{p} ({name})" for (ip, p), name in sockets.items() if not loopback(ip)}
    assert not exposed, f"listening beyond the loopback: {sorted(exposed)}"
    assert f"127.0.0.1:{port}/metrics" in out
    missing = [k for k in WANTED if k not in seen]
    assert not missing, f"not scraped: {missing}; got {sorted(seen)}"
    assert all(math.isfinite(v) for v in seen.values())
    assert seen["rollout_samples"] == 32.0  # smoke: 8 prompts x 4 samples
    # tables: RL steps 4, 6, 8 (stage steps 0, 2, 4), 3 rows each, in the jsonl and in W&B's files
    tables = sorted(p.name for p in (run / "samples").iterdir())
    assert tables == ["step_4.jsonl", "step_6.jsonl", "step_8.jsonl"], tables
    rows = [json.loads(x) for x in (run / "samples" / "step_6.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and len({r["prompt"] for r in rows}) == 3  # spread over prompts
    assert {"prompt", "completion", "reward", "valid", "critical_path", "policy_version"} <= set(rows[0])
    assert all(r["policy_version"] >= 1 for r in rows)  # sampled after SFT's weights were pushed
    assert list(run.glob("wandb/offline-run-*/files/media/table/samples_*.table.json"))
    assert re.search(r"stage=rl reward=[-\d.]+ #Parallel=[\d.]+", err), err[-2000:]
