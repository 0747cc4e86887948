"""A small process pool with a hard per-item timeout.

``concurrent.futures`` cannot stop a running task, and sympy can spin in C code
(``9^9^9^9``) where no signal handler runs.  Here every item runs in a worker process;
a worker first imports ``preload`` and reports ready, and an item's deadline starts only when a
ready worker takes it, so imports (verl's DAPO scorer: 5-8 s, more under load) are never charged
to an item; a worker that timed out is replaced by a warm one (forked from the server that preloaded
them).  An item past its deadline gets its worker killed and replaced, and comes back as
``Outcome(ok=False, reason="timeout")``.  A worker that dies (segfault, out-of-memory
kill, ``RLIMIT_AS``) gives ``reason="crash"``; an exception raised by the function gives
``reason="exception"``.  The caller never sees an exception from an item.

Example:
    >>> with TimeoutPool(abs, workers=1, timeout_s=5) as pool:  # doctest: +SKIP
    ...     [o.value for o in pool.map([(-3,), (4,)])]
    [3, 4]
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Self

__all__ = ["Outcome", "TimeoutPool"]


@dataclass(frozen=True)
class Outcome:
    """Result of one item: ``value`` when ``ok``, else a short ``reason`` and ``detail``."""

    ok: bool
    value: Any = None
    reason: str = ""
    detail: str = ""


READY = "ready"


def _worker_main(conn: Connection, fn: Callable[..., Any], max_memory_mb: int | None,
                 preload: tuple[str, ...] = ()) -> None:
    for name in preload:  # forkserver: already imported by the server, so a no-op; spawn: paid here
        importlib.import_module(name)
    conn.send(READY)
    if max_memory_mb:
        import resource

        limit = max_memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        idx, args = msg
        try:
            out = (idx, True, fn(*args), "")
        except MemoryError:
            out = (idx, False, "memory", "MemoryError")
        except Exception as e:  # noqa: BLE001 - any failure of one item is reported, not raised
            out = (idx, False, "exception", f"{type(e).__name__}: {str(e)[:200]}")
        try:
            conn.send(out)
        except Exception as e:  # noqa: BLE001 - e.g. an unpicklable return value
            conn.send((idx, False, "exception", f"unpicklable result: {type(e).__name__}"))


class _Worker:
    def __init__(self, ctx: Any, fn: Callable[..., Any], max_memory_mb: int | None, preload: tuple[str, ...]) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, fn, max_memory_mb, preload), daemon=True)
        self.proc.start()
        child.close()
        self.idx: int | None = None
        self.deadline = 0.0
        self.ready = False
        self.started = time.monotonic()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()


class TimeoutPool:
    """Run ``fn(*args)`` for many argument tuples in ``workers`` processes, each item
    bounded by ``timeout_s`` seconds of wall time.

    ``fn`` must be a module-level function (it is pickled by reference).
    ``start_method``: ``forkserver`` (default; safe under Ray/threads, workers start from a
    clean server that preloaded ``preload`` modules) or ``spawn`` / ``fork``.
    ``max_memory_mb`` caps each worker's address space (None: no cap).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        workers: int = 2,
        timeout_s: float = 10.0,
        *,
        start_method: str = "forkserver",
        preload: Iterable[str] = ("rewards.verify", "math_verify"),
        max_memory_mb: int | None = 4096,
        ready_timeout_s: float = 300.0,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.fn, self.n, self.timeout_s, self.max_memory_mb = fn, workers, timeout_s, max_memory_mb
        self.preload, self.ready_timeout_s = tuple(preload), ready_timeout_s
        self._ctx = mp.get_context(start_method)
        if start_method == "forkserver":
            self._ctx.set_forkserver_preload(list(self.preload))
        self._workers: list[_Worker] = []
        self.restarts = 0

    def _spawn(self) -> _Worker:
        return _Worker(self._ctx, self.fn, self.max_memory_mb, self.preload)

    def _await_ready(self) -> None:
        """Block until every worker has imported `preload` (never charged to an item); a worker that
        cannot start in `ready_timeout_s` (or dies starting) is an error naming what it imports."""
        while starting := [w for w in self._workers if not w.ready]:
            left = min(w.started for w in starting) + self.ready_timeout_s - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"reward pool: a worker was not ready after {self.ready_timeout_s:g} s "
                                   f"(importing {', '.join(self.preload) or 'nothing'}); is the machine overloaded?")
            for conn in wait([w.conn for w in starting], timeout=left):
                w = next(x for x in starting if x.conn is conn)
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    w.proc.join(timeout=1)
                    raise RuntimeError(f"reward pool: a worker died starting (exit code {w.proc.exitcode}) while "
                                       f"importing {', '.join(self.preload)}") from None
                if msg != READY:
                    raise RuntimeError(f"reward pool: a starting worker sent {msg!r}")
                w.ready = True

    def _ensure(self) -> None:
        while len(self._workers) < self.n:
            self._workers.append(self._spawn())

    def _replace(self, w: _Worker) -> None:
        w.kill()
        self._workers[self._workers.index(w)] = self._spawn()
        self.restarts += 1

    def map(self, items: list[tuple[Any, ...]]) -> list[Outcome]:
        """Outcomes in the order of ``items``; never raises for a failing item."""
        self._ensure()
        results: list[Outcome | None] = [None] * len(items)
        todo = list(range(len(items)))[::-1]  # a stack: pop() yields items in order
        busy: dict[Connection, _Worker] = {}
        while todo or busy:
            if todo:
                self._await_ready()  # replacements too: the next item's clock starts on a warm worker
            for w in self._workers:  # hand out work to idle workers
                if w.idx is None and todo:
                    i = todo.pop()
                    try:
                        w.conn.send((i, items[i]))
                    except (BrokenPipeError, ConnectionError, EOFError):  # worker died while idle
                        todo.append(i)
                        self._replace(w)
                        continue
                    except Exception as e:  # noqa: BLE001 - unpicklable arguments
                        results[i] = Outcome(False, reason="exception", detail=f"send: {type(e).__name__}")
                        continue
                    w.idx, w.deadline = i, time.monotonic() + self.timeout_s
                    busy[w.conn] = w
            if not busy:
                continue
            wait_s = max(0.0, min(w.deadline for w in busy.values()) - time.monotonic())
            for conn in wait(list(busy), timeout=wait_s):
                w = busy.pop(conn)
                try:
                    idx, ok, val, detail = conn.recv()
                    results[idx] = Outcome(True, val) if ok else Outcome(False, reason=val, detail=detail)
                    w.idx = None
                except (EOFError, OSError):
                    w.proc.join(timeout=1)
                    results[w.idx] = Outcome(False, reason="crash", detail=f"exit code {w.proc.exitcode}")
                    self._replace(w)
            now = time.monotonic()
            for conn, w in list(busy.items()):
                if now >= w.deadline:
                    busy.pop(conn)
                    results[w.idx] = Outcome(False, reason="timeout", detail=f"> {self.timeout_s:g} s")
                    self._replace(w)
        return [r if r is not None else Outcome(False, reason="exception", detail="lost") for r in results]

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        for w in self._workers:
            try:
                w.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for w in self._workers:
            w.proc.join(timeout=2)
            if w.proc.is_alive():
                w.kill()
        self._workers = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: modules may be gone
            self.close()
