"""Learning oracle: TRL's ``GRPOTrainer`` against a Parallax RL stage, from the same SFT checkpoint.

Where TRL gains and Parallax does not, Parallax has a bug. Given a finished Parallax run of an
SFT -> RL experiment (``+experiment=reasoning_rl``), TRL trains from that run's SFT checkpoint on the same
prompts in the same order (the run's RL stream, rebuilt from its config), with the same reward
(the stage's, in the run's format), group size, prompts per step, steps, learning rate, temperature, clip (0.2 / 0.28),
token-mean loss and no KL. Then the SFT model, Parallax's final model and TRL's final model are
evaluated by one evaluator (``python -m parallax.evaluation checkpoint``: the run's held-out toy problems,
k samples at the run's temperature, one sampling seed for all three).

    python -m orchestrator +experiment=reasoning_rl hydra.run.dir=runs/rr0
    python bench/bench_oracle.py runs/rr0 [--steps N] [--out runs/rr0/oracle]

Prints both training-reward curves side by side (by tenth of the stage) and the held-out table, then
one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _config(run: Path):
    """The run's validated config, composed from its saved Hydra overrides."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from parallax.contract.config import register_configs, validate

    register_configs()
    overrides = OmegaConf.load(run / ".hydra" / "overrides.yaml")
    overrides = [o for o in overrides if not o.startswith("hydra.")]
    with initialize_config_dir(str(ROOT / "conf"), version_base=None):
        raw = compose("config", overrides=[*overrides, f"run_dir={run}"])
    return validate(raw)


def _rl_stream(cfg, model_dir: Path, steps: int):
    """The run's RL stage and its first ``steps`` prompt batches, drawn as the driver draws them."""
    from transformers import AutoTokenizer

    from orchestrator.prepare import batch_size
    from parallax.trainingdata.streams import StageStreams, load_problems

    stage = next(s for s in cfg.curriculum.build(cfg.reward).stages if s.kind == "rl")
    train, _ = load_problems(cfg.data)
    streams = StageStreams(cfg.data, train, AutoTokenizer.from_pretrained(model_dir), cfg.trainer.seed)
    return stage, [streams.next(stage, batch_size(cfg, stage)) for _ in range(steps)]


def run_trl(cfg, stage, batches: list, sft_dir: Path, out_dir: Path) -> list[float]:
    """TRL's GRPO over ``batches`` with the stage's reward; returns each step's share of correct samples."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    import rewards
    from rewards.registry import stage_spec

    spec = stage_spec(stage, cfg.reward, cfg.data.spec)  # the reward and format the Parallax stage scored with
    per_step: list[float] = []

    n = stage.rollout_n or cfg.rollout.n

    def reward(prompts, completions, answer, **_):
        # TRL lays each prompt's n completions side by side: score them as one group (PA-GRPO's z-scores)
        groups = [rewards.score_group(spec.name, completions[i:i + n], answer[i], params=spec.params)
                  for i in range(0, len(completions), n)]
        per_step.append(sum(sum(g.correct) for g in groups) / len(completions))
        return [r for g in groups for r in g.rewards]

    torch.manual_seed(cfg.trainer.seed)
    rows = [{"prompt": p.text, "answer": p.ground_truth} for batch in batches for p in batch]
    args = GRPOConfig(
        output_dir=str(out_dir), use_cpu=True, report_to=[], logging_steps=1, save_strategy="no", disable_tqdm=True,
        seed=cfg.trainer.seed, max_steps=len(batches), per_device_train_batch_size=len(batches[0]) * n,
        num_generations=n, gradient_accumulation_steps=1, num_iterations=1, shuffle_dataset=False, use_vllm=False,
        learning_rate=stage.lr or cfg.learner.lr, lr_scheduler_type="constant", optim="adamw_torch",
        adam_beta1=cfg.learner.betas[0], adam_beta2=cfg.learner.betas[1], adam_epsilon=cfg.learner.adam_eps,
        weight_decay=cfg.learner.weight_decay, max_grad_norm=cfg.learner.grad_clip, beta=0.0,
        epsilon=cfg.learner.clip_ratio_low, epsilon_high=cfg.learner.clip_ratio_high, loss_type="dapo",
        scale_rewards="group", temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
        max_completion_length=cfg.rollout.max_new_tokens,
    )
    model = AutoModelForCausalLM.from_pretrained(sft_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(sft_dir)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tok)
    trainer.train()
    trainer.save_model(str(out_dir / "model"))
    tok.save_pretrained(out_dir / "model")
    return per_step


def evaluate(model: Path, cfg, out: Path, seed: int) -> dict:
    """One evaluator for every model: the run's held-out toy problems, k samples at the run's temperature."""
    import contextlib

    from parallax.evaluation.cli import main as evaluation
    from parallax.toyworld import as_difficulty, difficulty_text

    diff = difficulty_text(as_difficulty(cfg.data.difficulty))
    argv = ["checkpoint", str(model), "--benchmarks", "toyworld", "--toy-n", str(cfg.data.n_test), "--toy-seed",
            str(cfg.data.seed), "--toy-difficulty", str(diff), "--toy-family", cfg.data.family,
            "--k", str(cfg.trainer.eval_samples), "--temperature", str(cfg.rollout.temperature),
            "--max-new-tokens", str(cfg.rollout.max_new_tokens), "--style", "raw", "--engine", "hf",
            "--format", cfg.data.format, "--seed", str(seed), "--out", str(out)]
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        assert evaluation(argv, out=quiet) == 0, f"evaluation of {model} failed"
    overall = json.loads((out / "metrics.json").read_text())["overall"]
    k = cfg.trainer.eval_samples
    return {"mean@k": overall[f"mean@{k}"], "pass@k": overall[f"pass@{k}"], "answered": overall["answered"]}


def _tenths(xs: list[float]) -> list[float]:
    size = max(1, len(xs) // 10)
    return [round(sum(xs[i:i + size]) / len(xs[i:i + size]), 3) for i in range(0, len(xs), size)][:10]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a finished Parallax run directory (SFT, then one RL stage)")
    ap.add_argument("--steps", type=int, default=0, help="RL steps for TRL (default: the run's RL stage)")
    ap.add_argument("--out", type=Path, default=None, help="default: RUN/oracle")
    ap.add_argument("--eval-seed", type=int, default=0)
    args = ap.parse_args(argv)
    run, out = args.run.resolve(), (args.out or args.run / "oracle").resolve()
    cfg = _config(run)
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    parallax = [r["reward/correct"] for r in metrics if "reward/correct" in r]
    sft_steps = next(s for s in cfg.curriculum.build(cfg.reward).stages if s.kind == "sft").steps
    sft_dir = run / "checkpoints" / f"step_{sft_steps:06d}" / "model"
    final_dir = run / "checkpoints" / f"step_{sft_steps + len(parallax):06d}" / "model"
    for d in (sft_dir, final_dir):
        if not (d / "config.json").is_file():
            raise SystemExit(f"{d} is missing: bench_oracle needs a finished SFT -> RL run with its stage checkpoints")
    stage, batches = _rl_stream(cfg, sft_dir, args.steps or len(parallax))
    t0 = time.perf_counter()
    trl = run_trl(cfg, stage, batches, sft_dir, out / "trl")
    trl_s = time.perf_counter() - t0
    held = {name: evaluate(d, cfg, out / f"eval_{name}", args.eval_seed)
            for name, d in (("sft", sft_dir), ("parallax", final_dir), ("trl", out / "trl" / "model"))}
    print(f"training accuracy (share of correct samples), mean by tenth of {len(batches)} steps of "
          f"{len(batches[0])} prompts:")
    print(f"  parallax {_tenths(parallax[:len(batches)])}")
    print(f"  trl      {_tenths(trl)}")
    print("held-out       | mean@k | pass@k | answered")
    for name, h in held.items():
        print(f"{name:14s} | {h['mean@k']:.3f}  | {h['pass@k']:.3f}  | {h['answered']:.3f}")
    print(json.dumps({"bench": "oracle", "run": str(run), "steps": len(batches), "prompts": len(batches[0]),
                      "parallax_reward": parallax[:len(batches)], "trl_reward": trl, "heldout": held,
                      "trl_train_s": round(trl_s, 1), "load": os.getloadavg()[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
