"""The config check has no gaps: every numeric field has a range, every field refuses a bad value
naming its key, and a `+key` the schema does not declare is refused (parallax/contract/ranges.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from parallax.contract.config import ConfigError, ParallaxConfig, register_configs, validate
from parallax.contract.ranges import RANGES, Range, check_keys, numeric_fields

ROOT = Path(__file__).resolve().parents[2]
register_configs()
STAGE = "sft"  # a stage of the default curriculum (parallel_r1_toy)


def _validate(*overrides: str):
    if any(o.startswith(("reward.alpha", "reward.beta", "reward.rho")) for o in overrides):
        overrides = ("reward.name=pa_grpo", *overrides)  # the shortcuts are PA-GRPO's parameters
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return validate(compose("config", overrides=[*overrides, "run_dir=/tmp/x"]))


def test_every_numeric_field_has_a_range_and_no_range_is_stale():
    fields = set(numeric_fields(ParallaxConfig))
    assert fields - set(RANGES) == set(), "numeric config fields without a range in parallax/contract/ranges.py"
    assert set(RANGES) - fields == set(), "ranges for fields the schema no longer has"


def _override(pattern: str, value) -> str:
    """The Hydra override that puts `value` where `pattern` points (containers: their first item)."""
    v = repr(value) if not isinstance(value, float) else ("nan" if math.isnan(value) else repr(value))
    if pattern == "learner.betas.*":
        return f"learner.betas=[{v},0.999]"
    if pattern == "trainer.eval_budgets.*":
        return f"trainer.eval_budgets=[{v}]"
    if pattern == "curriculum.stages.*.schedule.*.cycle.*.steps":
        return f"curriculum.stages.{STAGE}.schedule=[{{cycle:[{{reward:accuracy,steps:{v}}}]}}]"
    if pattern.startswith("curriculum.stages.*.schedule.*."):
        return f"curriculum.stages.{STAGE}.schedule=[{{steps:{v},cycle:[{{reward:accuracy}}]}}]"
    if pattern.startswith("curriculum.stages.*.until.*."):
        field = pattern.rsplit(".", 1)[1]
        item = {"metric": "eval/acc", "value": 0.5, "min_steps": 0, "patience": 1} | {field: v}
        return f"curriculum.stages.{STAGE}.until=[{{{','.join(f'{k}:{x}' for k, x in item.items())}}}]"
    key = pattern.replace("curriculum.stages.*.", f"curriculum.stages.{STAGE}.")
    return f"{'+' if key.startswith(('curriculum.stages', 'reward.')) else ''}{key}={v}"


def _named(pattern: str) -> str:
    """How the error names the key (the real stage / first item instead of `*`)."""
    return (pattern.replace("curriculum.stages.*", f"curriculum.stages.{STAGE}").replace(".*.", ".0.")
            .removesuffix(".*") + (".0" if pattern.endswith(".*") else ""))


BOUNDED = sorted(k for k, r in RANGES.items() if r != Range())


@pytest.mark.parametrize("pattern", BOUNDED)
def test_every_numeric_field_refuses_an_out_of_range_value(pattern):
    override = _override(pattern, RANGES[pattern].bad())
    override = override.replace("+curriculum", "curriculum").replace("+reward.", "reward.")
    with pytest.raises(ConfigError) as e:
        _validate(override)
    msg = str(e.value)
    # a stage's own checks name the stage ("curriculum.stages: stage 'sft': lr ..."); the rest the full key
    assert _named(pattern) in msg or (pattern.startswith("curriculum.stages.*.") and f"'{STAGE}'" in msg
                                      and pattern.rsplit(".", 1)[1] in msg), msg


FLOATS = sorted(k for k, t in numeric_fields(ParallaxConfig).items() if t is float)


@pytest.mark.parametrize("pattern", FLOATS)
def test_floats_refuse_nan_and_inf(pattern):
    for bad in (float("nan"), float("inf")):
        override = _override(pattern, bad).replace("+curriculum", "curriculum").replace("+reward.", "reward.")
        with pytest.raises(ConfigError) as e:
            _validate(override)
        assert _named(pattern) in str(e.value) or f"'{STAGE}'" in str(e.value), str(e.value)


@pytest.mark.parametrize("override,key", [
    ("+learner.foo=1", "learner.foo"), ("+rollout.vllm.kv_gib=2", "rollout.vllm.kv_gib"),
    ("+rollout.executor.modes=executed", "rollout.executor.modes"), (f"+curriculum.stages.{STAGE}.lrr=1",
                                                                     f"curriculum.stages.{STAGE}.lrr"),
    ("+trainer.eval_limt=3", "trainer.eval_limt")])
def test_unknown_plus_keys_are_refused(override, key):
    with pytest.raises(ConfigError, match=f"{key}: unknown key"):
        _validate(override)


def test_unknown_key_error_suggests_the_close_one():
    with pytest.raises(ConfigError, match=r"did you mean trainer\.eval_limit\?"):
        _validate("+trainer.eval_limt=3")
    with pytest.raises(ConfigError, match="unknown key"):
        check_keys({"learner": {"lr": 1.0, "zz": 2}}, ParallaxConfig)


def test_free_form_reward_params_are_the_rewards_to_check():
    cfg = _validate("reward.name=pa_grpo", "+reward.params.beta_sub=0.2")
    assert cfg.reward.params["beta_sub"] == 0.2


def test_model_path_that_does_not_exist_is_a_plain_error(tmp_path):
    with pytest.raises(ConfigError, match="model.path: no such directory: /nonexistent"):
        _validate("model.path=/nonexistent")
    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(ConfigError, match="model.path: not a directory"):
        _validate(f"model.path={f}")
    assert _validate("model.path=Qwen/Qwen3-4B-Base").model.path == "Qwen/Qwen3-4B-Base"  # a hub name


def test_the_cli_refuses_before_ray_starts(refused):
    """The issue's probes, through the real entry point (in-process: tests/conftest.py `refused`): exit 2,
    the key named, no Ray."""
    for override, key in [("+learner.foo=1", "learner.foo"), ("learner.ppo_epochs=0", "learner.ppo_epochs"),
                          ("rollout.temperature=inf", "rollout.temperature"),
                          ("model.path=/nonexistent", "model.path")]:
        err = refused(override)
        assert f"parallax: config error: {key}" in err, err[-2000:]


def test_learner_autocast_is_off_bf16_or_auto():
    assert _validate("learner.autocast=bf16").learner.autocast == "bf16"
    assert _validate("learner.autocast=auto").learner.autocast == "auto"
    with pytest.raises(ConfigError, match="learner.autocast: must be off, bf16 or auto, got 'fp16'"):
        _validate("learner.autocast=fp16")


def test_learner_attn_implementation_is_auto_sdpa_or_flex_attention():
    assert _validate().learner.attn_implementation == "auto"
    assert _validate("learner.attn_implementation=flex_attention").learner.attn_implementation == "flex_attention"
    with pytest.raises(ConfigError,
                       match="learner.attn_implementation: must be auto, sdpa or flex_attention, got 'eager'"):
        _validate("learner.attn_implementation=eager")


def test_a_tensor_parallel_vllm_engine_reserves_its_gpus_in_its_actors_bundle():
    tp2 = ("rollout=vllm", "rollout.vllm.tensor_parallel_size=2")
    assert _validate(*tp2, "rollout.num_gpus=2").rollout.num_gpus == 2
    assert _validate("rollout=vllm", "rollout.num_gpus=0.5").rollout.num_gpus == 0.5  # TP 1: a shared GPU is fine
    assert _validate(*tp2, "rollout.num_gpus=0").rollout.num_gpus == 0  # the CPU build: no GPU bundle at all
    with pytest.raises(ConfigError, match="rollout.num_gpus: 1 GPUs per rollout actor, but "
                                          "rollout.vllm.tensor_parallel_size=2 .* set rollout.num_gpus=2"):
        _validate(*tp2)  # conf/rollout/vllm.yaml reserves 1


def test_auto_autocast_is_bf16_only_where_the_cpu_computes_it_natively():
    from actors.devices import native_bf16

    assert native_bf16("cpu", "flags\t: fpu sse avx2 avx512f avx512_bf16 fma")
    assert native_bf16("cpu", "flags\t: fpu avx2 amx_bf16 amx_tile")
    assert not native_bf16("cpu", "flags\t: fpu sse avx avx2 fma")  # AVX2 only: bf16 is emulated, ~70x slower
    assert not native_bf16("cpu", "")


def test_the_rollout_dtype_is_the_models_unless_set_and_auto_is_bf16_only_where_native():
    from actors.devices import engine_dtype

    bf16_cpu, avx2_cpu = "flags\t: fpu avx512f avx512_bf16", "flags\t: fpu avx2 fma"
    assert engine_dtype(None, "float32", "cpu", bf16_cpu) == "float32"  # null: model.dtype
    assert engine_dtype("auto", "float32", "cpu", bf16_cpu) == "bfloat16"
    assert engine_dtype("auto", "float32", "cpu", avx2_cpu) == "float32"  # emulated bf16: stay in model.dtype
    assert engine_dtype("bfloat16", "float32", "cpu", avx2_cpu) == "bfloat16"  # asked for: given
    assert _validate("rollout.dtype=bfloat16").rollout.dtype == "bfloat16"
    assert _validate().rollout.dtype is None
    with pytest.raises(ConfigError, match="rollout.dtype: unknown dtype 'bf16'; valid: null"):
        _validate("rollout.dtype=bf16")


def test_colocated_engines_sit_on_the_learners_bundles_and_what_cannot_share_is_refused():
    from orchestrator.setup import bundle_specs

    paper = _validate("+experiment=paper/parallel_r1_seen")  # an engine on each of the 8 learner GPUs
    assert paper.rollout.colocate and paper.rollout.num_actors == paper.learner.num_actors == 8
    specs = {b.role: b for b in bundle_specs(paper)}
    assert set(specs) == {"reward", "learner"}  # no bundle of the engines' own: 8 GPUs in all, not 9
    assert specs["learner"].num_cpus == paper.learner.num_cpus + paper.rollout.num_cpus
    assert specs["learner"].num_gpus == 1 and specs["learner"].count == 8
    assert _validate("rollout.colocate=true").rollout.colocate  # the CPU default: one learner, one hf engine
    cases = [
        (("rollout.num_actors=4",), r"rollout.num_actors: 4 engines for 8 learners: .* set rollout.num_actors=8"),
        (("learner.num_gpus=2", "rollout.num_gpus=2"), "learner.num_gpus: 2, but rollout.colocate shares one GPU"),
        (("rollout.num_gpus=0.5",), "rollout.num_gpus: 0.5, but learner.num_gpus=1: .* set rollout.num_gpus=1"),
        (("rollout.vllm.tensor_parallel_size=2", "rollout.num_gpus=0", "learner.num_gpus=0"),
         "rollout.vllm.tensor_parallel_size: must be 1 with rollout.colocate"),
        (("+rollout.resources.gpu_node=1",), "rollout.resources: must be empty with rollout.colocate"),
        (("trainer.max_staleness=1",), "trainer.max_staleness: 1, but colocated engines sleep"),
        (("rollout.sleep_level=3",), "rollout.sleep_level"),
    ]
    for overrides, message in cases:
        with pytest.raises(ConfigError, match=message):
            _validate("+experiment=paper/parallel_r1_seen", *overrides)
