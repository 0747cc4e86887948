"""One entry point to score a group by reward name.

``score_group`` = analysis (parse, extract, verify) + the registered group function.
``score_samples`` runs only the group function on already analysed samples (the reward
worker analyses many groups at once through one process pool, then calls it per group).

Example:
    >>> import rewards
    >>> g = rewards.score_group("accuracy", ["... #### 42", "... #### 41"], "42")
    >>> g.rewards, g.correct
    ([1.0, -1.0], [True, False])
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from rewards.analysis import AnalysisOptions, analyze_group
from rewards.pool import TimeoutPool
from rewards.registry import get_reward, make_params
from rewards.types import Analysis, BaseParams, GroupScore, RewardContext

__all__ = ["analysis_options", "score_group", "score_samples"]


def analysis_options(name: str, params: BaseParams, tokenizer: Any = None) -> AnalysisOptions:
    """What analysis reward ``name`` with ``params`` needs."""
    entry = get_reward(name)
    return AnalysisOptions(
        format=params.spec,
        verifier=params.verifier,
        need_accuracy=entry.needs_accuracy,
        need_parse=entry.needs_parse,
        tokenizer=tokenizer,
        multiple_answers=params.multiple_answers,
    )


def score_samples(name: str, samples: Sequence[Analysis], ctx: RewardContext, params: BaseParams) -> GroupScore:
    """Apply reward ``name`` to one analysed group; adds ``errors`` counted by reason."""
    entry = get_reward(name)
    if not samples:
        return GroupScore([], [], {}, {})
    out = entry.fn(list(samples), ctx, params)
    if not isinstance(out, GroupScore) or out.size != len(samples):
        raise TypeError(f"reward {name!r} must return a GroupScore with {len(samples)} entries")
    errors = Counter(s.error for s in samples if s.error)
    for k, v in errors.items():
        out.errors[k] = out.errors.get(k, 0) + v
    return out


def score_group(
    name: str,
    texts: Sequence[str],
    ground_truth: str,
    *,
    step: int = 0,
    stage: str = "",
    params: Mapping[str, Any] | BaseParams | None = None,
    pool: TimeoutPool | None = None,
    tokenizer: Any = None,
) -> GroupScore:
    """Score one GRPO group (all completions of one prompt) with reward ``name``.

    ``params`` is the reward's params dict (or typed params); ``step``/``stage`` reach the
    reward through :class:`RewardContext`.  Math verification runs in ``pool`` when given
    (hard per-item timeout), otherwise in-process with math-verify's own soft timeout.
    Raises ``ValueError`` for an unknown reward or bad params.
    """
    p = make_params(name, params)
    if not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    gold = "" if ground_truth is None else str(ground_truth)
    samples = analyze_group(list(texts), gold, analysis_options(name, p, tokenizer), pool)
    return score_samples(name, samples, RewardContext(step=step, stage=stage, ground_truth=gold), p)
