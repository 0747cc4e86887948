"""Hydra launcher `hydra/launcher=parallax_ray`: a sweep's jobs run concurrently on one Ray cluster.

Each job is its own driver process (`python -m orchestrator <its overrides>`) attached to the cluster
the launcher starts once (or to `cluster.address`), writing into `<sweep dir>/<job number>/` as the
basic launcher does, its output in `job.log` there. Every job reserves its placement group; those the
cluster cannot hold yet wait in Ray's queue (`cluster.placement_timeout_s`, raised for sweep jobs)
and start as earlier jobs free their actors. `max_parallel` caps the drivers running at once (0: every
job). The sweep summary (`orchestrator.sweep.SweepSummary`) is written when the multirun ends, as before.

    python -m orchestrator -m hydra/launcher=parallax_ray +experiment=parason_pa_grpo reward.beta_sub=0.05,0.1
"""


import logging
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

log = logging.getLogger(__name__)


@dataclass
class ParallaxRayLauncherConf:
    _target_: str = "hydra_plugins.parallax_launcher.parallax_launcher.ParallaxRayLauncher"
    # Drivers running at once (0: every job; the cluster's placement queue paces them).
    max_parallel: int = 0
    # How long a job's placement group may wait for actors of earlier jobs to leave.
    placement_timeout_s: float = 7200.0


ConfigStore.instance().store(group="hydra/launcher", name="parallax_ray", node=ParallaxRayLauncherConf)


def job_command(overrides: Sequence[str], job_dir: Path, address: str, placement_timeout_s: float,
                config_name: str | None) -> list[str]:
    """One job's driver: the orchestrator CLI with its overrides, its directory and the shared cluster."""
    name = ["--config-name", config_name] if config_name and config_name != "config" else []
    return [sys.executable, "-m", "orchestrator", *name, *overrides, f"hydra.run.dir={job_dir}",
            f"cluster.address={address}", f"cluster.placement_timeout_s={placement_timeout_s:g}"]


class ParallaxRayLauncher(Launcher):
    def __init__(self, max_parallel: int = 0, placement_timeout_s: float = 7200.0) -> None:
        super().__init__()
        self.max_parallel, self.placement_timeout_s = max_parallel, placement_timeout_s
        self.config: DictConfig | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config

    def _cluster(self) -> "tuple[str, bool]":
        """The cluster every job attaches to, and whether this launcher started it."""
        import ray

        from orchestrator.setup import start_cluster
        from parallax.contract.config import ClusterConfig

        c = self.config.cluster
        if c.address:
            return str(c.address), False
        start_cluster(ClusterConfig(num_cpus=int(c.num_cpus), include_dashboard=bool(c.include_dashboard),
                                    dashboard_host=str(c.dashboard_host), loopback=bool(c.loopback)))
        return ray.get_runtime_context().gcs_address, True

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        address, owned = self._cluster()
        log.info(f"Launching {len(job_overrides)} jobs at once on the Ray cluster at {address}")
        limit = threading.Semaphore(self.max_parallel or len(job_overrides))
        results: list = [None] * len(job_overrides)

        def run(i: int, overrides: Sequence[str]) -> None:
            idx = initial_job_idx + i
            job_dir = sweep_dir / str(idx)
            job_dir.mkdir(parents=True, exist_ok=True)
            cmd = job_command(overrides, job_dir, address, self.placement_timeout_s,
                              self.config.hydra.job.get("config_name"))
            with limit, (job_dir / "job.log").open("w") as out:
                t0 = time.time()
                log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
                rc = subprocess.run(cmd, check=False, stdout=out, stderr=subprocess.STDOUT).returncode
            ret = JobReturn(overrides=list(overrides), working_dir=str(job_dir), task_name=str(idx))
            ret.status = JobStatus.COMPLETED if rc == 0 else JobStatus.FAILED
            ret._return_value = rc if rc == 0 else RuntimeError(
                f"sweep job {idx} exited with {rc} after {time.time() - t0:.0f} s: see {job_dir / 'job.log'}")
            results[i] = ret

        threads = [threading.Thread(target=run, args=(i, o)) for i, o in enumerate(job_overrides)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            if owned:
                import ray

                ray.shutdown()
        return [r for r in results if r is not None]
