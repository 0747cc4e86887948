"""Parallax evaluation: the papers' metrics, reports, plots, and the tools that build and annotate data.

Public API (heavy backends -- torch, ray, datasets, matplotlib, wandb -- are imported lazily)::

    evaluate_outputs(samples, fmt="parallel_r1", k=None, *, budgets=PAPER_BUDGETS, pass_ks=None,
                     tokenizer=None, scorer=None) -> dict
    pass_at_k(n, c, k) -> float;  flatten_metrics(result, prefix="eval") -> dict[str, float]

The problems and prompts it scores come from `trainingdata` (``load_benchmark``, ``build_prompt``).
CLI: ``python -m parallax.evaluation outputs FILE.jsonl --format parason --out DIR`` (score saved outputs) and
``python -m parallax.evaluation checkpoint MODEL_DIR --benchmarks toyworld --k 4 --out DIR`` (generate, then
score); ``python -m parallax.evaluation build-gsm8k ...`` (Parallel-GSM8K) and ``annotate`` / ``convert``
(Parason data tools).  Metric definitions: :mod:`parallax.evaluation.metrics`.
"""

from parallax.evaluation.metrics import PAPER_BUDGETS, evaluate_outputs, flatten_metrics, mean_at_k, pass_at_k

__all__ = [
    "PAPER_BUDGETS",
    "evaluate_outputs",
    "flatten_metrics",
    "mean_at_k",
    "pass_at_k",
]
