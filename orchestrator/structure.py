"""Parallel-structure metrics of a step's (or an evaluation's) samples: a fold over their records, each
carrying the structure the reward actor's one parse read (`parallax.contract.batch.SampleScore`)."""

from __future__ import annotations

from statistics import mean

from parallax.contract.batch import StepSamples

__all__ = ["sample_stats"]


def sample_stats(samples: StepSamples, prefix: str) -> dict[str, float]:
    """The share of samples that fork (`ratio`), that are well formed (`valid`), and both (`valid_parallel`,
    the format SFT must teach); the accuracy of the samples that fork (`acc_parallel`: well formed, at least
    one block) and of the others (`acc_serial`), each only when such samples exist (which of the two an
    accuracy-only reward favours); `steps_ok`, the mean share of a sample's units of work (its branches and
    its main chain's join) whose steps check (`rewards.branch.steps_share`: whether the arithmetic itself
    improves, apart from answers); and over the well-formed forks, where the first block starts, the speed-up
    and the critical path."""
    records = [x.score for g in samples.groups for x in g.samples]
    stats = [r.structure for r in records]
    valid = [s for s in stats if s["valid"] and s["has_parallel"]]
    out = {f"{prefix}/ratio": mean(bool(s["has_parallel"]) for s in stats),
           f"{prefix}/valid": mean(bool(s["valid"]) for s in stats),
           f"{prefix}/valid_parallel": len(valid) / len(stats)}
    forks = [bool(s["valid"] and s["has_parallel"]) for s in stats]
    for name, want in (("acc_parallel", True), ("acc_serial", False)):
        picked = [r.correct for r, f in zip(records, forks) if f == want]
        if picked:
            out[f"{prefix}/{name}"] = mean(picked)
    out[f"{prefix}/steps_ok"] = mean(s["steps_ok"] for s in stats)
    if valid:
        out[f"{prefix}/first_pos"] = mean(s["first_parallel_pos"] for s in valid)
        out[f"{prefix}/speedup"] = mean(s["speedup"] for s in valid)
        out[f"{prefix}/critical_path"] = mean(s["critical_path_tokens"] for s in valid)
    return out
