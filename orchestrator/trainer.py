"""The driver: one RL step on one screen, plus the SFT step and held-out evaluation.

Phases of an RL step, each timed (`timing/<phase>`):
prompts -> generate (rollout actors) -> score (reward actors) -> advantages (verl GRPO)
-> update (DeepSpeed learners) -> sync (weights to the engines) -> curriculum -> log.
"""

from __future__ import annotations

import errno
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from statistics import mean
from typing import Any

from actors import algo
from actors.faults import ActorLost, get_all
from curricula import Stage
from orchestrator import dynamic, generation
from orchestrator.checkpoint import (
    CheckpointError,
    RunCheckpoints,
    config_hash,
    plain_config,
    truncate_metrics,
    verify_checkpoint,
)
from orchestrator.heldout import evaluate
from orchestrator.logger import Logger, Timer
from orchestrator.prepare import batch_size, learning_rate, prepare
from orchestrator.setup import Groups, build_groups, pipeline_threads_warning, start_cluster
from orchestrator.stage_table import format_table, in_table
from orchestrator.stops import (
    OutOfSpace,
    Preempted,
    RunStopped,
    StopSignals,
    grace_s,
    lost_actor_paragraph,
    resume_command,
)
from orchestrator.structure import sample_stats
from orchestrator.weights import EngineWeights
from parallax.contract.batch import StepSamples
from parallax.contract.config import ParallaxConfig
from parallax.contract.seeds import DYNAMIC_ROUND, step_seed, substream
from rewards.registry import stage_spec


class SetupError(Exception):
    """The run cannot start: a model, dataset, field or file that is not there. Raised before Ray starts."""


class Trainer:
    def __init__(self, cfg: ParallaxConfig):
        self.cfg = cfg
        self.stops = StopSignals.current()  # SIGTERM / SIGUSR1: save after the step in flight, then exit
        self.started_at = time.time()  # wall clock (summary.json): a sweep's jobs overlap or not
        self.run_dir = Path(cfg.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.ckpts = RunCheckpoints(cfg.trainer, self.run_dir, cfg.cluster.shared_fs)
            ckpt = self.ckpts.find(cfg.resume)  # verified before anything starts
            p = prepare(cfg, self.run_dir)  # model, data, fields, files: what can fail on the user's input
        except (ValueError, FileNotFoundError, RuntimeError) as e:  # CheckpointError included
            raise SetupError(str(e)) from e
        self.model_path, self.tokenizer, self.fmt, self.curriculum = p.model_path, p.tokenizer, p.fmt, p.curriculum
        self.layout, self.data, self.eval_prompts = p.layout, p.data, p.eval_prompts
        self.newest = ckpt  # the newest checkpoint of this run on disk (resumed from, or saved since)
        if warning := self.ckpts.space_warning(self.model_path, cfg, p.curriculum, ckpt):
            print(f"warning: {warning}", flush=True)
        start_cluster(cfg.cluster)
        self.stops.overdue = self._said_on_overdue
        self.stops.install()  # after ray.init, whose own SIGTERM handler exits at once
        if warning := pipeline_threads_warning(cfg, os.cpu_count() or 1):
            print(f"warning: {warning}", flush=True)
        self.groups: Groups = build_groups(cfg, self.model_path, self.run_dir.name)
        self.stage_table: list[dict[str, Any]] = []
        g = self.groups
        self.weights = EngineWeights(g.sync, g.learner, g.rollout, cfg.cluster.max_restarts,
                                     cfg.cluster.start_timeout_s, cfg.rollout.colocate and cfg.rollout.sleep_level)
        self._ahead: list[generation.Started] = []  # generations started for later steps (the pipeline)
        if ckpt is None and cfg.resume == "auto":
            truncate_metrics(self.run_dir / "metrics.jsonl", 0)  # starting over: rows of an earlier try go
        state = self._restore(ckpt) if ckpt else {}
        self.ckpts.saved_at = time.monotonic()  # trainer.save_every_min counts from here
        self._idle_said: set[str] = set()  # stages whose all-zero-advantage update was said
        self.logger = Logger(cfg.logging, self.run_dir, plain_config(cfg), self.curriculum.total_steps,
                             run_id=state.get("wandb_run_id"), start=self.curriculum.global_step)

    # ---- per-stage settings (None in a stage: the run's config) --------------------------
    def _batch_size(self, stage: Stage) -> int:
        return batch_size(self.cfg, stage)

    def _lr(self, stage: Stage) -> tuple[float, float]:
        return learning_rate(self.cfg.learner, stage, self.curriculum.stage_step)

    # ---- the loop ------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        tcfg = self.cfg.trainer
        if tcfg.eval_after_stage and tcfg.eval_init and self.curriculum.global_step == 0:
            self.stage_table.append({"stage": "init", **{k: v for k, v in self.evaluate().items()
                                                         if in_table(k)}})
        while not self.curriculum.done:
            if self.stops.requested:  # SIGTERM / SIGUSR1 (a scheduler preempts the job): between steps
                self.stop_here()
            stage, step = self.curriculum.stage, self.curriculum.global_step
            metrics = self.sft_step(stage) if stage.kind == "sft" else self.rl_step(stage, step)
            metrics.update(self.curriculum.metrics())
            metrics["data/epoch"] = self.data.epoch(stage, self._batch_size(stage))
            self.logger.log(metrics, step, stage=stage.name)
            self.curriculum.update(metrics)
            if self.curriculum.done or self.curriculum.stage.name != stage.name:
                self._end_stage(stage)
            else:
                if self.cfg.trainer.eval_every and (step + 1) % self.cfg.trainer.eval_every == 0:
                    if stage.kind == "sft":  # SFT does not sync every step: give the engines the weights
                        self.weights.push()
                    self.logger.log(self.evaluate(), step + 1, advance=False)
                if self.ckpts.due(self.curriculum.global_step):
                    self.save()
        return self.finish()

    def rl_step(self, stage: Stage, step: int) -> dict[str, Any]:
        t, g = Timer(), self.groups
        with t("step"):
            started = self._samples_for(stage, step)
            samples = self._collect(started, stage, t)
            self._start_ahead(stage, step)  # the next steps' samples generate while this one updates
            if self.cfg.trainer.dynamic_sampling:
                samples = self._dynamic_sampling(stage, step, started.n, samples, t)
            with t("advantages"):
                samples = algo.set_advantages(samples, self.cfg.learner.norm_adv_by_std)
                trajs = samples.trajectories
                batch = self.layout.train_batch(trajs, self.tokenizer.pad_token_id)
            staleness = [self.weights.version - x.policy_version for x in trajs]
            idle = not any(x.advantage for x in trajs)
            if idle and stage.name not in self._idle_said:  # an update that changes nothing: said once
                self._idle_said.add(stage.name)
                print(f"warning: stage {stage.name} step {step}: every group's samples scored alike, so every GRPO "
                      "advantage is 0 and the update changes nothing (actor/zero_advantage=1 marks each such step: "
                      "a task the model always or never solves teaches nothing)", flush=True)
            slept = self.weights.sleep()  # colocated engines give the learners their GPUs (rollout.colocate)
            with t("update"):
                lr, wd = self._lr(stage)
                stats = generation.mean_dicts(get_all(
                    g.learner.async_grpo_step(batch, lr, wd, self.cfg.rollout.temperature), "learner"))
            with t("sync"):
                synced = self.weights.push()  # sync/bytes, sync/buckets, timing/sync_send
        every = self.cfg.logging.table_every
        if every and self.curriculum.stage_step % every == 0:
            from orchestrator.samples import sample_rows

            self.logger.log_table(sample_rows(samples, self.cfg.logging.table_rows), step)
        lengths = [len(x.response_ids) for x in trajs]
        return {**samples.metrics, **stats, **synced, **slept, **t.times, **sample_stats(samples, "parallel"),
                "response/length": mean(lengths), "response/clip_ratio": mean(x.finish_reason == "length"
                                                                              for x in trajs),
                "throughput/tokens_per_s": sum(lengths) / max(t.times["timing/generate"], 1e-9),
                "actor/staleness": mean(staleness), "actor/staleness_max": float(max(staleness)),
                "actor/zero_advantage": float(idle)}

    def sft_step(self, stage: Stage) -> dict[str, Any]:
        t, g = Timer(), self.groups
        with t("step"):
            problems = self.data.next(stage, self._batch_size(stage))
            batch = self.layout.sft_batch(problems, self.cfg.data.trace, self.tokenizer)  # the layout RL will score
            lr, wd = self._lr(stage)
            slept = self.weights.sleep()  # the engines sleep through SFT until a push wakes them
            with t("update"):
                stats = generation.mean_dicts(get_all(g.learner.async_sft_step(batch, lr, wd), "learner"))
        return {**stats, **slept, **t.times}

    # ---- helpers ----------------------------------------------------------------------------
    def _collect(self, started: generation.Started, stage: Stage, t: Timer) -> StepSamples:
        return generation.collect(started, reward=self.groups.reward, weights=self.weights,
                                  spec=stage_spec(stage, self.cfg.reward, self.fmt), stage_name=stage.name, t=t,
                                  max_restarts=self.cfg.cluster.max_restarts,
                                  start_timeout_s=self.cfg.cluster.start_timeout_s)

    def _samples_for(self, stage: Stage, step: int) -> generation.Started:
        """This step's generation: started ahead by the pipeline, or now."""
        if self._ahead and self._ahead[0].step == step:
            return self._ahead.pop(0)
        self._ahead.clear()  # (nothing is started past a stage's end, so nothing stale is dropped here)
        return self._start_rl(stage, step)

    def _start_rl(self, stage: Stage, step: int) -> generation.Started:
        batch = self._batch_size(stage)
        prompts = self.data.next(stage, batch)
        # trainer.seed picks the sampling stream as well as the prompt order (seed 0: the step alone).
        seed = step_seed(step, self.cfg.trainer.seed)
        return generation.start(self.groups.rollout, self.weights, prompts, n=stage.rollout_n or self.cfg.rollout.n,
                                seed=seed, step=step, max_restarts=self.cfg.cluster.max_restarts,
                                data_key=f"{stage.name}/{batch}")

    def _dynamic_sampling(self, stage: Stage, step: int, n: int, samples: StepSamples, t: Timer) -> StepSamples:
        """DAPO's dynamic sampling (orchestrator/dynamic.py); each round draws fresh prompts on its own seed."""
        def draw(round_: int) -> StepSamples:
            seed = substream(step_seed(step, self.cfg.trainer.seed), DYNAMIC_ROUND, round_)
            extra = generation.start(self.groups.rollout, self.weights, self.data.next(stage, self._batch_size(stage)),
                                     n=n, seed=seed, step=step, max_restarts=self.cfg.cluster.max_restarts)
            return self._collect(extra, stage, t)

        return dynamic.refill(samples, max_rounds=self.cfg.trainer.dynamic_sampling_rounds, draw=draw)

    def _start_ahead(self, stage: Stage, step: int) -> None:
        """The pipeline (`trainer.max_staleness` = s): keep the generations of the next s steps running
        while the learners update on this one, each at the version the engines hold now -- only steps
        surely in this stage (a stage that a metric can end is never run ahead)."""
        while len(self._ahead) < self.cfg.trainer.max_staleness:
            ahead = 1 + len(self._ahead)
            if not self.curriculum.surely_in_stage(ahead):
                return
            self._ahead.append(self._start_rl(stage, step + ahead))

    def drain(self) -> None:
        """Wait for the generations the pipeline started ahead to finish (they stay for their steps), each
        `actors.faults.STALL_S` at most."""
        for ahead in self._ahead:
            if not ahead.gen.wait():
                raise ActorLost("rollout", 0, f"the generation started ahead for step {ahead.step} returned nothing "
                                              f"within {ahead.gen.stall_s:g} s (hung)")

    def evaluate(self) -> dict[str, float]:
        """Held-out evaluation (orchestrator/heldout.py) on this run's actors, at step 0's seeds."""
        def generate(prompts, *, n, seed, stage, greedy):
            started = generation.start(self.groups.rollout, self.weights, prompts, n=n, seed=seed, step=0,
                                       greedy=greedy, max_restarts=self.cfg.cluster.max_restarts)
            return self._collect(started, stage, Timer())

        return evaluate(self.eval_prompts, self.fmt, self.cfg.trainer, generate, self.tokenizer)

    def _end_stage(self, stage: Stage) -> None:
        get_all(self.groups.learner.async_call("reset_optimizer"), "learner")
        if stage.kind == "sft":  # SFT steps do not sync each step; the engines need the SFT weights now
            self.weights.push()
        if self.cfg.trainer.eval_after_stage:
            metrics = self.evaluate()
            self.logger.log(metrics, self.curriculum.global_step, advance=False)
            self.stage_table.append({"stage": stage.name, **{k: v for k, v in metrics.items()
                                                             if in_table(k)}})
        if not self.ckpts.off:
            self.save()

    def save(self) -> Path | str:
        def driver_files(d: Path) -> None:  # beside rank 0's model/, so the checkpoint loads as a model
            self.tokenizer.save_pretrained(d / "model")

        consumed = dict(self.data.consumed)
        for ahead in self._ahead:  # drawn for steps not trained yet: a resumed run draws them again
            consumed[ahead.data_key] -= 1
        state = {"curriculum": self.curriculum.state_dict(), "wandb_run_id": self.logger.run_id,
                 "global_step": self.curriculum.global_step, "consumed": consumed,
                 "stage_table": self.stage_table}
        self.newest = self.ckpts.save(self.curriculum.global_step, self.groups.learner, driver_files, state,
                                      config_hash(self.cfg))
        return self.newest

    def stop_here(self) -> None:
        """A stop signal arrived (orchestrator/stops.py): save the last finished step unless it is saved,
        verify it, and end the run with the command that continues it (`Preempted`)."""
        step = self.curriculum.global_step
        if self.ckpts.off:
            self.stops.saved = True
            raise Preempted(f"{self.stops.requested}, {step} steps done, {self.stops.elapsed():.1f} s after the "
                            "signal: no checkpoint written (trainer.save_every=-1), so the run cannot be continued")
        if step and (self.newest is None or not str(self.newest).endswith(f"step_{step:06d}")):
            self.ckpts.verify(self.save())
            saved = f"checkpoint {self.newest} written and verified"
        else:
            saved = f"checkpoint {self.newest} already held them" if step else "nothing to save"
        self.stops.saved = True  # only the exit is left (Ray's processes stop with it)
        raise Preempted(f"{self.stops.requested}, {step} steps done: {saved}, {self.stops.elapsed():.1f} s after "
                        f"the signal. To continue: {resume_command(str(self.run_dir))}")

    def _said_on_overdue(self) -> str:
        """What a driver that runs out of grace leaves behind (orchestrator/stops.py's watchdog)."""
        if self.newest is None:
            return "No checkpoint was written; resume=auto starts this run over."
        return (f"Its newest checkpoint is {self.newest}; steps after it are trained again. To continue: "
                f"{resume_command(str(self.run_dir))}")

    def _restore(self, ckpt: Path | str) -> dict[str, Any]:
        """Continue from a checkpoint: weights, optimizer, curriculum, data position, W&B run.

        Sampling seeds derive from the global step and the config seed, the data iterators from the config seed,
        so a resumed run draws the same prompts and samples as an uninterrupted one.
        """
        state = self.ckpts.read(ckpt, config_hash(self.cfg))
        self.curriculum.load_state_dict(state["curriculum"])
        self.data.fast_forward(state["consumed"], {s.name: s for s in self.curriculum.stages})
        self.stage_table = list(state["stage_table"])
        files = self.ckpts.verify(ckpt)["files"] if isinstance(ckpt, str) else None  # at a URI: the ranks fetch them
        self.groups.learner.load_training_state(ckpt, self.cfg.cluster.shared_fs, files)
        self.weights.push()
        truncate_metrics(self.run_dir / "metrics.jsonl", self.curriculum.global_step)
        print(f"resumed from {ckpt} at step {self.curriculum.global_step}")
        return state

    def abort(self) -> None:
        """This try is over (a lost actor): free its actors and close its logs; checkpoints stay."""
        self.logger.abort()
        self.groups.shutdown()

    def finish(self) -> dict[str, Any]:
        summary = {"run_dir": str(self.run_dir), "model_path": self.model_path, "stages": self.stage_table,
                   "steps": self.curriculum.global_step, "placement": self.groups.placement(),
                   "started_at": self.started_at, "finished_at": time.time(), "checkpoints": self.ckpts.saves}
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        from orchestrator.plots import plot_run

        summary["plot"] = str(plot_run(self.run_dir))
        self.logger.close({f"final/{k}": v for k, v in (self.stage_table[-1] if self.stage_table else {}).items()})
        print(format_table(self.stage_table, self.cfg.trainer.eval_samples), flush=True)  # after the bar
        self.groups.shutdown()
        return summary


def run(cfg: ParallaxConfig) -> dict[str, Any]:
    """Train to the end. A lost actor the run cannot do without (a learner; a rollout or reward actor
    past its restarts) ends this try; with `trainer.max_failures` left, the run starts again from its
    newest verified checkpoint (resume=auto; from the beginning when it has none), like Ray Train's
    FailureConfig. Without, the error names the actor."""
    t0 = time.perf_counter()
    failures = 0
    try:
        stops = StopSignals.begin(grace_s())
    except ValueError as e:  # PARALLAX_GRACE_S that is not a number of seconds
        raise SetupError(str(e)) from None
    try:
        while True:
            trainer = Trainer(cfg)
            try:
                summary = trainer.fit()
                break
            except (ActorLost, Preempted, OSError) as e:
                trainer.abort()  # free the actors, close the logs; the checkpoints stay
                if isinstance(e, Preempted):
                    raise
                if isinstance(e, OSError):
                    if e.errno != errno.ENOSPC:
                        raise
                    raise OutOfSpace(out_of_space_paragraph(e, trainer)) from None
                if failures >= cfg.trainer.max_failures:
                    raise RunStopped(lost_actor_paragraph(e, cfg, failures, trainer.ckpts.where)) from None
                failures += 1
                print(f"{e}; restarting from the newest verified checkpoint "
                      f"(failure {failures} of trainer.max_failures={cfg.trainer.max_failures})", flush=True)
                cfg = replace(cfg, resume="auto")
        stops.cancel()  # finished (a signal during the last step: nothing left to stop)
    finally:
        stops.restore()
    summary["failures"] = failures
    summary["wall_time_s"] = time.perf_counter() - t0
    print(f"run dir: {cfg.run_dir}  ({summary['wall_time_s']:.0f}s)")
    return summary


def out_of_space_paragraph(e: OSError, trainer: Trainer) -> str:
    """A checkpoint that did not fit: which one stays (verified, and `latest` names it) and how to go on."""
    newest = trainer.newest
    if newest is None:
        stays = "No earlier checkpoint of this run exists; resume=auto starts it over."
    elif isinstance(newest, str):  # at a URI, written by the ranks (orchestrator/storage.py)
        stays = f"The newest earlier checkpoint is {newest}, complete (its manifest was written after its files)."
    else:
        try:
            verify_checkpoint(newest)
            stays = f"The newest earlier checkpoint, {newest}, verifies"
        except CheckpointError as bad:
            stays = f"The newest earlier checkpoint, {newest}, does not verify ({bad})"
        marker = newest.parent / "latest"
        named = marker.is_file() and marker.read_text().strip() == newest.name
        stays += f", and {marker} names it." if named else "."
    what = f"{e.strerror} ({e.filename})" if e.filename else e.strerror
    return (f"{what}. {stays} Free space there, or lower trainer.keep_checkpoints, or point "
            f"trainer.checkpoint_dir at a larger disk, then continue: {resume_command(str(trainer.run_dir))}")
