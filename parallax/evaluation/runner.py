"""Generate evaluation samples from a checkpoint through the rollout engine.

The rollout worker (``actors.rollout.RolloutWorker``, a plain class: no Ray for one process) with
the configured engine (``hf`` on CPU, ``vllm`` on GPU) samples k completions per problem at the
given temperature.  Decoding mode ``sequential`` is plain autoregressive decoding; ``executed``
runs the parallel executor (every branch its own engine request, joined back: ``parallax/executors/``), as
``rollout.executor.mode=executed`` does in training. ``generate_fn`` replaces the decoder entirely.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from parallax.trainingdata.loaders import EvalProblem
from parallax.trainingdata.prompts import build_prompt, fewshot_prompt

__all__ = ["MODES", "generate_samples", "problem_fields", "prompts_for"]

MODES: tuple[str, ...] = ("sequential", "executed")

#: Problem meta copied onto every sample (the strata read them).
_STRATA_FIELDS = ("level", "problem_number", "difficulty", "family", "contest", "subject")


def problem_fields(p: EvalProblem) -> dict[str, Any]:
    """The sample fields a problem contributes: uid, benchmark, answer and strata meta."""
    out = {"uid": p.uid, "benchmark": p.benchmark, "answer": p.answer}
    out.update({k: p.meta[k] for k in _STRATA_FIELDS if k in p.meta})
    return out


def prompts_for(problems: Sequence[EvalProblem], style: str, fmt: str, tokenizer=None) -> list[str]:
    """Prompt text per problem; toy-world problems (``meta.raw_prompt``) keep their raw prompt, after
    the solved problems of ``meta.shots`` as earlier chat turns where a run showed them (`data.fewshot`)."""
    return [fewshot_prompt(tokenizer, p.question, p.meta["shots"]) if p.meta.get("shots")
            else build_prompt(p.question, "raw" if p.meta.get("raw_prompt") else style, fmt) for p in problems]


def generate_samples(model_path: str, problems: Sequence[EvalProblem], k: int, *, temperature: float = 1.0,
                     top_p: float = 1.0, max_new_tokens: int = 256, style: str = "parallel",
                     fmt: str = "parallel_r1", seed: int = 0, engine: str = "hf", dtype: str = "float32",
                     batch_size: int = 64, torch_threads: int = 2, mode: str = "sequential",
                     generate_fn: Callable[..., list] | None = None) -> tuple[list[dict], Any]:
    """k samples per problem; returns (sample dicts for :func:`evaluate_outputs`, the tokenizer).

    ``generate_fn(worker, prompts, k, seed)`` replaces the worker's own ``generate`` (an
    executed-parallel decoder); it must return ``parallax.contract.batch.Trajectory`` objects in
    prompt-major order.
    """
    from actors.rollout import RolloutWorker
    from parallax.contract.batch import Prompt
    from parallax.contract.config import ExecutorConfig, RolloutConfig

    if mode not in MODES and generate_fn is None:
        raise ValueError(f"decoding mode {mode!r} is not available; valid: {MODES} (or pass generate_fn)")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    cfg = RolloutConfig(engine=engine, n=k, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                        max_batch_size=batch_size, torch_threads=torch_threads,
                        executor=ExecutorConfig(mode="executed" if mode == "executed" else "off"))
    worker = RolloutWorker(cfg, model_path, dtype=dtype, fmt=fmt)
    tok = worker.tokenizer
    texts = prompts_for(problems, style, fmt, tok)
    ids = tok(texts, add_special_tokens=False)["input_ids"]
    prompts = [Prompt(uid=p.uid, text=t, token_ids=i, ground_truth=p.answer) for p, t, i in zip(problems, texts, ids)]
    gen = generate_fn or (lambda w, ps, n, s: w.generate(ps, n=n, seed=s))
    trajs = gen(worker, prompts, k, seed)
    if len(trajs) != len(problems) * k:
        raise RuntimeError(f"engine returned {len(trajs)} trajectories, expected {len(problems) * k}")
    samples = []
    for j, t in enumerate(trajs):
        p = problems[j // k]
        if t.uid != p.uid:
            raise RuntimeError(f"trajectory {j} belongs to {t.uid!r}, expected {p.uid!r} (order broken)")
        samples.append({**problem_fields(p), "sample": j % k, "text": t.text, "finish_reason": t.finish_reason,
                        "response_tokens": len(t.response_ids)})
    return samples, tok
