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
