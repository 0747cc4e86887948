"""Sampled trajectories of a step as table rows (W&B `samples`, `samples/step_N.jsonl`): what the model
wrote, what it scored, and the parallel structure the format parser read from it."""

from __future__ import annotations

from typing import Any

from contract.batch import Prompt, Trajectory


def sample_rows(prompts: list[Prompt], trajs: list[Trajectory], rewards: list[float], correct: list[bool],
                fmt, limit: int) -> list[dict[str, Any]]:
    """The first `limit` trajectories, spread over the prompts (one per prompt first, then more)."""
    from formats import text_stats

    by_uid = {p.uid: p for p in prompts}
    order = sorted(range(len(trajs)), key=lambda i: (sum(t.uid == trajs[i].uid for t in trajs[:i]), i))
    rows = []
    for i in order[:limit]:
        t, s = trajs[i], text_stats(trajs[i].text, fmt)
        rows.append({"prompt": by_uid[t.uid].text, "completion": t.text, "reward": float(rewards[i]),
                     "correct": bool(correct[i]), "answer": by_uid[t.uid].ground_truth,
                     "valid": bool(s["valid"]), "status": s["status"], "blocks": s["num_blocks"],
                     "branches": s["num_branches"], "critical_path": s["critical_path_tokens"],
                     "total_tokens": s["total_tokens"], "speedup": s["speedup"],
                     "finish_reason": t.finish_reason, "policy_version": t.policy_version})
    return rows
