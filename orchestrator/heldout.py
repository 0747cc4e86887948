"""Held-out evaluation: the papers' protocol, on the rollout and reward actors, scored by `evaluation`."""

from __future__ import annotations

from collections.abc import Callable
from statistics import mean

from contract.batch import Prompt
from contract.config import TrainerConfig
from contract.seeds import EVAL_SEED
from curricula import Stage
from orchestrator.structure import trajectory_stats, truths

# the reward an evaluation scores with: accuracy, whatever the stage trains on
EVAL_STAGE = Stage("eval", "rl", 1, reward="accuracy")


def evaluate(prompts: list[Prompt], fmt, tcfg: TrainerConfig, generate: Callable) -> dict[str, float]:
    """Held-out evaluation with the `evaluation` package's metrics. The papers' protocol:
    eval/acc is mean@k over trainer.eval_samples samples per problem at the rollout temperature
    (Parallel-R1: Mean@16 at T=1.0), eval/pass@k alongside; eval/acc_greedy decodes greedily.
    Also the samples' parallel structure, accuracy under critical-path budgets and strata.
    Every evaluation draws the same seeded sampling stream (`EVAL_SEED`), so stages differ by weights only.

    `generate(prompts, n=, seed=, stage=, greedy=)` -> (trajectories prompt-major, RewardBatch)."""
    from evaluation import evaluate_outputs, flatten_metrics

    by_uid = {p.uid: p for p in prompts}
    table: dict[str, float] = {}
    if tcfg.eval_greedy:
        trajs, scored = generate(prompts, n=1, seed=EVAL_SEED, stage=EVAL_STAGE, greedy=True)
        table["eval/acc_greedy"] = mean(c for group in scored.correct for c in group)
    k = tcfg.eval_samples
    if k:
        trajs, scored = generate(prompts, n=k, seed=EVAL_SEED, stage=EVAL_STAGE, greedy=False)
    correct = [c for group in scored.correct for c in group]
    samples = [{"uid": x.uid, "benchmark": by_uid[x.uid].meta.get("benchmark", "heldout"), "text": x.text,
                "answer": by_uid[x.uid].ground_truth,
                "difficulty": by_uid[x.uid].meta.get("difficulty"), "correct": c}
               for x, c in zip(trajs, correct)]
    detail = flatten_metrics(evaluate_outputs(samples, fmt, k or 1, budgets=tcfg.eval_budgets))
    table["eval/acc"] = mean(correct)
    table["eval/answered"] = detail["eval/overall/answered"]  # over every benchmark's samples
    if k:
        table[f"eval/pass@{k}"] = detail[f"eval/overall/pass@{k}"]
    else:
        table.pop("eval/acc_greedy")  # greedy only: it is eval/acc
    table |= trajectory_stats(trajs, fmt, "eval/parallel", correct, truths(prompts, trajs))
    table |= {f"eval/acc@{b}": detail[f"eval/overall/acc@{b}"] for b in tcfg.eval_budgets
              if f"eval/overall/acc@{b}" in detail}
    return table | {k: v for k, v in detail.items() if k not in table}
