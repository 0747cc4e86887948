"""The CI tiers are chosen in tests/conftest.py alone (PARALLAX_TIER), and a `-m` given on the command
line composes with them: it narrows a tier, never replaces it (a `-m` used to override `.ci/run`'s
`-m 'not vllm'`, and would have run the vLLM tier twice)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILE = "tests/bench/test_bench_smoke.py"  # one `vllm` test (..._on_vllm), one `slow`, the rest neither; light imports


def _collected(tier: str | None, *args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PARALLAX_TIER"} | ({"PARALLAX_TIER": tier} if tier else {})
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          *args, FILE],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode in (0, 5), out.stdout[-2000:] + out.stderr[-2000:]  # 5: nothing selected
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_a_marker_narrows_a_tier_and_never_replaces_it():
    # rest AND (slow or vllm): of the file's many rest tests only its slow one. Were the `-m` to replace
    # the tier, the vllm test would be here too.
    assert _collected("rest", "-m", "slow or vllm") == [f"{FILE}::test_bench_peer"]
    if _has_vllm():  # the vLLM tier needs vLLM installed (the README's install command)
        # vllm AND (vllm or slow): the file's vLLM test, but not its slow rest test
        assert _collected("vllm", "-m", "vllm or slow") == [f"{FILE}::test_bench_requests_on_vllm"]


def test_an_unknown_tier_is_a_usage_error():
    env = os.environ | {"PARALLAX_TIER": "fast"}
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", FILE],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode != 0 and "PARALLAX_TIER='fast': expected one of vllm, rest" in out.stdout + out.stderr


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None
