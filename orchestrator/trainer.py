"""The driver: one RL step on one screen, plus the SFT step and held-out evaluation.

Phases of an RL step, each timed (`timing/<phase>`):
prompts -> generate (rollout actors) -> score (reward actors) -> advantages (verl GRPO)
-> update (DeepSpeed learners) -> sync (weights to the engines) -> curriculum -> log.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from statistics import mean
from typing import Any

import ray

from curricula import Curriculum, Stage, build_curriculum
from orchestrator import algo
from orchestrator.batch import Prompt, Trajectory
from orchestrator.checkpoint import find_resume_checkpoint, resolve_auto_run_dir, save_checkpoint, truncate_metrics
from orchestrator.config import ParallaxConfig
from orchestrator.data import batches, load_problems, sft_batch, to_prompts, tokenizer_corpus, train_batch
from orchestrator.logger import Logger, Timer
from orchestrator.setup import Groups, build_groups, start_cluster


def prepare_model(cfg: ParallaxConfig, run_dir: Path) -> str:
    """The model path every actor loads: the configured one, or a tiny model built in the run dir."""
    if cfg.model.path:
        return cfg.model.path
    from tinylm import build_tiny_model

    return str(build_tiny_model(run_dir / "model_init", cfg.model.tiny, tokenizer_corpus(cfg.data)))


def trajectory_stats(trajs: list[Trajectory], fmt: str, prefix: str) -> dict[str, float]:
    """Parallel-structure metrics of generated texts through the format package."""
    from formats import text_stats

    stats = [text_stats(t.text, fmt) for t in trajs]
    valid = [s for s in stats if s["valid"] and s["has_parallel"]]
    out = {f"{prefix}/ratio": mean(bool(s["has_parallel"]) for s in stats),
           f"{prefix}/valid": mean(bool(s["valid"]) for s in stats)}
    if valid:
        out[f"{prefix}/first_pos"] = mean(s["first_parallel_pos"] for s in valid)
        out[f"{prefix}/speedup"] = mean(s["speedup"] for s in valid)
        out[f"{prefix}/critical_path"] = mean(s["critical_path_tokens"] for s in valid)
    return out


class Trainer:
    def __init__(self, cfg: ParallaxConfig):
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.fmt = "parason" if cfg.data.trace == "parason" else "parallel_r1"
        train, self.test = load_problems(cfg.data)
        self.train = train
        self.model_path = prepare_model(cfg, self.run_dir)
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.curriculum: Curriculum = build_curriculum(
            cfg.curriculum.name, sft_steps=cfg.trainer.sft_steps, rl_steps=cfg.trainer.rl_steps)
        start_cluster(cfg.cluster)
        self.groups: Groups = build_groups(cfg, self.model_path, self.run_dir.name)
        self.sft_iter = batches(train, cfg.trainer.sft_batch_size, cfg.trainer.seed)
        self.prompt_iter = batches(to_prompts(train, self.tokenizer), cfg.trainer.prompts_per_step, cfg.trainer.seed)
        self.consumed = {"sft": 0, "rl": 0}  # batches drawn from each iterator (the data position)
        self.stage_table: list[dict[str, Any]] = []
        ckpt = find_resume_checkpoint(cfg.resume, self.run_dir)
        state = self._restore(ckpt) if ckpt else {}
        self.logger = Logger(cfg.logging, self.run_dir, _plain(cfg), self.curriculum.total_steps,
                             run_id=state.get("wandb_run_id"), start=self.curriculum.global_step)

    # ---- the loop ------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        if self.cfg.trainer.eval_after_stage and self.curriculum.global_step == 0:
            self.stage_table.append({"stage": "init", **self.evaluate()})
        while not self.curriculum.done:
            stage, step = self.curriculum.stage, self.curriculum.global_step
            metrics = self.sft_step(stage) if stage.kind == "sft" else self.rl_step(stage, step)
            metrics["curriculum/stage"] = self.curriculum.index
            self.logger.log(metrics, step)
            self.curriculum.update(metrics)
            if self.curriculum.done or self.curriculum.stage.name != stage.name:
                self._end_stage(stage)
            elif self.cfg.trainer.save_every and (step + 1) % self.cfg.trainer.save_every == 0:
                self.save()
        return self.finish()

    def rl_step(self, stage: Stage, step: int) -> dict[str, Any]:
        t, g = Timer(), self.groups
        with t("step"):
            prompts: list[Prompt] = next(self.prompt_iter)
            self.consumed["rl"] += 1
            with t("generate"):
                trajs = [x for chunk in ray.get(g.rollout.async_generate(prompts, self.cfg.rollout.n, step))
                         for x in chunk]
            with t("reward"):
                scored = self._score(trajs, prompts, stage, step)
            with t("advantages"):
                rewards = [r for group in scored.rewards for r in group]
                adv = algo.grpo_advantages(rewards, [x.uid for x in trajs], self.cfg.learner.norm_adv_by_std)
                batch = train_batch(trajs, adv, self.tokenizer.pad_token_id)
            with t("update"):
                stats = _mean_dicts(ray.get(g.learner.async_grpo_step(batch, self.cfg.learner.lr,
                                                                      self.cfg.rollout.temperature)))
            with t("sync"):
                g.sync.push(g.learner, g.rollout)
        lengths = [len(x.response_ids) for x in trajs]
        return {**scored.metrics, **stats, **t.times, **trajectory_stats(trajs, self.fmt, "parallel"),
                "response/length": mean(lengths), "response/clip_ratio": mean(x.finish_reason == "length"
                                                                              for x in trajs),
                "throughput/tokens_per_s": sum(lengths) / t.times["timing/generate"]}

    def sft_step(self, stage: Stage) -> dict[str, Any]:
        t, g, c = Timer(), self.groups, self.curriculum
        with t("step"):
            batch = sft_batch(next(self.sft_iter), self.cfg.data.trace, self.tokenizer)
            self.consumed["sft"] += 1
            lr = algo.warmup_cosine(c.stage_step, stage.steps, self.cfg.learner.sft_lr,
                                    self.cfg.learner.sft_warmup_ratio)
            with t("update"):
                stats = _mean_dicts(ray.get(g.learner.async_sft_step(batch, lr)))
        return {**stats, **t.times}

    # ---- helpers ----------------------------------------------------------------------------
    def _score(self, trajs: list[Trajectory], prompts: list[Prompt], stage: Stage, step: int):
        """Score every prompt's group on the reward actors; returns one merged RewardBatch."""
        from actors.reward_worker import RewardBatch
        from rewards import RewardSpec

        n = self.cfg.rollout.n
        groups = [{"texts": [x.text for x in trajs[i * n:(i + 1) * n]], "ground_truth": p.ground_truth}
                  for i, p in enumerate(prompts)]
        spec = RewardSpec(stage.reward, dict(stage.reward_params)) if stage.reward else None
        parts = ray.get(self.groups.reward.async_score(groups, step=step, stage=stage.name, spec=spec))
        merged = RewardBatch([], [], [], {}, {})
        for p in parts:
            merged.rewards += p.rewards
            merged.correct += p.correct
            merged.components += p.components
        merged.metrics = _mean_dicts([p.metrics for p in parts])
        return merged

    def evaluate(self) -> dict[str, float]:
        """Greedy decoding on the held-out problems: accuracy and parallel structure."""
        prompts = to_prompts(self.test, self.tokenizer)
        trajs = [x for chunk in ray.get(self.groups.rollout.async_generate(prompts, 1, 0, greedy=True))
                 for x in chunk]
        scored = self._score(trajs, prompts, Stage("eval", "rl", 1, reward="accuracy"), 0)
        acc = mean(c for group in scored.correct for c in group)
        return {"eval/acc": acc, **trajectory_stats(trajs, self.fmt, "eval/parallel")}

    def _end_stage(self, stage: Stage) -> None:
        ray.get(self.groups.learner.async_call("reset_optimizer"))
        if self.cfg.trainer.eval_after_stage:
            row = {"stage": stage.name, **self.evaluate()}
            self.stage_table.append(row)
            self.logger.log({k: v for k, v in row.items() if k != "stage"}, self.curriculum.global_step)
        self.save()

    def save(self) -> Path:
        learner = self.groups.learner

        def write(tmp: Path) -> None:
            ray.get(learner.async_call("save_pretrained", str(tmp / "model")))
            self.tokenizer.save_pretrained(tmp / "model")
            ray.get(learner.async_call("save_training_state", str(tmp / "training_state")))

        state = {"curriculum": self.curriculum.state_dict(), "wandb_run_id": self.logger.run_id,
                 "global_step": self.curriculum.global_step, "consumed": self.consumed,
                 "stage_table": self.stage_table}
        return save_checkpoint(self.run_dir / "checkpoints", self.curriculum.global_step, write, state)

    def _restore(self, ckpt: Path) -> dict[str, Any]:
        """Continue from a checkpoint: weights, optimizer, curriculum, data position, W&B run.

        Sampling seeds derive from the global step and the data iterators from the config seed,
        so a resumed run draws the same prompts and samples as an uninterrupted one.
        """
        state = json.loads((ckpt / "trainer_state.json").read_text())
        self.curriculum.load_state_dict(state["curriculum"])
        for kind, it in (("sft", self.sft_iter), ("rl", self.prompt_iter)):
            for _ in range(state["consumed"][kind]):
                next(it)
        self.consumed = dict(state["consumed"])
        self.stage_table = list(state["stage_table"])
        ray.get(self.groups.learner.async_call("load_training_state", str(ckpt / "training_state")))
        self.groups.sync.push(self.groups.learner, self.groups.rollout)
        truncate_metrics(self.run_dir / "metrics.jsonl", self.curriculum.global_step)
        print(f"resumed from {ckpt} at step {self.curriculum.global_step}")
        return state

    def finish(self) -> dict[str, Any]:
        summary = {"run_dir": str(self.run_dir), "model_path": self.model_path, "stages": self.stage_table,
                   "steps": self.curriculum.global_step}
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        self.logger.write(format_table(self.stage_table))
        self.logger.close({f"final/{k}": v for k, v in (self.stage_table[-1] if self.stage_table else {}).items()})
        return summary


def format_table(rows: list[dict[str, Any]]) -> str:
    """Per-stage held-out table for the console."""
    if not rows:
        return "(no evaluation)"
    cols = ["stage"] + sorted({k for r in rows for k in r} - {"stage"})
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = [" | ".join(cols), " | ".join("---" for _ in cols)]
    lines += [" | ".join(fmt(r.get(c, "")) for c in cols) for r in rows]
    return "\n".join(lines)


def _mean_dicts(dicts: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for d in dicts for k in d}
    return {k: mean(d[k] for d in dicts if k in d) for k in keys}


def _plain(cfg: ParallaxConfig) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(cfg), default=str))


def run(cfg: ParallaxConfig) -> dict[str, Any]:
    t0 = time.perf_counter()
    if cfg.resume == "auto":
        cfg.run_dir = str(resolve_auto_run_dir(Path(cfg.run_dir)))
    trainer = Trainer(cfg)
    summary = trainer.fit()
    summary["wall_time_s"] = time.perf_counter() - t0
    print(f"run dir: {cfg.run_dir}  ({summary['wall_time_s']:.0f}s)")
    return summary


