"""TimeoutPool: hard per-item timeout, crash and exception isolation."""

import os
import time

from rewards.pool import TimeoutPool


def test_pool_timeout_crash_exception_and_order():
    with TimeoutPool(pow, workers=2, timeout_s=1.0, max_memory_mb=None) as pool:
        t0 = time.perf_counter()
        # 9 ** 387420489 runs in C for minutes: no signal can stop it, only the kill
        out = pool.map([(2, 10), (9, 387_420_489), (3, 3), (2, "x"), (5, 2)])
        elapsed = time.perf_counter() - t0
        assert [o.ok for o in out] == [True, False, True, False, True]
        assert [o.value for o in out if o.ok] == [1024, 27, 25]
        assert out[1].reason == "timeout" and out[3].reason == "exception"
        assert "TypeError" in out[3].detail
        assert elapsed < 5.0
        assert pool.restarts == 1
        assert [o.value for o in pool.map([(2, 3)] * 20)] == [8] * 20  # the pool keeps working


def test_pool_worker_death_is_a_crash_not_an_exception():
    with TimeoutPool(os._exit, workers=1, timeout_s=2.0) as pool:
        out = pool.map([(3,), (4,)])
        assert [o.reason for o in out] == ["crash", "crash"]


def _slow_module(tmp_path, monkeypatch, seconds: float) -> str:
    """A module that takes `seconds` to import, importable by the pool's worker processes."""
    import sys

    name = f"slow_import_{int(seconds * 10)}"
    (tmp_path / f"{name}.py").write_text(f"import time\ntime.sleep({seconds})\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    return name


def test_imports_are_never_charged_to_an_item(tmp_path, monkeypatch):
    """Workers import `preload` before they take an item: a 2 s import under a 1 s item timeout
    scores every item, and the worker that replaces a timed-out one is warm before its next item."""
    slow = _slow_module(tmp_path, monkeypatch, 2.0)
    # spawn: every worker (replacements too) pays the import itself, the worst case
    with TimeoutPool(pow, workers=1, timeout_s=1.0, start_method="spawn", preload=(slow,),
                     max_memory_mb=None) as pool:
        out = pool.map([(2, 5), (9, 387_420_489), (3, 2)])
        assert [o.ok for o in out] == [True, False, True] and out[1].reason == "timeout"
        assert [o.value for o in out if o.ok] == [32, 9] and pool.restarts == 1


def test_a_worker_that_cannot_start_is_an_error_not_a_hang(tmp_path, monkeypatch):
    import pytest

    slow = _slow_module(tmp_path, monkeypatch, 30.0)
    with TimeoutPool(pow, workers=1, timeout_s=1.0, start_method="spawn", preload=(slow,),
                     ready_timeout_s=2.0, max_memory_mb=None) as pool:
        t0 = time.perf_counter()
        with pytest.raises(RuntimeError, match=f"not ready after 2 s \\(importing {slow}\\)"):
            pool.map([(2, 5)])
        assert time.perf_counter() - t0 < 15
