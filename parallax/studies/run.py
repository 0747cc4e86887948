"""Running a study: the SFT job, then one Hydra sweep over the seeds per arm.

Every job is a real ``python -m orchestrator`` process (its output goes to ``<dir>/*.log``); a job
that fails stops the study with the log's tail, naming the job.  A finished SFT run is reused
when its checkpoint is there (``--reuse-sft``), so a report can be re-run without redoing SFT.

With ``parallel`` > 1 the arms' sweeps run at once (up to ``parallel``), every job attached to one
Ray cluster this process starts, each job's rollout and learner on one torch thread: on a 2-core
machine two jobs then share the cores instead of each idling one while it waits on the other phase.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from parallax.studies.specs import Arm, Study

__all__ = ["StudyError", "arm_command", "run_study", "sft_command", "sft_model"]

ROOT = Path(__file__).resolve().parents[2]
# Console-free, W&B-free jobs: the study's own tables are the output.
QUIET = ("logging.progress_bar=false", "logging.wandb_mode=disabled")


class StudyError(RuntimeError):
    """A job of the study failed; the message names it and quotes its log."""


def sft_command(study: Study, out: Path, extra: Sequence[str] = ()) -> list[str]:
    """The SFT job: the default curriculum's SFT stage only, on the study's data."""
    return [sys.executable, "-m", "orchestrator", f"hydra.run.dir={out / 'sft'}", *study.shared, *study.common, *QUIET,
            f"curriculum.stages.sft.steps={study.sft_steps}", "curriculum.stages.easy_rl.steps=0",
            "curriculum.stages.acc_rl.steps=0", *extra]


def sft_model(out: Path) -> Path:
    """The SFT run's final model directory (the newest checkpoint's ``model/``)."""
    ckpts = sorted((out / "sft" / "checkpoints").glob("step_*"))
    if not ckpts or not (ckpts[-1] / "model").is_dir():
        raise StudyError(f"no SFT checkpoint under {out / 'sft' / 'checkpoints'}")
    return ckpts[-1] / "model"


def arm_command(study: Study, arm: Arm, out: Path, model: Path, seeds: Sequence[int],
                extra: Sequence[str] = ()) -> list[str]:
    """One arm: a sweep over ``trainer.seed`` from the SFT model, into ``<out>/<arm>/<job>/``."""
    fill = {"model": str(model), "steps": study.rl_steps, "switch": study.switch, "eval_every": study.eval_every}
    overrides = [_fill(o, fill) for o in (*study.rl, *arm.overrides)]
    return [sys.executable, "-m", "orchestrator", "-m", f"hydra.sweep.dir={out / arm.name}",
            "hydra.sweep.subdir=seed_${trainer.seed}",
            *study.shared, *study.common, *QUIET, *overrides, "trainer.seed=" + ",".join(map(str, seeds)), *extra]


def _fill(template: str, values: dict) -> str:
    """``{name}`` placeholders filled; other braces (Hydra's list and dict literals) left alone."""
    for k, v in values.items():
        template = template.replace("{" + k + "}", str(v))
    return template


def _run(cmd: list[str], log: Path, what: str, timeout_s: float) -> float:
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with log.open("w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        try:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=timeout_s,
                                check=False).returncode
        except subprocess.TimeoutExpired:
            rc = None
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        why = f"timed out after {timeout_s:.0f} s" if rc is None else f"exit code {rc}"
        raise StudyError(f"{what} failed ({why}); log {log}:\n{tail}")
    return time.monotonic() - t0


# Each job's share of the study's cluster (its placement group asks for less: rollout, learner, reward).
CPUS_PER_JOB = 4
# Jobs that share the cores: one torch thread per actor (two threads each would oversubscribe).
SHARED_CORES = ("rollout.torch_threads=1", "learner.torch_threads=1")


def _shared_cluster(parallel: int) -> str:
    """Start the Ray cluster the arms' jobs attach to (it lives as long as this process); its address."""
    import ray

    from orchestrator.setup import start_cluster
    from parallax.contract.config import ClusterConfig

    start_cluster(ClusterConfig(num_cpus=CPUS_PER_JOB * parallel, include_dashboard=False))
    return ray.get_runtime_context().gcs_address


def run_study(study: Study, out: Path, seeds: Sequence[int], reuse_sft: bool = False, extra: Sequence[str] = (),
              timeout_s: float = 3600, say=print, parallel: int = 1) -> dict[str, float]:
    """Run the SFT job (unless ``reuse_sft`` and it is there) and every arm, ``parallel`` arms at a time;
    the seconds each took (``arms``: the wall time of all of them)."""
    out = Path(out)
    times: dict[str, float] = {}
    try:
        model = sft_model(out) if reuse_sft else None
    except StudyError:
        model = None
    parallel = max(1, min(parallel, len(study.arms)))
    # arms at once share one cluster, started first: the SFT job joins it too (one cluster start and stop
    # fewer, ~10 s), with the cores to itself (no SHARED_CORES)
    address = (f"cluster.address={_shared_cluster(parallel)}",) if parallel > 1 else ()
    if model is None:
        say(f"[{study.name}] SFT: {study.sft_steps} steps ({' '.join(study.shared)})")
        times["sft"] = _run(sft_command(study, out, (*address, *extra)), out / "sft.log",
                            f"{study.name}: the SFT job", timeout_s)
        model = sft_model(out)
    shared = (*address, *SHARED_CORES) if parallel > 1 else ()

    def arm_job(arm: Arm) -> float:
        say(f"[{study.name}] arm {arm.name}: {study.rl_steps} RL steps x seeds {list(seeds)}")
        return _run(arm_command(study, arm, out, model, seeds, (*shared, *extra)), out / f"{arm.name}.log",
                    f"{study.name}: arm {arm.name}", timeout_s)

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for arm, took in zip(study.arms, pool.map(arm_job, study.arms)):
            times[arm.name] = took
    times["arms"] = time.monotonic() - t0
    return times
