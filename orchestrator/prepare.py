"""What a run needs before Ray starts, and what can fail on the user's input: the model, the data, the
curriculum, the layout and the held-out prompts. Every error here names its key, and nothing has started.
Also the per-stage settings the driver reads each step (batch size, learning rate and weight decay).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from actors import algo
from curricula import Curriculum, Stage
from parallax.contract.batch import Prompt
from parallax.contract.config import LearnerConfig, ParallaxConfig
from parallax.layouts import Layout, get_layout
from parallax.trainingdata.streams import (
    StageStreams,
    benchmark_prompts,
    load_problems,
    show_examples,
    to_prompts,
    tokenizer_corpus,
)


@dataclass
class Prepared:
    """The run's inputs, checked."""

    model_path: str  # the directory every actor loads
    tokenizer: object
    fmt: object  # the format with its options (parallax.formats.FormatSpec)
    curriculum: Curriculum
    layout: Layout  # how trajectories and teacher traces become learner rows (parallax/layouts/)
    data: StageStreams  # one batch stream per stage
    eval_prompts: list[Prompt]  # held out


def batch_size(cfg: ParallaxConfig, stage: Stage) -> int:
    """Prompts (RL) or traces (SFT) per step: the stage's own, or the run's."""
    return stage.batch_size or (cfg.trainer.sft_batch_size if stage.kind == "sft" else cfg.trainer.prompts_per_step)


def learning_rate(lcfg: LearnerConfig, stage: Stage, stage_step: int) -> tuple[float, float]:
    """(learning rate, weight decay) at this step of the stage: the stage's own, or the learner's (SFT's
    or RL's), on the stage's schedule (SFT: warmup then cosine; RL: constant)."""
    sft = stage.kind == "sft"
    base = stage.lr or (lcfg.sft_lr if sft else lcfg.lr)
    wd = stage.weight_decay if stage.weight_decay is not None else (lcfg.sft_weight_decay if sft else lcfg.weight_decay)
    if (stage.lr_schedule or ("cosine" if sft else "constant")) == "cosine":
        warm = stage.warmup_ratio if stage.warmup_ratio is not None else lcfg.sft_warmup_ratio
        base = algo.warmup_cosine(stage_step, stage.steps, base, warm)
    return base, wd


def prepare(cfg: ParallaxConfig, run_dir: Path) -> Prepared:
    """Model, data, fields and files, all checked before Ray starts."""
    train, test = load_problems(cfg.data)
    model_path = prepare_model(cfg, run_dir)
    from parallax.models.tokenizer import context_length, load_tokenizer

    tokenizer = load_tokenizer(model_path)
    try:
        train, test = (show_examples(problems, cfg.data, tokenizer) for problems in (train, test))
    except ValueError as e:
        raise ValueError(f"data.fewshot={cfg.data.fewshot} with model {model_path}: {e}") from None
    curriculum = cfg.curriculum.build(cfg.reward)
    layout = get_layout(cfg.learner.layout, reprefill=cfg.rollout.dispatch == "requests")
    context = context_length(model_path)
    data = StageStreams(cfg.data, train, tokenizer, cfg.trainer.seed, run_dir=run_dir, max_tokens=context,
                        max_new_tokens=cfg.rollout.max_new_tokens)
    for s in curriculum.stages:
        if s.steps:
            data.check(s, batch_size(cfg, s))
    return Prepared(model_path=model_path, tokenizer=tokenizer, fmt=cfg.data.spec, curriculum=curriculum,
                    layout=layout, data=data, eval_prompts=eval_prompts(cfg, test, tokenizer))


def prepare_model(cfg: ParallaxConfig, run_dir: Path) -> str:
    """The model path every actor loads: a packaged real model (materialised once, cached), the
    configured directory or hub name, or a tiny model built in the run dir. A real model gets every
    format tag as one token and a pad token (parallax/models/), in a copy under the run dir only when its
    tokenizer lacks them."""
    if not cfg.model.package and not cfg.model.path:
        from parallax.models import cache_dir
        from parallax.tinylm import build_tiny_model

        return str(build_tiny_model(run_dir / "model_init", cfg.model.tiny, tokenizer_corpus(cfg.data),
                                    cache=cache_dir() / "tiny"))
    from parallax.formats import ALL_SPECIAL_TOKENS
    from parallax.models import prepared_for_run

    return prepared_for_run(package=cfg.model.package, path=cfg.model.path, out=run_dir / "model_init",
                            tags=ALL_SPECIAL_TOKENS).path


def eval_prompts(cfg: ParallaxConfig, test: list, tokenizer) -> list[Prompt]:
    """The held-out prompts: the toy test split, or `trainer.eval_data`'s benchmarks (first
    `trainer.eval_limit` problems of each). A missing benchmark fails here, before Ray."""
    names = list(cfg.trainer.eval_data or [])
    if not names:
        return to_prompts(test, tokenizer)
    out: list[Prompt] = []
    for name in names:
        try:
            out += benchmark_prompts(name, cfg.data, tokenizer, cfg.trainer.eval_limit)
        except (ValueError, FileNotFoundError) as e:
            raise ValueError(f"trainer.eval_data: {name!r}: {e}") from None
    return out
