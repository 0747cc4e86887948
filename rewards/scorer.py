"""Reward scoring of whole batches of GRPO groups: what the reward actor runs (actors/reward_worker.py).

Algorithm per call of :meth:`RewardScorer.score`:

1. every completion of every group is analysed in this process (parse through ``formats``,
   final part, answer extraction, exact fast path) -- cheap and linear-time;
2. the answers the fast path leaves undecided (math-verify, or verl's DAPO scorer) run
   in ONE :class:`~rewards.pool.TimeoutPool` call: each item has a hard timeout; an item
   that times out, crashes its worker or raises is scored invalid (wrong, no trajectory
   credit) and counted under ``reward/errors/<reason>``;
3. the registered reward function scores each group (group-aware: PA-GRPO z-scores).

Nothing here raises because of one bad completion; bad *configuration* (unknown reward,
bad params) raises ``ValueError`` at construction. No Ray here: the reward actor wraps it.

Example:
    >>> w = RewardScorer("accuracy", workers=1)
    >>> out = w.score([RewardGroup(["... #### 4", "... #### 5"], "4")])
    >>> out.rewards, out.correct, out.errors
    ([[1.0, -1.0]], [[True, False]], {})
    >>> out.scores[0][0].structure["valid"]
    True
    >>> w.close()
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rewards.analysis import SlowJob, analyze_fast, apply_slow, run_slow
from rewards.api import analysis_options, score_samples
from rewards.pool import TimeoutPool
from rewards.registry import RewardSpec
from rewards.types import Analysis, GroupScore, RewardContext, RewardGroup, SampleScore
from rewards.verify import preload_modules, slow_verify

__all__ = ["RewardBatch", "RewardGroup", "RewardScorer"]


@dataclass
class RewardBatch:
    """Scores of a list of groups, in input order: each group's `SampleScore`s, one per completion in
    its order (reward, binary accuracy, components, and the structure its one parse read).

    ``errors`` counts failed items as ``reward/errors/<reason>``; ``metrics`` holds batch
    means for logging (``reward/mean``, ``reward/correct`` (binary accuracy),
    ``reward/<component>`` such as ``reward/acc`` or ``reward/parallel``, timings).
    """

    scores: list[list[SampleScore]]
    errors: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def rewards(self) -> list[list[float]]:
        return [[s.reward for s in g] for g in self.scores]

    @property
    def correct(self) -> list[list[bool]]:
        """Binary accuracy (the accuracy metrics use it, not ``rewards``)."""
        return [[s.correct for s in g] for g in self.scores]


def _as_group(g: RewardGroup) -> RewardGroup:
    if not isinstance(g, RewardGroup):
        raise TypeError(f"the reward actor scores RewardGroups (rewards.types: texts and ground_truth), "
                        f"got {type(g).__name__}")
    return g


class RewardScorer:
    """Scores groups with reward ``reward`` (a registered name) and ``params``.

    ``workers``/``timeout_s``: verification processes and the per-item hard timeout;
    ``fallback_reward``: the value given to every sample of a group whose reward function
    itself fails (counted as ``reward/errors/reward_fn``); ``tokenizer``: optional, an HF
    tokenizer or its Rust core (``tokenizers.Tokenizer``: what a run sends), for real token counts in
    latency metrics.
    """

    def __init__(
        self,
        reward: str,
        params: Mapping[str, Any] | None = None,
        *,
        workers: int = 2,
        timeout_s: float = 10.0,
        start_method: str = "forkserver",
        max_memory_mb: int | None = 4096,
        fallback_reward: float = 0.0,
        tokenizer: Any = None,
    ) -> None:
        self.spec = RewardSpec(reward, dict(params or {}))
        self.spec.resolve()  # fail fast on an unknown name or bad params
        self.fallback_reward = fallback_reward
        self.tokenizer = tokenizer
        self._pool_args = {
            "workers": workers, "timeout_s": timeout_s, "start_method": start_method, "max_memory_mb": max_memory_mb
        }
        self._pool: TimeoutPool | None = None

    @property
    def pool(self) -> TimeoutPool:
        return self._pool_for(self.spec.resolve()[1].verifier)

    def _pool_for(self, verifier: str) -> TimeoutPool:
        """The verification pool, its workers warm for `verifier` (a pool started for another one is
        replaced once by one that preloads both); lazy: format-only rewards never start processes."""
        want = preload_modules({verifier})
        if self._pool is not None and not set(want) <= set(self._pool.preload):
            have = self._pool.preload
            self._pool.close()
            self._pool, want = None, tuple(dict.fromkeys(have + want))
        if self._pool is None:
            self._pool = TimeoutPool(slow_verify, preload=want, **self._pool_args)
        return self._pool

    # A step where more than this share of the answers sent to verification timed out (and at least
    # MIN_TIMEOUTS of them: a few hostile answers in a small batch are expected) fails, rather than
    # train on the timeouts' zero / -1 rewards.
    MAX_TIMEOUT_SHARE = 0.5
    MIN_TIMEOUTS = 8

    def _analyse(self, groups: list[RewardGroup], opts) -> list[list[Analysis]]:
        """Steps 1-2: fast analysis here, slow verification in the pool."""
        out: list[list[Analysis]] = []
        jobs: list[SlowJob] = []
        where: list[tuple[int, int]] = []
        for gi, g in enumerate(groups):
            row = []
            for si, text in enumerate(g.texts):
                try:
                    s, job = analyze_fast(len(jobs), text, g.ground_truth, opts)
                except Exception:  # noqa: BLE001 - a bug on one text must not fail the step
                    s, job = Analysis(error="exception"), None
                row.append(s)
                if job is not None:
                    jobs.append(job)
                    where.append((gi, si))
            out.append(row)
        if jobs:
            flat = [out[gi][si] for gi, si in where]
            outcomes = run_slow(jobs, self._pool_for(opts.verifier))
            timeouts = sum(o.reason == "timeout" for o in outcomes)
            if timeouts >= self.MIN_TIMEOUTS and timeouts > self.MAX_TIMEOUT_SHARE * len(jobs):
                raise RuntimeError(
                    f"reward: {timeouts} of {len(jobs)} answers timed out in verification ({opts.verifier}, "
                    f"{self._pool_args['timeout_s']:g} s each); refusing to train on them. Raise reward.timeout_s, "
                    "or lower the load on the reward actors' CPUs")
            apply_slow(flat, jobs, outcomes)
            for (gi, si), s in zip(where, flat):
                out[gi][si] = s
        return out

    def _score_one(self, name: str, samples: list[Analysis], ctx: RewardContext, params) -> GroupScore:
        try:
            return score_samples(name, samples, ctx, params)
        except Exception:  # noqa: BLE001 - e.g. a custom reward's bug on odd input
            n = len(samples)
            errors = Counter(s.error for s in samples if s.error)
            errors["reward_fn"] += n
            return GroupScore([self.fallback_reward] * n, [s.correct for s in samples], {}, dict(errors))

    def score(
        self,
        groups: Sequence[RewardGroup],
        *,
        step: int = 0,
        stage: str = "",
        spec: RewardSpec | None = None,
    ) -> RewardBatch:
        """Score ``groups`` at global ``step`` / curriculum ``stage``; ``spec`` overrides the
        worker's reward for this call (stage-dependent rewards)."""
        spec = spec or self.spec
        entry, params = spec.resolve()
        opts = analysis_options(entry.name, params, self.tokenizer)
        gs = [_as_group(g) for g in groups]
        t0 = time.perf_counter()
        analysed = self._analyse(gs, opts)
        t1 = time.perf_counter()
        scores = [
            self._score_one(
                entry.name, s, RewardContext(step=step, stage=stage, ground_truth=g.ground_truth), params
            )
            for g, s in zip(gs, analysed)
        ]
        t2 = time.perf_counter()
        return self._batch(scores, analysed, {"timing/reward_analyse": t1 - t0, "timing/reward_fn": t2 - t1})

    @staticmethod
    def _batch(scores: list[GroupScore], analysed: list[list[Analysis]], timing: dict[str, float]) -> RewardBatch:
        errors: Counter[str] = Counter()
        sums: Counter[str] = Counter()
        n = 0
        for sc in scores:
            errors.update(sc.errors)
            n += sc.size
            sums["reward/mean"] += sum(sc.rewards)
            sums["reward/correct"] += sum(sc.correct)
            for k, v in sc.components.items():
                sums[f"reward/{k}"] += sum(v)
        metrics = {k: v / n for k, v in sums.items()} if n else {}
        metrics["reward/timeouts"] = float(errors.get("timeout", 0))  # every step, 0 included
        metrics.update(timing)
        err = {f"reward/errors/{k}": v for k, v in sorted(errors.items())}
        metrics.update({k: float(v) for k, v in err.items()})
        per_sample = [
            [SampleScore(float(sc.rewards[j]), bool(sc.correct[j]), {k: float(v[j]) for k, v in sc.components.items()},
                         s.structure or {}) for j, s in enumerate(samples)]
            for sc, samples in zip(scores, analysed)
        ]
        return RewardBatch(per_sample, errors=err, metrics=metrics)

    def close(self) -> None:
        """Stop the verification processes."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
