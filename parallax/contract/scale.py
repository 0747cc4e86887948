"""The `scale` slice: the same experiment with smaller numbers (`+scale=mini`), as pure functions.

`scaled_stage` shrinks one stage (steps capped; reward-schedule phases, slots and predicate minimums
shrunk by the same factor, each at least 1; batch sizes and samples capped); `apply_scale` applies a
run's `scale` to its whole config in place, before any other check sees it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from parallax.contract.errors import _check
from parallax.contract.ranges import check_section


@dataclass
class ScaleConfig:
    """The `scale` slice: the same experiment with smaller numbers (`+scale=mini`: every paper experiment
    on SmolLM2-135M on a CPU). 0 leaves a number as the experiment sets it."""

    name: str = "full"
    # cap every stage's step budget; its reward-schedule phases and slots shrink in proportion (>= 1 step)
    max_stage_steps: int = 0
    # cap prompts per RL step (stage batch_size, trainer.prompts_per_step), SFT examples per step, samples per prompt
    max_prompts: int = 0
    max_sft_batch: int = 0
    max_rollout_n: int = 0

    def __post_init__(self) -> None:
        check_section(self, "scale")


def _cap(x, cap: int):
    return x if not cap or x is None else min(x, cap)


def scaled_stage(st, scale: ScaleConfig):
    """`st` under `scale` (pure): steps capped, schedule lengths and predicate minimums shrunk by the
    same factor (each at least 1), batch sizes and samples capped.

    >>> from parallax.contract.config import PhaseConfig, SlotConfig, StageConfig
    >>> s = StageConfig(kind="rl", steps=300, schedule=[PhaseConfig(steps=200, cycle=[SlotConfig("accuracy", steps=8),
    ...     SlotConfig("tiered", steps=2)]), PhaseConfig(cycle=[SlotConfig("accuracy")])], batch_size=512)
    >>> m = scaled_stage(s, ScaleConfig(max_stage_steps=6, max_prompts=2))
    >>> m.steps, m.schedule[0].steps, [c.steps for c in m.schedule[0].cycle], m.batch_size
    (6, 4, [1, 1], 2)
    """
    cap = scale.max_stage_steps
    if not cap or st.steps <= cap:
        f, steps = 1.0, st.steps
    else:
        f, steps = cap / st.steps, cap

    def shrink(n):
        return n if n is None or f == 1.0 else max(1, round(n * f))

    schedule = [dataclasses.replace(ph, steps=shrink(ph.steps),
                                    cycle=[dataclasses.replace(sl, steps=shrink(sl.steps)) for sl in ph.cycle])
                for ph in st.schedule]
    until = [dataclasses.replace(p, min_steps=shrink(p.min_steps) if p.min_steps else 0) for p in st.until]
    batch = _cap(st.batch_size, scale.max_sft_batch if st.kind == "sft" else scale.max_prompts)
    return dataclasses.replace(st, steps=steps, schedule=schedule, until=until, batch_size=batch,
                               rollout_n=_cap(st.rollout_n, scale.max_rollout_n))


def apply_scale(cfg) -> None:
    """`cfg` (a ParallaxConfig) with `cfg.scale` applied in place: its stages through :func:`scaled_stage`,
    the trainer's and rollout's batch numbers capped."""
    sc = cfg.scale
    if not (sc.max_stage_steps or sc.max_prompts or sc.max_sft_batch or sc.max_rollout_n):
        return
    _check(bool(cfg.curriculum.stages), "scale", "a scaled run needs the curriculum's stages in the config "
           "(curriculum.stages); the registered curriculum has none to scale")
    cfg.curriculum.stages = {k: scaled_stage(v, sc) for k, v in cfg.curriculum.stages.items()}
    cfg.trainer.prompts_per_step = _cap(cfg.trainer.prompts_per_step, sc.max_prompts)
    cfg.trainer.sft_batch_size = _cap(cfg.trainer.sft_batch_size, sc.max_sft_batch)
    cfg.rollout.n = _cap(cfg.rollout.n, sc.max_rollout_n)
