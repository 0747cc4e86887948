"""Hydra composition of every experiment, and errors for bad configs before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException

from parallax.contract.config import ConfigError, ParallaxConfig, register_configs, validate

CONF = Path(__file__).resolve().parents[2] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
PAPER = sorted(f"paper/{p.stem}" for p in (CONF / "experiment" / "paper").glob("*.yaml"))
register_configs()


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=[*overrides, "run_dir=/tmp/x"])


def test_default_composes_to_typed_config():
    cfg = validate(_compose())
    assert isinstance(cfg, ParallaxConfig)
    assert cfg.rollout.engine == "hf" and cfg.learner.zero_stage == 1
    assert (cfg.learner.clip_ratio_low, cfg.learner.clip_ratio_high) == (0.2, 0.28)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes(name):
    cfg = validate(_compose(f"+experiment={name}"))
    assert cfg.trainer.prompts_per_step >= 1


@pytest.mark.parametrize("name", PAPER)
def test_every_paper_experiment_composes(name):
    cfg = validate(_compose(f"+experiment={name}"))
    assert cfg.rollout.engine == "vllm" and cfg.model.path is not None
    if cfg.rollout.executor.mode == "executed":  # on vLLM: the request executor, scored exactly
        assert cfg.rollout.dispatch == "requests" and cfg.learner.layout in ("structured", "threadweaver")


def test_unknown_experiment_is_reported():
    with pytest.raises(MissingConfigException, match="experiment/nope"):
        _compose("+experiment=nope")


def test_unknown_key_is_reported():
    with pytest.raises(ConfigCompositionException, match="learner.foo") as e:
        _compose("learner.foo=1")
    assert "not in 'LearnerConfig'" in str(e.value.__cause__)


@pytest.mark.parametrize("override,key", [
    ("trainer.prompts_per_step=-4", "trainer.prompts_per_step"),
    ("learner.clip_ratio_high=1.5", "learner.clip_ratio_high"),
    ("learner.zero_stage=5", "learner.zero_stage"),
    ("rollout.temperature=0", "rollout.temperature"),
    ("logging.wandb_mode=cloud", "logging.wandb_mode"),
    ("data.difficulty=8", "data.difficulty"),
    ("data.difficulty=[1,0]", "data.difficulty"),
    ("data.difficulty=[]", "data.difficulty"),
    ("learner.adam_eps=0", "learner.adam_eps"),
    ("data.teacher_error=1.0", "data.teacher_error"),
    ("data.teacher_no_answer=-0.1", "data.teacher_no_answer"),
    ("data.teacher_no_answer=1.0", "data.teacher_no_answer"),
    ("data.teacher_serial=1.0", "data.teacher_serial"),
    ("logging.print_every=-1", "logging.print_every"),
])
def test_invalid_values_name_their_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(_compose(override))


def test_difficulty_mix_reaches_the_problems():
    from parallax.trainingdata.streams import load_problems

    cfg = validate(_compose("data.difficulty=[1,2]", "data.n_train=200", "data.n_test=20"))
    train, test = load_problems(cfg.data)
    assert {p.difficulty for p in train} == {1, 2} and {p.difficulty for p in test} <= {1, 2}
    assert validate(_compose("data.difficulty=3")).data.difficulty == 3


def test_teacher_no_answer_reaches_the_train_traces_only():
    from parallax.trainingdata.streams import load_problems

    cfg = validate(_compose("data.teacher_no_answer=0.5", "data.n_train=400", "data.n_test=40"))
    train, test = load_problems(cfg.data)
    dropped = [p for p in train if p.teacher_no_answer]
    assert 150 < len(dropped) < 250 and not any(p.teacher_no_answer for p in test)
    assert all(" #### " not in t for p in dropped for t in p.traces.values())


def test_teacher_serial_reaches_the_train_traces_only():
    from parallax.trainingdata.streams import load_problems

    cfg = validate(_compose("data.teacher_serial=0.5", "data.n_train=400", "data.n_test=40"))
    train, test = load_problems(cfg.data)
    serial = [p for p in train if p.teacher_serial]
    assert 150 < len(serial) < 250 and not any(p.teacher_serial for p in test)
    assert all(p.traces["parallel_r1"] == p.traces["serial"] for p in serial)
    assert all("<Parallel>" in p.traces["parallel_r1"] for p in train if not p.teacher_serial)


def test_batch_must_split_across_learners():
    with pytest.raises(ConfigError, match="learner.num_actors"):
        validate(_compose("learner.num_actors=3", "trainer.prompts_per_step=4", "rollout.n=4"))


def test_wrong_type_is_reported():
    with pytest.raises((ConfigCompositionException, ConfigError)):
        validate(_compose("rollout.n=many"))


def test_cli_reports_config_error_before_ray(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "orchestrator", "learner.clip_ratio_high=2",
                          f"hydra.run.dir={tmp_path}"], capture_output=True, text=True, timeout=120,
                         cwd=CONF.parent, check=False)
    assert out.returncode == 2
    assert "learner.clip_ratio_high" in out.stderr
    assert "ray" not in out.stderr.lower()  # failed before any Ray start


@pytest.mark.parametrize("overrides,key", [
    # the KV executor forks a transformers cache: not on vLLM
    (["rollout=vllm", "rollout.executor.mode=sequential", "rollout.executor.dispatch=kv"], "rollout.executor.dispatch"),
    # executed branches are never one causal row, whatever the dispatch
    (["rollout=vllm", "rollout.executor.mode=executed"], "learner.layout"),
    (["rollout.executor.dispatch=fast"], "rollout.executor.dispatch"),
])
def test_executor_mode_and_grammar_must_fit_the_engine(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(_compose(*overrides))


def test_executor_dispatch_resolves_per_engine():
    vllm = validate(_compose("rollout=vllm", "rollout.executor.mode=executed", "learner.layout=structured"))
    assert vllm.rollout.dispatch == "requests"  # auto: vLLM takes whole requests
    assert validate(_compose("rollout.executor.mode=executed", "learner.layout=structured")).rollout.dispatch == "kv"
    hf = validate(_compose("rollout.executor.mode=executed", "rollout.executor.dispatch=requests",
                           "learner.layout=threadweaver"))
    assert hf.rollout.dispatch == "requests"  # the CPU stand-in for the vLLM path
    seq = validate(_compose("rollout=vllm", "rollout.executor.mode=sequential"))
    assert (seq.rollout.dispatch, seq.learner.layout) == ("requests", "causal")  # one request: causal is exact


def test_engine_auto_is_vllm_where_installed_and_hf_elsewhere(monkeypatch):
    import importlib.util

    from parallax.contract.config import RolloutConfig

    real = importlib.util.find_spec
    assert RolloutConfig(engine="auto").engine == ("vllm" if real("vllm") is not None else "hf")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    assert validate(_compose("+experiment=smollm2_parallel")).rollout.engine == "hf"  # no vLLM: the same run on hf


def test_grammar_is_reachable_on_both_engines_in_every_mode():
    for engine in ("hf", "vllm"):
        for mode in ("off", "sequential", "executed"):
            # vLLM's logprobs come after its grammar mask: the learner scores the behaviour policy itself
            cfg = validate(_compose(f"rollout={engine}", f"rollout.executor.mode={mode}",
                                    "rollout.executor.grammar=true", "learner.layout=structured",
                                    f"learner.recompute_old_logprobs={engine == 'vllm'}"))
            assert (cfg.rollout.executor.mode, cfg.rollout.executor.grammar) == (mode, True)


def test_format_options_compose_from_the_command_line():
    from hydra.errors import ConfigCompositionException

    cfg = validate(_compose("data.format_options.summary_placement=inside",
                            "data.format_options.summary_accept=[inside]"))
    assert (cfg.data.spec.summary_placement, cfg.data.spec.summary_accept) == ("inside", ("inside",))
    assert validate(_compose()).data.spec.summary_placement == "after"  # the public convention
    with pytest.raises(ConfigCompositionException, match="data.format_options.outline"):
        _compose("data.format_options.outline=x")
    with pytest.raises(ValueError, match="data.format_options: summary_accept"):  # placement not read back
        validate(_compose("data.format_options.summary_accept=[inside]"))


@pytest.mark.parametrize("name", ["paper/parallel_r1_unseen_s1", "paper/parallel_r1_unseen_s2",
                                  "paper/parallel_r1_scaffold"])
def test_paper_unseen_configs_train_the_structured_model(name):
    cfg = validate(_compose(f"+experiment={name}"))
    assert (cfg.learner.layout, cfg.rollout.executor.mode) == ("structured", "executed")
    seen = validate(_compose("+experiment=paper/parallel_r1_seen"))
    assert (seen.learner.layout, seen.rollout.executor.mode) == ("causal", "off")  # Seen: the causal model


def test_mini_scale_shrinks_a_paper_experiment_and_keeps_its_shape():
    paper = validate(_compose("+experiment=paper/parallel_r1_scaffold"))
    mini = validate(_compose("+experiment=paper/parallel_r1_scaffold", "+scale=mini"))
    assert (mini.model.package, mini.rollout.engine, mini.learner.layout) == ("smollm2_135m", "hf", "structured")
    p, m = paper.curriculum.stages["dapo"], mini.curriculum.stages["dapo"]
    assert (p.steps, m.steps) == (300, 2) and (p.batch_size, m.batch_size) == (512, 2)
    assert (p.rollout_n, m.rollout_n) == (8, 2)
    # the scaffold switch and the S2 window shrink by the same factor (at least 1 step each)
    assert [ph.steps for ph in p.schedule] == [200, None] and [ph.steps for ph in m.schedule] == [1, None]
    assert [[c.reward for c in ph.cycle] for ph in m.schedule] == [[c.reward for c in ph.cycle] for ph in p.schedule]
    assert [c.steps for c in m.schedule[0].cycle] == [1, 1]
    assert mini.curriculum.stages["sft"].lr == paper.curriculum.stages["sft"].lr == 1.0e-5  # the paper's own


def test_scale_needs_explicit_stages():
    from parallax.contract.config import ConfigError, CurriculumConfig, ParallaxConfig, ScaleConfig

    with pytest.raises(ConfigError, match="scale: a scaled run needs the curriculum's stages"):
        ParallaxConfig(curriculum=CurriculumConfig(name="sft_then_rl", stages={}), scale=ScaleConfig(max_stage_steps=2))


@pytest.mark.parametrize("overrides,key,why", [
    # GRPO of a group of one: the advantage is the raw reward, REINFORCE with no baseline (measured: the
    # run trained on rewarded steps only, pg_loss -0.093 at step 21, no warning)
    (["rollout.n=1"], "rollout.n", "REINFORCE with no baseline"),
    (["+experiment=paper/parallel_r1_unseen_s2", "curriculum.stages.dapo.rollout_n=1"],
     "curriculum.stages.dapo.rollout_n", "group of one"),
    # more PPO mini-batches than trajectories per learner: some would be empty
    (["learner.ppo_mini_batches=9", "trainer.prompts_per_step=4", "rollout.n=2"], "learner.ppo_mini_batches",
     "8 trajectories per learner"),
    (["learner.ppo_mini_batches=5", "trainer.prompts_per_step=4", "rollout.n=2", "learner.num_actors=2"],
     "learner.ppo_mini_batches", "4 trajectories per learner"),
])
def test_a_setting_that_changes_the_algorithm_is_refused(overrides, key, why):
    with pytest.raises(ConfigError, match=key) as e:
        validate(_compose(*overrides))
    assert why in str(e.value)


def test_the_smallest_settings_that_keep_the_algorithm_pass():
    cfg = validate(_compose("rollout.n=2", "learner.ppo_mini_batches=8", "trainer.prompts_per_step=4"))
    assert (cfg.rollout.n, cfg.learner.ppo_mini_batches) == (2, 8)
