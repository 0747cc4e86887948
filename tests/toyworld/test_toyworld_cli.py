"""``python -m parallax.toyworld sample`` prints the same problems as the library, in any process."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from parallax import toyworld

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, hashseed: str = "123") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": hashseed, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "parallax.toyworld", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


def _as_json(p: toyworld.Problem) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(p)))  # the key's tuples print as lists


def test_sample_prints_jsonl_identical_to_generate_under_another_hash_seed():
    out = _run("sample", "--family", "mixed", "-n", "5", "--seed", "0", "--difficulty", "1,2")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    want = [_as_json(p) for p in toyworld.generate("mixed", 5, 0, (1, 2))]
    assert rows == want


def test_sample_rejects_bad_difficulty_with_a_message():
    out = _run("sample", "--difficulty", "0")
    assert out.returncode != 0
    assert "difficulty must be in 1..7" in out.stderr


def test_sample_streams_a_huge_n_in_constant_memory():
    """`-n 100000000` prints its first lines at once and stops cleanly when the reader leaves; before,
    it built the whole list first (past 1.28 GB, nothing printed)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "parallax.toyworld", "sample", "-n", "100000000"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = [proc.stdout.readline() for _ in range(3)]
    proc.stdout.close()  # the reader leaves, as `| head -3` does
    assert proc.wait(timeout=30) == 0, proc.stderr.read()[-1000:]
    assert proc.stderr.read() == b""
    first = [json.loads(x) for x in lines]
    assert first == [_as_json(p) for p in toyworld.generate("mixed", 3, 0)]
