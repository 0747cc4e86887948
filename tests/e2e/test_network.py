"""What a local run opens on the network: every listening socket of the run's process tree, sampled
while it trains (2 DeepSpeed learners, the collective weight sync, the dashboard on), must be on the
loopback; none on a wildcard address (0.0.0.0, ::) and none on the machine's own address."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
ARGS = ["+experiment=smoke", "curriculum.stages.sft.steps=2", "curriculum.stages.rl.steps=6",
        "trainer.eval_after_stage=false", "logging.progress_bar=false", "data.n_train=64",
        "learner.num_actors=2", "cluster.include_dashboard=true"]


def _listeners(root: psutil.Process) -> dict[tuple[str, int], str]:
    """(ip, port) -> process name, for every socket listening in `root`'s process tree."""
    out = {}
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return out
    for p in procs:
        try:
            name = p.name()
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out[(c.laddr.ip, c.laddr.port)] = name
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:  # ::ffff:127.0.0.1
        addr = addr.ipv4_mapped
    return addr.is_loopback


def test_a_local_run_listens_on_loopback_only(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", *ARGS, f"hydra.run.dir={tmp_path / 'run'}"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    root, seen, names = psutil.Process(proc.pid), {}, set()
    deadline = time.time() + 900
    try:
        while proc.poll() is None and time.time() < deadline:
            now = _listeners(root)
            seen.update(now)
            names.update(p.name() for p in root.children(recursive=True) if p.is_running())
            time.sleep(0.5)
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    # the sample saw the run, not an empty tree: Ray's servers and the learners were up while listed
    assert any(n.startswith("gcs_server") for n in names) and "ray::LearnerWorker" in names, sorted(names)
    assert {n for n in seen.values()} >= {"gcs_server", "raylet"}, seen
    exposed = {f"{ip}:{port} ({name})" for (ip, port), name in seen.items() if not _loopback(ip)}
    assert not exposed, f"listening beyond the loopback: {sorted(exposed)}"
