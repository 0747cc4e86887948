"""Parallax rewards: pure, group-aware reward functions registered by name.

Importable without ray or torch.  A reward scores one GRPO group (all completions of one
prompt) given a :class:`RewardContext` (global step, curriculum stage, ground truth) and
returns per-sample rewards, binary correctness and named components (:class:`GroupScore`).

Built-in rewards (``reward_names()``): ``format``, ``accuracy``, ``s1``, ``parallel_acc``,
``tiered``, ``s2`` (Parallel-R1), ``pa_grpo``, ``acceleration`` (Parason) and ``branch_acc``
(a reward per branch: the answer, plus the share of branches whose steps check).

Example:
    >>> import rewards
    >>> rewards.score_group("tiered", ["<Parallel><Path>6*7</Path><Path>7*6</Path>"
    ...     "<Summary>42</Summary></Parallel> #### 42", "#### 42", "#### 7"], "42").rewards
    [1.2, 1.0, -1.0]

Debug offline: ``python -m parallax.evaluation score FILE.jsonl --reward pa_grpo beta_sub=0.1``.
"""

from rewards import branch as _branch  # noqa: F401  (registers the per-branch reward)
from rewards import parallel_r1 as _parallel_r1  # noqa: F401  (registers the Parallel-R1 rewards)
from rewards import parason as _parason  # noqa: F401  (registers the Parason rewards)
from rewards.api import score_group, score_samples
from rewards.registry import RewardEntry, RewardSpec, get_reward, make_params, register, reward_names
from rewards.types import Analysis, BaseParams, GroupScore, RewardContext, TrajStats

__all__ = [
    "Analysis",
    "BaseParams",
    "GroupScore",
    "RewardContext",
    "RewardEntry",
    "RewardSpec",
    "TrajStats",
    "get_reward",
    "make_params",
    "register",
    "reward_names",
    "score_group",
    "score_samples",
]
