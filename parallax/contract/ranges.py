"""Every key a run's config may hold, and every number's range: checked before Ray starts.

* `check_keys(node, schema)`: a key the schema does not declare is refused, with the keys it does
  declare and the closest one (`+learner.foo=1` would otherwise be accepted and ignored). Free-form
  mappings (`reward.params`, a stage's `reward_params`) are the rewards' to check.
* `check_ranges(obj)`: every int and float field has an entry in `RANGES`; a value outside it, and
  a float that is not finite, is refused naming the key. Keys inside mappings and lists use `*`
  (`curriculum.stages.*.lr`); the error names the real one (`curriculum.stages.rl.lr`). Each section
  calls it on itself when built (`check_section`), so a range is stated here only, never in a
  `__post_init__`.

`tests/contract/test_config_ranges.py` walks every numeric field with a bad value, and fails when a
new field has no range here.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass
from typing import Any

from curricula.schedule import PHASE_RANGES, SLOT_RANGES
from curricula.stage import STAGE_RANGES
from curricula.transitions import PREDICATE_RANGES
from parallax.contract.errors import ConfigError


@dataclass(frozen=True)
class Range:
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def holds(self, v: float) -> bool:
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        return not (self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi))

    def __str__(self) -> str:
        lo = "-inf" if self.lo is None else f"{self.lo:g}"
        hi = "inf" if self.hi is None else f"{self.hi:g}"
        return (f"{'(' if self.lo_open or self.lo is None else '['}{lo}, "
                f"{hi}{')' if self.hi_open or self.hi is None else ']'}")

    def bad(self) -> float:
        """A value outside the range (the table-driven test's probe)."""
        if self.lo is not None:
            return self.lo if self.lo_open else self.lo - 1
        return self.hi if self.hi_open else self.hi + 1


def ge(x: float) -> Range:
    return Range(lo=x)


def gt(x: float) -> Range:
    return Range(lo=x, lo_open=True)


def unit(lo_open: bool = False, hi_open: bool = False) -> Range:
    return Range(0.0, 1.0, lo_open, hi_open)


COUNT, SEED, NONNEG = ge(1), ge(0), ge(0)

RANGES: dict[str, Range] = {
    # model
    "model.tiny.hidden_size": COUNT, "model.tiny.num_layers": COUNT, "model.tiny.num_heads": COUNT,
    "model.tiny.num_kv_heads": COUNT, "model.tiny.intermediate_size": COUNT, "model.tiny.vocab_size": COUNT,
    "model.tiny.max_position_embeddings": ge(16), "model.tiny.seed": SEED,
    # data
    "data.n_train": COUNT, "data.n_test": COUNT, "data.seed": SEED,
    "data.teacher_error": unit(), "data.teacher_no_answer": unit(), "data.teacher_serial": unit(),
    "data.teacher_verify": unit(), "data.teacher_midfork": unit(), "data.fewshot": Range(0, 8),
    "data.rl_holdout": unit(hi_open=True),
    # rollout
    "rollout.num_actors": COUNT, "rollout.n": COUNT, "rollout.temperature": gt(0), "rollout.top_p": unit(lo_open=True),
    "rollout.max_new_tokens": COUNT, "rollout.max_batch_size": COUNT, "rollout.num_cpus": gt(0),
    "rollout.num_gpus": NONNEG, "rollout.torch_threads": COUNT, "rollout.sleep_level": Range(1, 2),
    "rollout.executor.num_paths": COUNT, "rollout.executor.max_branches": COUNT, "rollout.executor.max_depth": COUNT,
    "rollout.executor.max_branch_tokens": ge(2),
    "rollout.vllm.tensor_parallel_size": COUNT, "rollout.vllm.gpu_memory_utilization": unit(lo_open=True),
    "rollout.vllm.max_model_len": ge(16), "rollout.vllm.cpu_kvcache_gib": COUNT,
    "rollout.weight_sync.bucket_mb": COUNT, "rollout.weight_sync.timeout_s": gt(0),
    # reward
    "reward.num_actors": COUNT, "reward.timeout_s": gt(0), "reward.num_cpus": gt(0),
    "reward.alpha": NONNEG, "reward.beta_sub": NONNEG, "reward.beta_trial": NONNEG, "reward.rho": NONNEG,
    "reward.rho_clip": NONNEG,
    # learner
    "learner.num_actors": COUNT, "learner.zero_stage": Range(0, 3), "learner.lr": gt(0),
    "learner.weight_decay": NONNEG, "learner.betas.*": unit(hi_open=True), "learner.adam_eps": gt(0),
    "learner.grad_clip": gt(0), "learner.micro_batch_size": COUNT, "learner.clip_ratio_low": unit(lo_open=True),
    "learner.clip_ratio_high": unit(lo_open=True), "learner.kl_coef": NONNEG, "learner.ppo_epochs": COUNT,
    "learner.rollout_is_cap": gt(1), "learner.ppo_mini_batches": COUNT,
    "learner.num_cpus": gt(0), "learner.num_gpus": NONNEG, "learner.torch_threads": COUNT, "learner.sft_lr": gt(0),
    "learner.sft_weight_decay": NONNEG, "learner.sft_warmup_ratio": unit(), "learner.sft_pack_length": COUNT,
    "learner.sft_tag_lr_mult": gt(0), "learner.lora.r": NONNEG, "learner.lora.alpha": gt(0),
    "learner.lora.dropout": unit(hi_open=True),
    # trainer
    "trainer.sft_batch_size": COUNT, "trainer.prompts_per_step": COUNT, "trainer.eval_samples": NONNEG,
    "trainer.eval_budgets.*": COUNT, "trainer.eval_every": NONNEG, "trainer.eval_limit": COUNT,
    "trainer.save_every": ge(-1), "trainer.save_every_min": NONNEG, "trainer.keep_checkpoints": NONNEG,
    "trainer.seed": SEED,
    "trainer.max_failures": NONNEG, "trainer.max_staleness": NONNEG, "trainer.dynamic_sampling_rounds": NONNEG,
    # curriculum
    # the curriculum's own (curricula/bounds.py)
    **{f"curriculum.stages.*.{k}": Range(*r) for k, r in STAGE_RANGES.items()},
    **{f"curriculum.stages.*.schedule.*.{k}": Range(*r) for k, r in PHASE_RANGES.items()},
    **{f"curriculum.stages.*.schedule.*.cycle.*.{k}": Range(*r) for k, r in SLOT_RANGES.items()},
    **{f"curriculum.stages.*.until.*.{k}": Range(*r) for k, r in PREDICATE_RANGES.items()},
    "curriculum.stages.*.until.*.value": Range(),
    # cluster, logging, scale
    "cluster.num_cpus": COUNT, "cluster.start_timeout_s": gt(0), "cluster.max_restarts": NONNEG,
    "cluster.placement_timeout_s": gt(0), "logging.print_every": NONNEG,
    "logging.table_every": NONNEG, "logging.table_rows": COUNT, "cluster.metrics_export_port": Range(0, 65535),
    "scale.max_stage_steps": NONNEG, "scale.max_prompts": NONNEG, "scale.max_sft_batch": NONNEG,
    "scale.max_rollout_n": NONNEG,
}


_UNIONS = (typing.Union, types.UnionType)  # Optional[X] and X | None


def _hints(t: type) -> dict[str, Any]:
    return typing.get_type_hints(t)


def _inner(h: Any) -> tuple[str, Any]:
    """('dc', T) for a dataclass (optional or not), ('map', T) / ('list', T) for containers of one."""
    args = [a for a in typing.get_args(h) if a is not type(None)]
    origin = typing.get_origin(h)
    if dataclasses.is_dataclass(h):
        return "dc", h
    if origin in _UNIONS and len(args) == 1:
        return _inner(args[0])
    if origin is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
        return "map", args[1]
    if origin is list and args and dataclasses.is_dataclass(args[0]):
        return "list", args[0]
    return "leaf", h


def check_keys(node: Any, schema: type, prefix: str = "") -> None:
    """Refuse a key `node` (a DictConfig or dict) holds that `schema` (a dataclass) does not declare."""
    hints = _hints(schema)
    for key in list(node.keys()):
        full = f"{prefix}{key}"
        if key not in hints:
            close = difflib.get_close_matches(str(key), list(hints), n=1)
            hint = f"; did you mean {prefix}{close[0]}?" if close else ""
            raise ConfigError(f"{full}: unknown key: {schema.__name__} has {', '.join(sorted(hints))}{hint}")
        kind, inner = _inner(hints[key])
        value = node[key]
        if value is None or isinstance(value, str):  # null, or an interpolation / missing marker
            continue
        if kind == "dc":
            check_keys(value, inner, f"{full}.")
        elif kind == "map":
            for k in value:
                check_keys(value[k], inner, f"{full}.{k}.")
        elif kind == "list":
            for i, item in enumerate(value):
                check_keys(item, inner, f"{full}.{i}.")


def numeric_fields(schema: type, prefix: str = "") -> dict[str, type]:
    """Every int / float field of `schema`, as `RANGES` keys (containers as `*`) -> int or float."""
    out: dict[str, type] = {}
    for name, h in _hints(schema).items():
        kind, inner = _inner(h)
        items = [a for a in typing.get_args(h) if a is not Ellipsis]
        if kind == "dc":
            out |= numeric_fields(inner, f"{prefix}{name}.")
        elif kind in ("map", "list"):
            out |= numeric_fields(inner, f"{prefix}{name}.*.")
        elif _number(h):
            out[f"{prefix}{name}"] = _number(h)
        elif typing.get_origin(h) in (list, tuple) and items and all(_number(a) for a in items):
            out[f"{prefix}{name}.*"] = _number(items[0])
    return out


def _number(h: Any) -> type | None:
    args = [a for a in typing.get_args(h) if a is not type(None)]
    if typing.get_origin(h) in _UNIONS and len(args) == 1:
        h = args[0]
    return h if h in (int, float) else None


def check_ranges(obj: Any, prefix: str = "", pattern: str = "") -> None:
    """Every number of `obj` (a validated dataclass) finite and inside its `RANGES` entry."""
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        full, pat = f"{prefix}{f.name}", f"{pattern}{f.name}"
        if dataclasses.is_dataclass(v):
            check_ranges(v, f"{full}.", f"{pat}.")
        elif isinstance(v, dict):
            for k, item in v.items():
                if dataclasses.is_dataclass(item):
                    check_ranges(item, f"{full}.{k}.", f"{pat}.*.")
        elif isinstance(v, (list, tuple)):
            for i, item in enumerate(v):
                if dataclasses.is_dataclass(item):
                    check_ranges(item, f"{full}.{i}.", f"{pat}.*.")
                else:
                    _check_number(item, f"{full}.{i}", f"{pat}.*")
        else:
            _check_number(v, full, pat)


def check_section(obj: Any, key: str) -> None:
    """`check_ranges` of one config section (`key`: its place, as `learner.lora`), from its own
    `__post_init__`: a section built directly (a script, a test) meets the same `RANGES` as a composed run,
    and no section states a range of its own."""
    check_ranges(obj, f"{key}.", f"{key}.")


def _check_number(v: Any, key: str, pattern: str) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return
    if isinstance(v, float) and not math.isfinite(v):
        raise ConfigError(f"{key}: must be a finite number, got {v}")
    r = RANGES.get(pattern)
    if r is not None and not r.holds(v):
        raise ConfigError(f"{key}: {v} is out of range {r}")
