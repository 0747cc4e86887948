"""Parallax: GRPO post-training that teaches a language model parallel thinking, on Ray.

Algorithm choices (defaults; every one is a config override):
* curriculum `sft_then_rl`: cold-start SFT on teacher traces, then GRPO with the reward
  named in `reward.name` (verl's group-normalised advantages, clipped loss 0.2 / 0.28,
  token-mean aggregation, no KL unless `learner.kl_coef > 0`);
* rollout on Hugging Face transformers or vLLM (GPU, or its CPU build); learners are DeepSpeed ZeRO
  data-parallel actors; weights go learner rank 0 -> engines over a collective group (gloo on CPU,
  NCCL on GPU) after each update (`rollout.weight_sync`; the object store as fallback);
* the CPU default trains a tiny Qwen3-architecture model built locally on the toy world.

Launch:
    python -m orchestrator                                   # default experiment on CPU
    python -m orchestrator +experiment=smoke                 # a few steps, for a first look
    python -m orchestrator learner.num_actors=2 learner.zero_stage=2
    python -m orchestrator cluster.address=auto              # attach to a running Ray cluster

Exit codes: 0 done; 1 the run failed (a lost actor past its restarts); 2 a setup error or a full disk,
said without a traceback; 75 (orchestrator/stops.py) stopped by SIGTERM or SIGUSR1 after saving its
last finished step: `resume=auto` continues it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from parallax.contract.config import ConfigError, register_configs, validate

register_configs()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        typed = validate(cfg)  # every value checked before Ray starts
    except ConfigError as e:
        print(f"parallax: config error: {e}", file=sys.stderr)
        sys.exit(2)
    from orchestrator.stops import EXIT_PREEMPTED, OutOfSpace, Preempted
    from orchestrator.trainer import RunStopped, SetupError, run

    try:
        run(typed)
    except SetupError as e:  # a model, dataset, field or file that is not there: nothing started
        print(f"parallax: setup error: {e}", file=sys.stderr)
        sys.exit(2)
    except OutOfSpace as e:  # a checkpoint did not fit: the disk is the user's to fix, like a setup error
        print(f"parallax: disk full: {e}", file=sys.stderr)
        sys.exit(2)
    except Preempted as e:  # SIGTERM / SIGUSR1: saved, and resumable (cluster/slurm.sh requeues on this code)
        print(f"parallax: stopped by {e}", file=sys.stderr, flush=True)
        sys.exit(EXIT_PREEMPTED)
    except RunStopped as e:  # a lost actor past every restart, a vanished checkpoint: said in one paragraph
        print(f"parallax: run stopped: {e}", file=sys.stderr)
        sys.exit(1)


def run_dir_error(argv: list[str]) -> str | None:
    """Hydra writes its log in the run directory before `main` runs, so an unwritable one ended in
    Hydra's traceback. Checked first instead: the `hydra.run.dir=` override (`hydra.sweep.dir=` under
    -m), else the default's `runs/`; the part before any `${...}` is created and written to."""
    from orchestrator.storage import cannot_write

    key = "hydra.sweep.dir" if {"-m", "--multirun"} & set(argv) else "hydra.run.dir"
    given = next((a.split("=", 1)[1] for a in argv if a.startswith(f"{key}=")), None)
    why = cannot_write(Path((given or "runs/${now:}").split("${")[0] or "."))
    return f"{key}={given or 'runs/<time>'}: {why}" if why else None


def exit_now(code: int, joined_ray: bool) -> None:
    """End a process that ran (joined Ray here) without the interpreter's own teardown: Ray's exit hook sleeps 0.5 s
    for its log lines, and finalising torch, transformers and the Ray core worker took 1.4-1.7 s of every
    run's end here (the run's last line to the process's exit: 1.7-2.1 s -> 0.33 s; ~35 runs in the test
    suite), and a native library's destructor can hang there. What the teardown would do that matters is
    done here first: the threads that are not daemons finish, Ray disconnects (a cluster this driver started
    stops with it), W&B's service and the log handlers close, and the output is flushed. A process that
    never joined Ray (a refusal, `--help`), or ran this module in-process beside a Ray session of its own
    (tests/conftest.py's `refused`), exits as usual."""
    import logging
    import os
    import threading

    if not joined_ray:
        sys.exit(code)
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    sys.modules["ray"].shutdown()
    if "wandb" in sys.modules:
        sys.modules["wandb"].teardown()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _ray_joined() -> bool:
    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


if __name__ == "__main__":
    if error := run_dir_error(sys.argv[1:]):
        print(f"parallax: setup error: {error}", file=sys.stderr)
        sys.exit(2)
    before = _ray_joined()
    try:
        main()
    except SystemExit as e:  # Hydra's own errors, and the exit codes above
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        exit_now(code, _ray_joined() and not before)
    exit_now(0, _ray_joined() and not before)
