"""The driver: one RL step on one screen, plus the SFT step and held-out evaluation.

Phases of an RL step, each timed (`timing/<phase>`):
prompts -> generate (rollout actors) -> score (reward actors) -> advantages (verl GRPO)
-> update (DeepSpeed learners) -> sync (weights to the engines) -> curriculum -> log.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path
from statistics import mean
from typing import Any

import ray

from actors.engine_weights import EngineWeights
from actors.faults import ActorLost, get_all
from contract import algo
from contract.batch import Prompt, Trajectory
from contract.config import ParallaxConfig
from contract.seeds import DYNAMIC_ROUND, EVAL_SEED, step_seed, substream
from curricula import Curriculum, Stage
from layouts import Layout, get_layout
from orchestrator import generation
from orchestrator.checkpoint import (
    config_hash,
    find_resume_checkpoint,
    plain_config,
    read_state,
    save_checkpoint,
    saved_config_hash,
    truncate_metrics,
)
from orchestrator.data import StageStreams, benchmark_prompts, load_problems, to_prompts, tokenizer_corpus
from orchestrator.logger import Logger, Timer
from orchestrator.setup import Groups, build_groups, pipeline_threads_warning, start_cluster
from orchestrator.stage_table import format_table, in_table
from orchestrator.stops import RunStopped, lost_actor_paragraph
from orchestrator.storage import cannot_write, checkpoint_root, mirror_for
from orchestrator.structure import trajectory_stats
from rewards.registry import stage_spec


def prepare_model(cfg: ParallaxConfig, run_dir: Path) -> str:
    """The model path every actor loads: a packaged real model (materialised once, cached), the
    configured directory or hub name, or a tiny model built in the run dir. A real model gets every
    format tag as one token and a pad token (models/prepare.py), in a copy under the run dir only when
    its tokenizer lacks them."""
    if not cfg.model.package and not cfg.model.path:
        from tinylm import build_tiny_model

        return str(build_tiny_model(run_dir / "model_init", cfg.model.tiny, tokenizer_corpus(cfg.data)))
    from formats import ALL_SPECIAL_TOKENS
    from models import materialize, prepare_model_dir

    if cfg.model.package:
        src, key = materialize(cfg.model.package), "model.package"
    else:
        src, key = _local_model(cfg.model.path), "model.path"
    return prepare_model_dir(src, run_dir / "model_init", ALL_SPECIAL_TOKENS, key=key).path


def _local_model(path: str) -> Path:
    """A local model directory, or a hub name fetched into the hub cache; ValueError naming model.path."""
    p = Path(path).expanduser()
    if p.is_dir():
        return p
    if p.is_absolute() or path.startswith((".", "~")) or path.count("/") != 1:
        raise ValueError(f"model.path={path!r}: no such model directory")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path))
    except Exception as e:  # noqa: BLE001 -- offline, unknown repo, no auth: one clear error
        raise ValueError(f"model.path={path!r}: not a local directory, and the hub cannot give it ({e})") from None




def _truths(prompts: list[Prompt], trajs: list[Trajectory]) -> list[str]:
    by_uid = {p.uid: p.ground_truth for p in prompts}
    return [by_uid[x.uid] for x in trajs]


class SetupError(Exception):
    """The run cannot start: a model, dataset, field or file that is not there. Raised before Ray starts."""


class Trainer:
    def __init__(self, cfg: ParallaxConfig):
        self.cfg = cfg
        self.started_at = time.time()  # wall clock (summary.json): a sweep's jobs overlap or not
        self.run_dir = Path(cfg.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            # where checkpoints live (trainer.checkpoint_dir: the run dir, a local path, or a URI mirrored to)
            self.ckpt_root = checkpoint_root(cfg.trainer.checkpoint_dir, self.run_dir)
            if why := cannot_write(self.ckpt_root):  # else the first save fails mid-run, a traceback
                raise ValueError(f"trainer.checkpoint_dir={cfg.trainer.checkpoint_dir or str(self.ckpt_root)!r}: {why}")
            self.mirror = mirror_for(cfg.trainer.checkpoint_dir)
            # verified before anything starts: a damaged checkpoint is named, the previous good one taken
            ckpt = find_resume_checkpoint(cfg.resume, self.run_dir, root=self.ckpt_root, mirror=self.mirror)
            self._prepare(cfg)
        except (ValueError, FileNotFoundError, RuntimeError) as e:  # CheckpointError included
            raise SetupError(str(e)) from e
        start_cluster(cfg.cluster)
        if warning := pipeline_threads_warning(cfg, os.cpu_count() or 1):
            print(f"warning: {warning}", flush=True)
        self.groups: Groups = build_groups(cfg, self.model_path, self.run_dir.name)
        self.stage_table: list[dict[str, Any]] = []
        g = self.groups
        self.weights = EngineWeights(g.sync, g.learner, g.rollout, cfg.cluster.max_restarts, cfg.cluster.start_timeout_s)
        self._ahead: list[generation.Started] = []  # generations started for later steps (the pipeline)
        if ckpt is None and cfg.resume == "auto":
            truncate_metrics(self.run_dir / "metrics.jsonl", 0)  # starting over: rows of an earlier try go
        state = self._restore(ckpt) if ckpt else {}
        self._saved_at = time.monotonic()  # trainer.save_every_min counts from here
        self._last_saved: Path | None = None  # the newest checkpoint this run wrote (a vanished one is said)
        self._idle_said: set[str] = set()  # stages whose all-zero-advantage update was said
        self.logger = Logger(cfg.logging, self.run_dir, plain_config(cfg), self.curriculum.total_steps,
                             run_id=state.get("wandb_run_id"), start=self.curriculum.global_step)

    # ---- per-stage settings (None in a stage: the run's config) --------------------------
    def _batch_size(self, stage: Stage) -> int:
        default = self.cfg.trainer.sft_batch_size if stage.kind == "sft" else self.cfg.trainer.prompts_per_step
        return stage.batch_size or default

    def _lr(self, stage: Stage) -> tuple[float, float]:
        """(learning rate, weight decay) for this step of the stage."""
        lcfg, sft = self.cfg.learner, stage.kind == "sft"
        base = stage.lr or (lcfg.sft_lr if sft else lcfg.lr)
        wd = stage.weight_decay if stage.weight_decay is not None else (lcfg.sft_weight_decay if sft
                                                                        else lcfg.weight_decay)
        if (stage.lr_schedule or ("cosine" if sft else "constant")) == "cosine":
            warm = stage.warmup_ratio if stage.warmup_ratio is not None else lcfg.sft_warmup_ratio
            base = algo.warmup_cosine(self.curriculum.stage_step, stage.steps, base, warm)
        return base, wd

    # ---- the loop ------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        tcfg = self.cfg.trainer
        if tcfg.eval_after_stage and tcfg.eval_init and self.curriculum.global_step == 0:
            self.stage_table.append({"stage": "init", **{k: v for k, v in self.evaluate().items()
                                                         if in_table(k)}})
        while not self.curriculum.done:
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
                every, minutes = self.cfg.trainer.save_every, self.cfg.trainer.save_every_min
                if (self._checkpoint_lost() or (every and (step + 1) % every == 0)
                        or (minutes and time.monotonic() - self._saved_at >= 60 * minutes)):
                    self.save()
        return self.finish()

    def rl_step(self, stage: Stage, step: int) -> dict[str, Any]:
        t, g = Timer(), self.groups
        with t("step"):
            started = self._samples_for(stage, step)
            prompts = started.prompts
            trajs, scored = self._collect(started, stage, t)
            self._start_ahead(stage, step)  # the next steps' samples generate while this one updates
            if self.cfg.trainer.dynamic_sampling:
                trajs, scored, prompts = self._dynamic_sampling(stage, step, started.n, trajs, scored, t, prompts)
            staleness = [self.weights.version - x.policy_version for x in trajs]
            with t("advantages"):
                rewards = [r for group in scored.rewards for r in group]
                adv = algo.grpo_advantages(rewards, [x.uid for x in trajs], self.cfg.learner.norm_adv_by_std)
                batch = self.layout.train_batch(trajs, adv, self.tokenizer.pad_token_id)
            if not any(adv) and stage.name not in self._idle_said:  # an update that changes nothing: said once
                self._idle_said.add(stage.name)
                print(f"warning: stage {stage.name} step {step}: every group's samples scored alike, so every GRPO "
                      "advantage is 0 and the update changes nothing (actor/zero_advantage=1 marks each such step: "
                      "a task the model always or never solves teaches nothing)", flush=True)
            with t("update"):
                lr, wd = self._lr(stage)
                stats = generation.mean_dicts(get_all(g.learner.async_grpo_step(batch, lr, wd, self.cfg.rollout.temperature),
                                            "learner"))
            with t("sync"):
                synced = self.weights.push()  # sync/bytes, sync/buckets, timing/sync_send
        lengths = [len(x.response_ids) for x in trajs]
        correct = [c for group in scored.correct for c in group]
        every = self.cfg.logging.table_every
        if every and self.curriculum.stage_step % every == 0:
            from orchestrator.samples import sample_rows

            self.logger.log_table(sample_rows(prompts, trajs, rewards, correct, self.fmt, self.cfg.logging.table_rows),
                                  step)
        return {**scored.metrics, **stats, **synced, **t.times, **trajectory_stats(trajs, self.fmt, "parallel", correct,
                                                                               _truths(prompts, trajs)),
                "response/length": mean(lengths), "response/clip_ratio": mean(x.finish_reason == "length"
                                                                              for x in trajs),
                "throughput/tokens_per_s": sum(lengths) / max(t.times["timing/generate"], 1e-9),
                "actor/staleness": mean(staleness), "actor/staleness_max": float(max(staleness)),
                "actor/zero_advantage": float(not any(adv))}

    def sft_step(self, stage: Stage) -> dict[str, Any]:
        t, g = Timer(), self.groups
        with t("step"):
            problems = self.data.next(stage, self._batch_size(stage))
            batch = self.layout.sft_batch(problems, self.cfg.data.trace, self.tokenizer)  # the layout RL will score
            lr, wd = self._lr(stage)
            with t("update"):
                stats = generation.mean_dicts(get_all(g.learner.async_sft_step(batch, lr, wd), "learner"))
        return {**stats, **t.times}

    def _prepare(self, cfg: ParallaxConfig) -> None:
        """What can fail on the user's input -- model, data, fields, files -- all before Ray starts."""
        self.fmt = cfg.data.spec  # the format with its options (formats.FormatSpec)
        train, self.test = load_problems(cfg.data)
        self.train = train
        self.model_path = prepare_model(cfg, self.run_dir)
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.curriculum: Curriculum = cfg.curriculum.build(cfg.reward)
        # how trajectories and teacher traces become learner rows, chosen once (layouts/)
        self.layout: Layout = get_layout(cfg.learner.layout, reprefill=cfg.rollout.dispatch == "requests")
        from transformers import AutoConfig

        context = getattr(AutoConfig.from_pretrained(self.model_path), "max_position_embeddings", None)
        self.data = StageStreams(cfg.data, train, self.tokenizer, cfg.trainer.seed, run_dir=self.run_dir,
                                 max_tokens=context, max_new_tokens=cfg.rollout.max_new_tokens)
        for s in self.curriculum.stages:
            if s.steps:
                self.data.check(s, self._batch_size(s))
        self.eval_prompts = self._eval_prompts()  # a missing benchmark fails here, before Ray

    def _eval_prompts(self) -> list[Prompt]:
        """The held-out prompts: the toy test split, or `trainer.eval_data`'s benchmarks (first
        `trainer.eval_limit` problems of each)."""
        names = list(self.cfg.trainer.eval_data or [])
        if not names:
            return to_prompts(self.test, self.tokenizer)
        out: list[Prompt] = []
        for name in names:
            try:
                out += benchmark_prompts(name, self.cfg.data, self.tokenizer, self.cfg.trainer.eval_limit)
            except (ValueError, FileNotFoundError) as e:
                raise ValueError(f"trainer.eval_data: {name!r}: {e}") from None
        return out

    # ---- helpers ----------------------------------------------------------------------------
    def _generate_and_score(self, prompts: list[Prompt], n: int, seed: int, stage: Stage, step: int,
                            t: Timer, greedy: bool = False):
        """Generate on every rollout actor and score (orchestrator/generation.py): (trajectories, RewardBatch)."""
        started = generation.start(self.groups.rollout, self.weights, prompts, n=n, seed=seed, step=step,
                                   greedy=greedy, max_restarts=self.cfg.cluster.max_restarts)
        return self._collect(started, stage, t)

    def _collect(self, started: generation.Started, stage: Stage, t: Timer):
        return generation.collect(started, self.groups.reward, self.weights, stage_spec(stage, self.cfg.reward, self.fmt),
                                  stage.name, t, self.cfg.cluster.max_restarts, self.cfg.cluster.start_timeout_s)

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

    def _dynamic_sampling(self, stage: Stage, step: int, n: int, trajs: list[Trajectory], scored, t: Timer,
                          prompts: list[Prompt]):
        """DAPO's dynamic sampling (orchestrator/dynamic.py): groups all right or all wrong are filtered
        out and fresh prompts generated, up to `trainer.dynamic_sampling_rounds` more generations, until
        the batch holds as many informative groups as it had groups. Still short, it is topped up with
        filtered groups (zero advantage: they move nothing), counted as `rollout/dynamic_short`.
        Returns the kept samples, their scores, and every prompt they came from."""
        from orchestrator import dynamic

        want, pool = len(trajs) // n, [(trajs, scored, dynamic.informative(scored.correct))]
        rounds = 0
        while sum(len(k) for _, _, k in pool) < want and rounds < self.cfg.trainer.dynamic_sampling_rounds:
            rounds += 1
            seed = substream(step_seed(step, self.cfg.trainer.seed), DYNAMIC_ROUND, rounds)
            extra = generation.start(self.groups.rollout, self.weights, self.data.next(stage, self._batch_size(stage)),
                                     n=n, seed=seed, step=step, max_restarts=self.cfg.cluster.max_restarts)
            more, more_scored = self._collect(extra, stage, t)
            prompts = prompts + list(extra.prompts)
            pool.append((more, more_scored, dynamic.informative(more_scored.correct)))
        kept = [dynamic.take(tr, sc, n, k) for tr, sc, k in pool]
        filtered = sum(len(sc.correct) - len(k) for _, sc, k in pool)
        short = max(0, want - sum(len(k) for _, _, k in pool))
        if short:
            idle = [g for g in range(want) if g not in set(pool[0][2])][:short]
            kept.append(dynamic.take(trajs, scored, n, idle))
        out, merged = dynamic.merge(kept)
        out, merged = dynamic.take(out, merged, n, list(range(want)))
        merged.metrics |= {"rollout/filtered": float(filtered), "rollout/dynamic_rounds": float(rounds),
                           "rollout/dynamic_short": float(short), "rollout/samples": float(len(out)),
                           "reward/mean": float(mean(r for group in merged.rewards for r in group))}
        return out, merged, prompts

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
        """Wait for the generations the pipeline started ahead to finish (they stay for their steps)."""
        for ahead in self._ahead:
            ahead.gen.wait()

    def evaluate(self) -> dict[str, float]:
        """Held-out evaluation with the `evaluation` package's metrics. The papers' protocol:
        eval/acc is mean@k over trainer.eval_samples samples per problem at the rollout temperature
        (Parallel-R1: Mean@16 at T=1.0), eval/pass@k alongside; eval/acc_greedy decodes greedily.
        Also the samples' parallel structure, accuracy under critical-path budgets and strata.
        Every evaluation draws the same seeded sampling stream, so stages differ by weights only."""
        from evaluation import evaluate_outputs, flatten_metrics

        tcfg = self.cfg.trainer
        prompts = self.eval_prompts
        by_uid = {p.uid: p for p in prompts}
        stage = Stage("eval", "rl", 1, reward="accuracy")
        table: dict[str, float] = {}
        if tcfg.eval_greedy:
            trajs, scored = self._generate_and_score(prompts, 1, EVAL_SEED, stage, 0, Timer(), greedy=True)
            table["eval/acc_greedy"] = mean(c for group in scored.correct for c in group)
        k = tcfg.eval_samples
        if k:
            trajs, scored = self._generate_and_score(prompts, k, EVAL_SEED, stage, 0, Timer())
        correct = [c for group in scored.correct for c in group]
        samples = [{"uid": x.uid, "benchmark": by_uid[x.uid].meta.get("benchmark", "heldout"), "text": x.text,
                    "answer": by_uid[x.uid].ground_truth,
                    "difficulty": by_uid[x.uid].meta.get("difficulty"), "correct": c}
                   for x, c in zip(trajs, correct)]
        detail = flatten_metrics(evaluate_outputs(samples, self.fmt, k or 1, budgets=tcfg.eval_budgets))
        table["eval/acc"] = mean(correct)
        table["eval/answered"] = detail["eval/overall/answered"]  # over every benchmark's samples
        if k:
            table[f"eval/pass@{k}"] = detail[f"eval/overall/pass@{k}"]
        else:
            table.pop("eval/acc_greedy")  # greedy only: it is eval/acc
        table |= trajectory_stats(trajs, self.fmt, "eval/parallel", correct, _truths(prompts, trajs))
        table |= {f"eval/acc@{b}": detail[f"eval/overall/acc@{b}"] for b in tcfg.eval_budgets
                  if f"eval/overall/acc@{b}" in detail}
        return table | {k: v for k, v in detail.items() if k not in table}

    def _end_stage(self, stage: Stage) -> None:
        get_all(self.groups.learner.async_call("reset_optimizer"), "learner")
        if stage.kind == "sft":  # SFT steps do not sync each step; the engines need the SFT weights now
            self.weights.push()
        if self.cfg.trainer.eval_after_stage:
            metrics = self.evaluate()
            self.logger.log(metrics, self.curriculum.global_step, advance=False)
            self.stage_table.append({"stage": stage.name, **{k: v for k, v in metrics.items()
                                                             if in_table(k)}})
        self.save()

    def save(self) -> Path:
        learner = self.groups.learner

        def write(tmp: Path) -> None:
            if self.cfg.cluster.shared_fs:
                get_all(learner.async_call("save_pretrained", str(tmp / "model")), "learner")
                get_all(learner.async_call("save_training_state", str(tmp / "training_state")), "learner")
            else:  # each rank writes on its node and hands the files over; they are stored here
                from actors.files import write_tree

                for files in get_all(learner.async_call("save_files"), "learner"):
                    write_tree(tmp, files)
            self.tokenizer.save_pretrained(tmp / "model")

        consumed = dict(self.data.consumed)
        for ahead in self._ahead:  # drawn for steps not trained yet: a resumed run draws them again
            consumed[ahead.data_key] -= 1
        state = {"curriculum": self.curriculum.state_dict(), "wandb_run_id": self.logger.run_id,
                 "global_step": self.curriculum.global_step, "consumed": consumed,
                 "stage_table": self.stage_table}
        self._saved_at = time.monotonic()
        keep = self.cfg.trainer.keep_checkpoints
        final = save_checkpoint(self.ckpt_root, self.curriculum.global_step, write, state, keep=keep,
                                config_hash=config_hash(self.cfg))
        if self.mirror is not None:  # verified here, then copied: files, manifest, `latest`
            self.mirror.upload(final)
            self.mirror.prune(keep)
        self._last_saved = final
        return final

    def _checkpoint_lost(self) -> bool:
        """Whether the newest checkpoint this run wrote is gone (its directory deleted under the run: it
        was silently made again at the next save). Said either way; trainer.lost_checkpoint decides."""
        last = self._last_saved
        if last is None or last.is_dir():
            return False
        what = f"checkpoint {last} is gone: its directory was removed while the run trained"
        if self.cfg.trainer.lost_checkpoint == "stop":
            raise RunStopped(f"{what}. trainer.lost_checkpoint=stop ends the run here, at step "
                             f"{self.curriculum.global_step}; with =save it writes a new one at once.")
        print(f"warning: {what}; saving step {self.curriculum.global_step} now (trainer.lost_checkpoint=save)",
              flush=True)
        return True

    def _restore(self, ckpt: Path) -> dict[str, Any]:
        """Continue from a checkpoint: weights, optimizer, curriculum, data position, W&B run.

        Sampling seeds derive from the global step and the config seed, the data iterators from the config seed,
        so a resumed run draws the same prompts and samples as an uninterrupted one.
        """
        state = read_state(ckpt)
        saved = saved_config_hash(ckpt)
        if saved and saved != config_hash(self.cfg):
            print(f"resume: the config differs from the one {ckpt.name} was written with (overrides changed); "
                  "continuing with the new one")
        self.curriculum.load_state_dict(state["curriculum"])
        self.data.fast_forward(state["consumed"], {s.name: s for s in self.curriculum.stages})
        self.stage_table = list(state["stage_table"])
        if self.cfg.cluster.shared_fs:
            get_all(self.groups.learner.async_call("load_training_state", str(ckpt / "training_state")), "learner")
        else:
            from actors.files import read_tree

            files = ray.put({f"training_state/{k}": v for k, v in read_tree(ckpt / "training_state").items()})
            get_all(self.groups.learner.async_call("load_training_state_files", files), "learner")
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
                   "started_at": self.started_at, "finished_at": time.time()}
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
    while True:
        trainer = Trainer(cfg)
        try:
            summary = trainer.fit()
            break
        except ActorLost as e:
            trainer.abort()
            if failures >= cfg.trainer.max_failures:
                where = trainer.mirror.uri if trainer.mirror else trainer.ckpt_root
                raise RunStopped(lost_actor_paragraph(e, cfg, failures, where)) from None
            failures += 1
            print(f"{e}; restarting from the newest verified checkpoint "
                  f"(failure {failures} of trainer.max_failures={cfg.trainer.max_failures})", flush=True)
            cfg = replace(cfg, resume="auto")
    summary["failures"] = failures
    summary["wall_time_s"] = time.perf_counter() - t0
    print(f"run dir: {cfg.run_dir}  ({summary['wall_time_s']:.0f}s)")
    return summary


