"""Sampled trajectories of a step as table rows (W&B `samples`, `samples/step_N.jsonl`): what the model
wrote, what it scored, and the parallel structure the format parser read from it."""

from __future__ import annotations

from typing import Any

from parallax.contract.batch import StepSamples


def sample_rows(samples: StepSamples, limit: int) -> list[dict[str, Any]]:
    """The first `limit` samples, spread over the groups (each group's first sample, then its second, ...):
    each record's text, score and the structure the reward actor's parse read."""
    width = max(len(g.samples) for g in samples.groups)
    picked = [(g, k) for k in range(width) for g in samples.groups if k < len(g.samples)][:limit]
    rows = []
    for g, k in picked:
        t = g.samples[k]
        s = t.score.structure
        rows.append({"prompt": g.prompt.text, "completion": t.text, "reward": t.score.reward,
                     "correct": t.score.correct, "answer": g.prompt.ground_truth,
                     "valid": bool(s["valid"]), "status": s["status"], "blocks": s["num_blocks"],
                     "branches": s["num_branches"], "critical_path": s["critical_path_tokens"],
                     "total_tokens": s["total_tokens"], "speedup": s["speedup"],
                     "finish_reason": t.finish_reason, "policy_version": t.policy_version})
    return rows
