"""Held-out evaluation: the papers' protocol, on the rollout and reward actors, scored by `evaluation`."""

from __future__ import annotations

from collections.abc import Callable
from statistics import mean

from curricula import Stage
from orchestrator.structure import sample_stats
from parallax.contract.batch import Prompt, StepSamples
from parallax.contract.config import TrainerConfig
from parallax.contract.seeds import EVAL_SEED

# the reward an evaluation scores with: accuracy, whatever the stage trains on
EVAL_STAGE = Stage("eval", "rl", 1, reward="accuracy")


def _stratum(meta: dict) -> str | None:
    """A toy problem's stratum, ``<family>_d<difficulty>`` (where a fork pays depends on both); else the
    difficulty's (`parallax.evaluation.metrics.stratum_of`)."""
    if meta.get("family") is not None and meta.get("difficulty") is not None:
        return f"{meta['family']}_d{meta['difficulty']}"
    return None


def evaluate(prompts: list[Prompt], fmt, tcfg: TrainerConfig,
             generate: Callable[..., StepSamples], tokenizer=None) -> dict[str, float]:
    """Held-out evaluation with the `evaluation` package's metrics. The papers' protocol:
    eval/acc is mean@k over trainer.eval_samples samples per problem at the rollout temperature
    (Parallel-R1: Mean@16 at T=1.0), eval/pass@k alongside; eval/acc_greedy decodes greedily.
    Also the samples' parallel structure, accuracy under critical-path budgets and strata.
    Every evaluation draws the same seeded sampling stream (`EVAL_SEED`), so stages differ by weights only.

    `generate(prompts, n=, seed=, stage=, greedy=)` -> the scored groups (`StepSamples`). With the model's
    `tokenizer`, lengths, critical paths and the acc@B budgets count its tokens (a decode step each); without,
    the format's words."""
    from parallax.evaluation import evaluate_outputs, flatten_metrics

    table: dict[str, float] = {}
    if tcfg.eval_greedy:
        samples = generate(prompts, n=1, seed=EVAL_SEED, stage=EVAL_STAGE, greedy=True)
        table["eval/acc_greedy"] = mean(x.score.correct for x in samples.trajectories)
    k = tcfg.eval_samples
    if k:
        samples = generate(prompts, n=k, seed=EVAL_SEED, stage=EVAL_STAGE, greedy=False)
    rows = [{"uid": g.prompt.uid, "benchmark": g.prompt.meta.get("benchmark", "heldout"), "text": x.text,
             "answer": g.prompt.ground_truth, "difficulty": g.prompt.meta.get("difficulty"),
             "stratum": _stratum(g.prompt.meta), "correct": x.score.correct,
             "parsed": x.score.structure.get("in_tokens") if tokenizer is not None else x.score.structure}
            for g in samples.groups for x in g.samples]
    detail = flatten_metrics(evaluate_outputs(rows, fmt, k or 1, budgets=tcfg.eval_budgets,
                                                   tokenizer=tokenizer))
    table["eval/acc"] = mean(x.score.correct for x in samples.trajectories)
    # latency over every sample, a serial one's critical path being its length (Parason's T)
    table["eval/critical_path_tokens"] = detail["eval/overall/critical_path_tokens"]
    table["eval/answered"] = detail["eval/overall/answered"]  # over every benchmark's samples
    if k:
        table[f"eval/pass@{k}"] = detail[f"eval/overall/pass@{k}"]
    else:
        table.pop("eval/acc_greedy")  # greedy only: it is eval/acc
    table |= sample_stats(samples, "eval/parallel")
    table |= {f"eval/acc@{b}": detail[f"eval/overall/acc@{b}"] for b in tcfg.eval_budgets
              if f"eval/overall/acc@{b}" in detail}
    return table | {k: v for k, v in detail.items() if k not in table}
