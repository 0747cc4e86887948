"""Parallax evaluation: benchmark loaders, prompts, the papers' metrics, reports and data builders.

Public API (heavy backends -- torch, ray, datasets, matplotlib, wandb -- are imported lazily)::

    load_benchmark(name, source=None, *, data_dir=None, split=None, limit=None, **toy) -> list[EvalProblem]
    build_prompt(question, style="parallel", fmt="parallel_r1", chat=False)
    evaluate_outputs(samples, fmt="parallel_r1", k=None, *, budgets=PAPER_BUDGETS, pass_ks=None,
                     tokenizer=None, scorer=None) -> dict
    pass_at_k(n, c, k) -> float;  flatten_metrics(result, prefix="eval") -> dict[str, float]

CLI: ``python -m evaluation outputs FILE.jsonl --format parason --out DIR`` (score saved outputs) and
``python -m evaluation checkpoint MODEL_DIR --benchmarks toyworld --k 4 --out DIR`` (generate, then
score); ``python -m evaluation build-gsm8k ...`` (Parallel-GSM8K) and ``annotate`` / ``convert``
(Parason data tools).  Metric definitions: :mod:`evaluation.metrics`.
"""

from evaluation.loaders import BENCHMARKS, EvalProblem, data_dir, load_benchmark, repair_form_feed
from evaluation.metrics import PAPER_BUDGETS, evaluate_outputs, flatten_metrics, mean_at_k, pass_at_k
from evaluation.prompts import PROMPT_STYLES, build_prompt

__all__ = [
    "BENCHMARKS",
    "PAPER_BUDGETS",
    "PROMPT_STYLES",
    "EvalProblem",
    "build_prompt",
    "data_dir",
    "evaluate_outputs",
    "flatten_metrics",
    "load_benchmark",
    "mean_at_k",
    "pass_at_k",
    "repair_form_feed",
]
