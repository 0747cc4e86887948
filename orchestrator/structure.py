"""Parallel-structure metrics of a batch of generated texts (per step, and per evaluation)."""

from __future__ import annotations

from statistics import mean

from parallax.contract.batch import StepSamples, Trajectory

__all__ = ["sample_stats", "trajectory_stats"]


def trajectory_stats(trajs: list[Trajectory], fmt: str, prefix: str,
                     correct: list[bool] | None = None, truths: list[str] | None = None) -> dict[str, float]:
    """Parallel-structure metrics of generated texts through the format package.

    With ``correct`` (one flag per trajectory), also the accuracy of the samples that fork
    (``acc_parallel``: well formed, at least one block) and of the others (``acc_serial``), each
    only when such samples exist: which of the two an accuracy-only reward favours.

    With ``truths`` (each trajectory's ground-truth answer), also ``steps_ok``: the mean share of a
    sample's units of work (its branches and its main chain's join) whose steps check
    (:func:`rewards.branch.steps_share`): whether the arithmetic itself improves, apart from answers.
    """
    from parallax.formats import text_stats

    stats = [text_stats(t.text, fmt) for t in trajs]
    valid = [s for s in stats if s["valid"] and s["has_parallel"]]
    out = {f"{prefix}/ratio": mean(bool(s["has_parallel"]) for s in stats),
           f"{prefix}/valid": mean(bool(s["valid"]) for s in stats),
           # Well-formed AND holding at least one parallel block: the format SFT must teach.
           f"{prefix}/valid_parallel": len(valid) / len(stats)}
    if correct is not None:
        if len(correct) != len(stats):
            raise ValueError(f"{len(correct)} correctness flags for {len(stats)} trajectories")
        forks = [s["valid"] and bool(s["has_parallel"]) for s in stats]
        for name, want in (("acc_parallel", True), ("acc_serial", False)):
            picked = [bool(c) for c, f in zip(correct, forks) if f == want]
            if picked:
                out[f"{prefix}/{name}"] = mean(picked)
    if truths is not None:
        from rewards.branch import steps_share

        if len(truths) != len(trajs):
            raise ValueError(f"{len(truths)} ground truths for {len(trajs)} trajectories")
        out[f"{prefix}/steps_ok"] = mean(steps_share(t.text, fmt, g) for t, g in zip(trajs, truths))
    if valid:
        out[f"{prefix}/first_pos"] = mean(s["first_parallel_pos"] for s in valid)
        out[f"{prefix}/speedup"] = mean(s["speedup"] for s in valid)
        out[f"{prefix}/critical_path"] = mean(s["critical_path_tokens"] for s in valid)
    return out


def sample_stats(samples: StepSamples, fmt: str, prefix: str) -> dict[str, float]:
    """`trajectory_stats` of a step's (or an evaluation's) samples, with their correctness and ground truths."""
    return trajectory_stats(samples.trajectories, fmt, prefix, samples.correct, samples.truths)
