"""Every experiment composes at both scales; the paper scale carries the papers' numbers."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from parallax.contract.config import ConfigError, register_configs, validate

CONF = Path(__file__).resolve().parents[2] / "conf"
PAPER = sorted(p.stem for p in (CONF / "experiment" / "paper").glob("*.yaml"))
# experiments on a real pretrained model and real data (the others: the tiny model on the toy world)
REAL = {"smollm2_gsm8k": "hf", "smollm2_study": "vllm"}  # real-model experiments -> rollout engine
# a real model on the toy world (tests/e2e/test_real_model.py runs smollm2_parallel's cold start)
TOY_REAL = {"smollm2_parallel", "smollm2_parason"}
CPU = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml") if p.stem not in REAL.keys() | TOY_REAL)
ISSUE_EXPERIMENTS = ["grpo_baseline", "parallel_r1_scaffold", "parallel_r1_seen", "parallel_r1_seen_no_stage1",
                     "parallel_r1_unseen_s1", "parallel_r1_unseen_s2", "parason_pa_grpo", "parason_sft"]
register_configs()

SFT_PAPER = {"batch_size": 128, "lr": 1e-5, "weight_decay": 0.01, "warmup_ratio": 0.1, "lr_schedule": "cosine"}
GSM8K_RL = {"batch_size": 1024, "rollout_n": 5, "lr": 1e-6, "warmup_ratio": 0.0, "lr_schedule": "constant"}
DAPO_RL = {"batch_size": 512, "rollout_n": 8, "lr": 1e-6, "warmup_ratio": 0.0, "lr_schedule": "constant"}
S2 = [{"steps": None, "cycle": [{"reward": "accuracy", "params": {}, "steps": 8},
                                {"reward": "tiered", "params": {}, "steps": 2}]}]
SCAFFOLD = [{**S2[0], "steps": 200}, {"steps": None, "cycle": [{"reward": "accuracy", "params": {}, "steps": 1}]}]

# experiment -> [(stage, steps, reward, schedule, data, settings)], the papers' numbers
PAPER_NUMBERS = {
    "parallel_r1_seen": [("sft", 58, None, [], "parallel_gsm8k", SFT_PAPER),
                         ("gsm8k", 35, "parallel_acc", [], "gsm8k_train", GSM8K_RL),
                         ("dapo", 300, "accuracy", [], "dapo_math_17k", DAPO_RL)],
    "parallel_r1_seen_no_stage1": [("sft", 58, None, [], "parallel_gsm8k", SFT_PAPER),
                                   ("gsm8k", 0, "parallel_acc", [], "gsm8k_train", GSM8K_RL),
                                   ("dapo", 300, "accuracy", [], "dapo_math_17k", DAPO_RL)],
    "parallel_r1_unseen_s1": [("sft", 230, None, [], "parallel_gsm8k", SFT_PAPER),
                              ("dapo", 300, "s1", [], "dapo_math_17k", DAPO_RL)],
    "parallel_r1_unseen_s2": [("sft", 230, None, [], "parallel_gsm8k", SFT_PAPER),
                              ("dapo", 300, None, S2, "dapo_math_17k", DAPO_RL)],
    "parallel_r1_scaffold": [("sft", 230, None, [], "parallel_gsm8k", SFT_PAPER),
                             ("dapo", 300, None, SCAFFOLD, "dapo_math_17k", DAPO_RL)],
    "grpo_baseline": [("sft", 0, None, [], None, {}), ("dapo", 300, "accuracy", [], "dapo_math_17k", DAPO_RL)],
    "parason_sft": [("sft", 60, None, [], "parason_traces", SFT_PAPER), ("rl", 0, "accuracy", [], None, {})],
    "parason_pa_grpo": [("sft", 60, None, [], "parason_traces", SFT_PAPER),
                        ("rl", 300, "pa_grpo", [], "dapo_math_17k", DAPO_RL)],
}


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return validate(compose("config", overrides=[*overrides, "run_dir=/tmp/x"]))


def test_every_issue_experiment_exists_at_both_scales():
    assert set(ISSUE_EXPERIMENTS) <= set(CPU) and set(ISSUE_EXPERIMENTS) == set(PAPER)


@pytest.mark.parametrize("name", PAPER)
def test_paper_scale_carries_the_papers_numbers(name):
    cfg = _compose(f"+experiment=paper/{name}")
    cur = cfg.curriculum.build(cfg.reward)
    got = [(s.name, s.steps, s.reward, s.to_dict()["schedule"], s.data,
            {k: getattr(s, k) for k in PAPER_NUMBERS[name][i][5]}) for i, s in enumerate(cur.stages)]
    assert got == PAPER_NUMBERS[name]
    assert cfg.rollout.engine == "vllm" and cfg.model.dtype == "bfloat16"
    assert (cfg.learner.clip_ratio_low, cfg.learner.clip_ratio_high) == (0.2, 0.28)


@pytest.mark.parametrize("name", CPU)
def test_cpu_scale_composes_and_is_small(name):
    cfg = _compose(f"+experiment={name}")
    cur = cfg.curriculum.build(cfg.reward)
    assert cfg.model.path is None and cfg.rollout.engine == "hf"  # the tiny model, on CPU
    # Small enough for a CPU: RL steps (~3 s each) stay few; an SFT warm start (~0.4 s a step of 64) may
    # run to 1,200 steps: the tiny model needs ~600 for the arithmetic, and the Parason worlds 1,200 for
    # their forks to be as accurate as their serial answers (docs/results.md, "Parason's effect").
    assert sum(s.steps for s in cur.stages if s.kind == "rl") <= 120
    assert all(s.steps <= 1200 for s in cur.stages if s.kind == "sft")
    assert all(s.data is None for s in cur.stages)  # the run's toy data
    if name in PAPER:  # same stages and rewards as the paper, only the numbers shrink
        paper = _compose(f"+experiment=paper/{name}")
        paper_cur = paper.curriculum.build(paper.reward)
        assert [(s.name, s.kind, s.reward) for s in cur.stages] == \
            [(s.name, s.kind, s.reward) for s in paper_cur.stages]
        assert [s.reward_names() for s in cur.stages] == [s.reward_names() for s in paper_cur.stages]


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_model_experiments_compose_on_cpu(name):
    cfg = _compose(f"+experiment={name}")
    cur = cfg.curriculum.build(cfg.reward)
    assert cfg.model.package == "smollm2_135m" and cfg.rollout.engine == REAL[name]
    if REAL[name] == "vllm":  # vLLM's CPU build: eager, a CPU KV cache
        assert cfg.rollout.vllm.enforce_eager and cfg.rollout.vllm.cpu_kvcache_gib >= 1
    assert [s.data for s in cur.stages] == ["parallel_gsm8k", "gsm8k_train"]  # real data in every stage
    assert cfg.learner.sft_lr <= 1e-4 and cfg.learner.lr <= 1e-4  # rates a pretrained model survives


def test_smollm2_parallel_is_parallel_r1s_three_stages_with_the_real_model():
    cfg = _compose("+experiment=smollm2_parallel")
    cur = cfg.curriculum.build(cfg.reward)
    assert cfg.model.package == "smollm2_135m" and cfg.rollout.engine == ("vllm" if find_spec("vllm") else "hf")
    assert [(s.kind, s.reward) for s in cur.stages] == [("sft", None), ("rl", "parallel_acc"), ("rl", "accuracy")]
    assert all(s.steps > 0 and s.data is None for s in cur.stages)  # the run's data: the toy world
    assert cfg.learner.sft_tag_lr_mult > 1 and cfg.learner.sft_lr <= 1e-4 and cfg.learner.lr <= 1e-4
    assert cfg.trainer.eval_init and cfg.trainer.eval_after_stage  # held out before training and after each stage
    # the cheap settings its three seeds were measured with: bf16 engines where native, one ZeRO-0 learner
    assert cfg.rollout.dtype == "auto" and cfg.learner.zero_stage == 0 and cfg.learner.num_actors == 1
    assert cfg.learner.recompute_old_logprobs  # bf16 engines' logprobs are not the learner's
    # two solved examples first and T=0.7 (0.05-0.09 before training; 0.000 zero-shot, 0.02-0.03 at T=1.0),
    # half the teacher's traces unanswered
    assert cfg.data.fewshot == 2 and cfg.data.teacher_no_answer == 0.5 and cfg.rollout.temperature == 0.7


def test_smollm2_parason_is_pa_grpo_on_the_toy_world_with_the_real_model():
    cfg = _compose("+experiment=smollm2_parason")
    cur = cfg.curriculum.build(cfg.reward)
    assert cfg.model.package == "smollm2_135m" and cfg.data.trace == "parason"
    assert [(s.kind, s.reward) for s in cur.stages] == [("sft", None), ("rl", "pa_grpo")]
    assert (cfg.reward.beta_sub, cfg.reward.beta_trial) == (0.05, 0.1)
    assert 0 < cfg.data.teacher_serial < 1  # SFT leaves a choice between forking and a serial solve
    assert all(s.steps > 0 and s.data is None for s in cur.stages)
    assert cfg.learner.sft_tag_lr_mult > 1 and cfg.learner.sft_lr <= 1e-4 and cfg.learner.lr <= 1e-4
    # a Parason toy trace is <= ~85 SmolLM2 tokens: the budget holds a whole one
    assert cfg.rollout.max_new_tokens >= 96


def test_parason_reward_numbers_and_sweep_overrides():
    cfg = _compose("+experiment=paper/parason_pa_grpo")
    assert cfg.reward.params == {"alpha": 0.0, "beta_sub": 0.05, "beta_trial": 0.1, "rho": 0.0, "rho_clip": 0.2}
    cfg = _compose("+experiment=parason_pa_grpo", "reward.beta_sub=0.025", "reward.beta_trial=0.05")
    rl = cfg.curriculum.build(cfg.reward).stages[1]
    assert (rl.reward, rl.reward_params["beta_sub"], rl.reward_params["beta_trial"]) == ("pa_grpo", 0.025, 0.05)


def test_scaffold_switch_moves_from_the_command_line():
    cfg = _compose("+experiment=paper/parallel_r1_scaffold", "curriculum.stages.dapo.schedule.0.steps=100")
    dapo = cfg.curriculum.build(cfg.reward).stages[1]
    assert [dapo.at(i).reward for i in (98, 99, 100, 108)] == ["tiered", "tiered", "accuracy", "accuracy"]


@pytest.mark.parametrize("overrides,key", [
    (["+experiment=parallel_r1_seen", "curriculum.stages.gsm8k.reward=nope"], "curriculum.stages.gsm8k.reward"),
    (["+experiment=parallel_r1_seen", "curriculum.stages.sft.kind=ppo"], "kind must be"),
    (["+experiment=parallel_r1_seen", "curriculum.stages.dapo.lr=-1"], "lr must be > 0"),
    (["+experiment=parallel_r1_seen", "+curriculum.stages.gsm8k.reward_params.hit=oops"], "hit"),
    (["+experiment=parallel_r1_unseen_s2", "curriculum.stages.dapo.reward=accuracy"], "either reward or schedule"),
    (["reward.beta_sub=0.1"], "beta_sub"),  # the default reward (accuracy) has no beta_sub
    (["reward.name=pa_grpo", "reward.beta_sub=0.1", "+reward.params.beta_sub=0.2"], "reward.beta_sub"),
])
def test_bad_curriculum_or_reward_config_names_the_problem(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        _compose(*overrides)


def test_an_unknown_curriculum_without_stages_names_the_key():
    from parallax.contract.config import CurriculumConfig

    with pytest.raises(ConfigError, match=r"curriculum\.name"):
        CurriculumConfig(name="nope")


@pytest.mark.parametrize("key", ["trainer.rl_steps=50", "trainer.sft_steps=0"])
def test_step_budgets_have_one_home(key):
    """Step budgets live in curriculum.stages only: the old trainer knobs are refused by name."""
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match=key.split("=")[0].split(".")[1]):
        _compose(key)
    cfg = _compose("curriculum.stages.acc_rl.steps=50")  # the README's override
    assert [s.steps for s in cfg.curriculum.build(cfg.reward).stages] == [600, 10, 50]


@pytest.mark.parametrize("name", PAPER)
def test_paper_experiments_set_each_value_at_one_level(name):
    """A stage's batch size and group size are its own: the experiment does not repeat them run-wide."""
    import yaml

    raw = yaml.safe_load((CONF / "experiment" / "paper" / f"{name}.yaml").read_text())
    stages = raw.get("curriculum", {}).get("stages", {}).values()
    trainer, rollout = raw.get("trainer") or {}, raw.get("rollout") or {}
    if any("batch_size" in s for s in stages if s.get("kind", "rl") == "rl" or "rollout_n" in s):
        assert "prompts_per_step" not in trainer
    if any("rollout_n" in s for s in stages):
        assert "n" not in rollout
    assert "sft_batch_size" not in trainer or not any("batch_size" in s for s in stages)


def _leaves(d: dict, prefix: str = ""):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


@pytest.mark.parametrize("name", CPU + [f"paper/{p}" for p in PAPER])
def test_an_experiment_holds_only_what_differs_from_its_defaults(name):
    """Every value an experiment file sets changes the composed config: nothing restates a default."""
    import yaml
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    raw = yaml.safe_load((CONF / "experiment" / f"{name}.yaml").read_text())
    # an entry that names another experiment (experiment/reasoning_rl_trials.yaml: `- reasoning_rl`) is the base
    groups = [f"+experiment={d}" if isinstance(d, str) else f"{k.removeprefix('override /')}={v}"
              for d in raw.pop("defaults", []) for k, v in ([(d, None)] if isinstance(d, str) else d.items())]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        base = OmegaConf.to_container(compose("config", overrides=[*groups, "run_dir=/tmp/x"]), resolve=False)
    same = []
    for key, value in _leaves(raw):
        node = base
        for part in key.split("."):
            node = node.get(part, KeyError) if isinstance(node, dict) else KeyError
        if node is not KeyError and node == value:
            same.append(f"{key}={value!r}")
    assert not same, f"experiment/{name}.yaml restates defaults: {same}"
