"""How a run that cannot go on ends: one paragraph for the user, no traceback (`python -m orchestrator`
prints it as `parallax: run stopped: ...`, exit 1; a full disk exits 2, a preempted run `EXIT_PREEMPTED`).

Preemption. Slurm (`--signal`, preemption, the time limit) and Kubernetes (pod eviction) send SIGTERM or
SIGUSR1, then SIGKILL a grace period later. `StopSignals` turns either into a request the driver loop
reads between steps: the step in flight finishes, a verified checkpoint of it is written, the driver
prints how to resume and exits with `EXIT_PREEMPTED`. Should the step and the save not be done within
the grace period (`PARALLAX_GRACE_S`, default `GRACE_S`), the step is abandoned: the driver exits at
once with the same code, and its newest earlier checkpoint stays the one `resume=auto` takes.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from actors.faults import ActorLost
from parallax.contract.config import ParallaxConfig

# sysexits' EX_TEMPFAIL, "try again later": the run was told to stop, and `resume=auto` continues it
# (cluster/slurm.sh requeues the job on it). Distinct from 1 (a run that failed) and 2 (setup, disk).
EXIT_PREEMPTED = 75
# Seconds from the signal to the driver's exit, at most: the step in flight, the save, and Ray's
# shutdown (the tiny model on 2 CPU cores: ~10 s, docs/operations.md). Keep it under the grace the
# scheduler gives (Slurm `--signal=B:USR1@<secs>`, Kubernetes `terminationGracePeriodSeconds`).
GRACE_S = 60.0
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class RunStopped(RuntimeError):
    """The run cannot go on; its message is one paragraph for the user (no traceback)."""


class OutOfSpace(RuntimeError):
    """A checkpoint did not fit on its disk; the message names the one that stays (exit 2, no traceback)."""


class Preempted(RuntimeError):
    """A signal ended the run between steps, its checkpoint saved; the message says how to resume."""


def grace_s() -> float:
    """The grace period: `PARALLAX_GRACE_S` (seconds), else `GRACE_S`."""
    value = os.environ.get("PARALLAX_GRACE_S", "")
    try:
        return float(value) if value else GRACE_S
    except ValueError:
        raise ValueError(f"PARALLAX_GRACE_S={value!r}: expected seconds, e.g. 60") from None


class StopSignals:
    """SIGTERM and SIGUSR1 -> `requested` (the signal's name), read by the driver between steps.

    The handler only records the signal and starts a watchdog: past `grace_s`, `overdue()` names what is
    lost and the process exits with `EXIT_PREEMPTED` whatever the main thread is doing (a step that
    cannot finish in time is abandoned; checkpoints are written aside and renamed, so none is damaged).
    `install()` again after `ray.init`, which sets a SIGTERM handler of its own (`sys.exit`).

    Signal handlers belong to the process: one instance per run (`begin`), shared by its tries (a restart
    after a lost actor keeps a signal that arrived before it), found by each try's trainer (`current`)."""

    _current: StopSignals | None = None

    @classmethod
    def begin(cls, grace: float) -> StopSignals:
        cls._current = cls(grace)
        return cls._current

    @classmethod
    def current(cls) -> StopSignals:
        """The run's (`begin`); for a trainer made outside `run` (a test), one that installs nothing."""
        return cls._current if cls._current is not None else cls(grace_s(), inert=True)

    def __init__(self, grace: float, inert: bool = False):
        self.grace, self.inert = grace, inert
        self.overdue: Callable[[], str] = lambda: ""  # what stays and how to resume (the trainer sets it)
        self.requested: str | None = None
        self.at = 0.0  # time.monotonic() of the first signal
        self._previous: dict[int, object] = {}
        self._done = threading.Event()  # the run ended by itself: the watchdog stands down
        self.saved = False  # the driver has saved what it will save; only its exit is left
        self._ray: list = []  # the Ray head processes this driver started (psutil), watched after a signal

    def install(self) -> None:
        if self.inert or threading.current_thread() is not threading.main_thread():
            return  # Python takes signals in the main thread only (a driver run inside a thread: no handler)
        for sig in SIGNALS:
            previous = signal.signal(sig, self._handle)
            self._previous.setdefault(sig, previous)
        self._ray = _ray_head_processes()

    def cancel(self) -> None:
        """The run ended by itself (a signal during its last step): no exit to enforce."""
        self._done.set()

    def restore(self) -> None:
        """The handlers that were there before `install` (Ray's, or Python's default)."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
        if StopSignals._current is self:
            StopSignals._current = None

    def elapsed(self) -> float:
        return time.monotonic() - self.at

    def _handle(self, signum: int, _frame) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None:
            print(f"parallax: {name} again, {self.elapsed():.0f} s after {self.requested}: still stopping "
                  f"(at most {self.grace:g} s in all)", file=sys.stderr, flush=True)
            return
        self.requested, self.at = name, time.monotonic()
        print(f"parallax: {name} received: finishing the step in flight, then saving a checkpoint and exiting "
              f"(within {self.grace:g} s)", file=sys.stderr, flush=True)
        threading.Thread(target=self._watch, name="parallax-grace", daemon=True).start()

    def _watch(self) -> None:
        """Exit at the end of the grace period (less a margin for the exit itself), or at once when the
        signal also stopped the Ray processes this driver started (it went to the whole process group:
        the step in flight would wait for actors that are gone, and nothing can be saved)."""
        deadline = self.at + max(self.grace - 2.0, 0.5 * self.grace)
        while not self._done.wait(0.5):
            if not self.saved and (gone := [name for name, alive in self._ray if not alive()]):
                why = (f"it also stopped this driver's Ray processes ({', '.join(gone)}: the signal went to the whole "
                       "process group), so the step in flight cannot finish and nothing can be saved")
            elif time.monotonic() >= deadline:
                what = "Ray's shutdown" if self.saved else "the step in flight and its save"
                why = f"{what} did not end within the grace period ({self.grace:g} s)"
            else:
                continue
            print(f"parallax: {self.requested}: exiting now, {self.elapsed():.1f} s after it: {why}. {self.overdue()}",
                  file=sys.stderr, flush=True)
            os._exit(EXIT_PREEMPTED)  # the Ray processes this driver started end with it (Ray's fate sharing)


def _ray_head_processes() -> list[tuple[str, Callable[[], bool]]]:
    """(name, alive) of the GCS and raylet this driver started (none when it joined a cluster)."""
    try:
        import psutil
    except ImportError:  # psutil comes with Ray's dashboard extras; without it, only the deadline is watched
        return []

    def alive(p) -> Callable[[], bool]:
        def check() -> bool:
            try:
                return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                return False
        return check

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for p in children:
        try:
            if p.name() in ("gcs_server", "raylet"):
                out.append((p.name(), alive(p)))
        except psutil.Error:
            continue
    return out


def resume_command(run_dir: str) -> str:
    """The command that continues this run: the one that started it, with resume=auto and its run dir."""
    import shlex

    args = [a for a in sys.argv[1:] if not a.startswith(("resume=", "hydra.run.dir="))]
    return shlex.join(["python", "-m", "orchestrator", *args, f"hydra.run.dir={run_dir}", "resume=auto"])


def lost_actor_paragraph(e: ActorLost, cfg: ParallaxConfig, failures: int, where) -> str:
    """What died, which knob would have allowed more, and how to continue."""
    tries = f"trainer.max_failures={cfg.trainer.max_failures}, {failures} used"
    if e.role == "learner":  # its peers hang in the collective: only a restart of the whole run helps
        knob = (f"A learner is never restarted in place; a higher trainer.max_failures (now {tries}) restarts "
                "the whole run from its newest verified checkpoint.")
    else:
        knob = (f"Ray restarts a lost {e.role} actor in place up to cluster.max_restarts="
                f"{cfg.cluster.max_restarts} times, and that was not enough; raise it, or trainer.max_failures "
                f"(now {tries}) to restart the whole run from its newest verified checkpoint.")
    return (f"{e}. The run stops. {knob} To continue from the newest checkpoint ({where}), run the same "
            "command with resume=auto.")



def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, from /proc; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def _descends(pid: int, root: int) -> bool:
    while pid > 1:
        stat = _stat(pid)
        if stat is None:
            return False
        pid = stat[1]
        if pid == root:
            return True
    return root == 1


def stop_drivers(grace: float, root: int = 1, sig: int = signal.SIGTERM) -> list[int]:
    """Send `sig` to every `python -m orchestrator` driver under process `root` (this container's, by
    default) but this process, then wait for them to exit, `grace` seconds at most. What a Kubernetes preStop
    hook runs (cluster/rayjob.yaml): the head pod's PID 1, `ray start --block` under a shell, never passes
    the kubelet's SIGTERM on to the driver. Returns the pids still running at the end."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        pid = int(proc.name)
        if pid != os.getpid() and argv[1:3] == [b"-m", b"orchestrator"] and _descends(pid, root):
            pids.append(pid)
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while True:
        alive = [p for p in pids if (stat := _stat(p)) is not None and stat[0] != "Z"]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.2)


if __name__ == "__main__":  # python -m orchestrator.stops: cluster/rayjob.yaml's preStop hook
    print(f"parallax: stopping this pod's driver (SIGTERM, up to {grace_s() + 5:g} s)", flush=True)
    sys.exit(1 if stop_drivers(grace_s() + 5) else 0)
