"""PA-GRPO (Parason) and the acceleration term, as pure math over per-sample numbers.

For sample i of one GRPO group (z-scores taken within the group)::

    R_i = -1 + 2 * 1[correct_i] * (1 - alpha * f(z(T_i)) + beta_sub * f(z(R_sub_i))
                                     + beta_trial * f(z(R_trial_i)) + min(rho * eta_i, rho_clip))

* ``T`` critical-path tokens, ``R_sub``/``R_trial`` token shares inside Subtask/Trial
  branches, ``eta = (total - T) / total``.
* ``f`` is ``linear`` (identity) or ``sigmoid`` (1 / (1 + e^-z)); note sigmoid maps z = 0
  to 0.5, so a zero-spread group still gets ``-alpha/2 + beta/2`` terms.
* z uses the **population** std (ddof = 0, like the public release's ``np.std``) by
  default; ``ddof=1`` gives the sample std (a group of one then has no spread).
* A group with zero spread in a quantity (all equal, or a single sample) gets z = 0 for it.
* Samples whose value is ``None`` (no trajectory stats: parse failure, analysis error) are
  left out of the mean/std and get z = 0 and eta = 0: they score the plain +-1.
* Wrong answers get exactly -1, whatever their shape: the bonus exists only when correct.

Differences from the public release's reward manager (measured side by side on 1,600 random
groups: this module equals the seed formula on all 1,600, the release on 621-667), kept on purpose:

* **the factor 2**: the seed's reward is ``-1 + 2 * 1[correct] * (...)``, so a right answer with no
  bonus scores +1 and a wrong one -1; the release drops the 2, so a right answer scores 0 + bonus and
  the accuracy signal shrinks to half the GRPO spread;
* **the latency term is -alpha * f(z(T))**, the seed's "penalise critical-path tokens"; the release
  uses ``+alpha * z(1 - T / total)``, which rewards a small *share* of critical tokens, so padding a
  branch with filler raises the reward while T grows;
* **z-statistics over the samples that have stats**: a text without trajectory stats (``None``) is
  left out of the mean and std and gets z = 0; the release puts every sample in, an unparsable one as
  0, which drags the mean of T (and every other sample's z) towards it.

``tests/rewards/test_rewards_public_differences.py`` works each one out by hand.

Example (linear, alpha = 0, beta_sub = 0.1, no trial/accel; R_sub = [0.2, 0.6], both right:
mean 0.4, population std 0.2, z = [-1, 1], R = -1 + 2(1 -+ 0.1) = [0.8, 1.2]):

    >>> [round(r, 6) for r in pa_grpo_rewards([True, True], [10, 10], [0.2, 0.6], [0, 0], [0, 0],
    ...                                       beta_sub=0.1, beta_trial=0.0)[0]]
    [0.8, 1.2]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["F_NAMES", "acceleration", "pa_grpo_rewards", "transform", "zscores"]

F_NAMES: tuple[str, ...] = ("linear", "sigmoid")

# Spread below this (relative to the values' scale) is float noise: [0.1, 0.1, 0.1] has
# a mean of 0.10000000000000002 and must still give z = 0, not +-0.7.
_REL_EPS = 1e-9


def zscores(xs: Sequence[float | None], ddof: int = 0) -> list[float]:
    """Within-group z-scores; None entries are excluded and get 0.

    >>> zscores([1.0, 2.0, 3.0])  # mean 2, population std sqrt(2/3)
    [-1.224744871391589, 0.0, 1.224744871391589]
    >>> zscores([5.0, 5.0]), zscores([7.0]), zscores([1.0, None, 3.0])
    ([0.0, 0.0], [0.0], [-1.0, 0.0, 1.0])
    """
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 (population) or 1 (sample), got {ddof}")
    vals = [float(x) for x in xs if x is not None]
    for v in vals:
        if not math.isfinite(v):
            raise ValueError(f"z-score input must be finite, got {v}")
    n = len(vals)
    if n - ddof <= 0:
        return [0.0] * len(xs)
    mean = math.fsum(vals) / n
    var = math.fsum((v - mean) ** 2 for v in vals) / (n - ddof)
    std = math.sqrt(var)
    scale = max(1.0, max(abs(v) for v in vals))
    if std <= _REL_EPS * scale:
        return [0.0] * len(xs)
    return [0.0 if x is None else (float(x) - mean) / std for x in xs]


def transform(z: float, f: str) -> float:
    """``f(z)``: identity for ``linear``, logistic for ``sigmoid``."""
    if f == "linear":
        return z
    if f == "sigmoid":
        # the two branches avoid overflow of exp for large |z|
        if z >= 0:
            return 1.0 / (1.0 + math.exp(-z))
        e = math.exp(z)
        return e / (1.0 + e)
    raise ValueError(f"f must be one of {F_NAMES}, got {f!r}")


def acceleration(eta: float, rho: float, rho_clip: float) -> float:
    """ThreadWeaver-style acceleration bonus ``min(rho * eta, rho_clip)``."""
    return min(rho * eta, rho_clip)


def pa_grpo_rewards(
    correct: Sequence[bool],
    T: Sequence[float | None],
    r_sub: Sequence[float | None],
    r_trial: Sequence[float | None],
    eta: Sequence[float | None],
    *,
    alpha: float = 0.0,
    beta_sub: float = 0.05,
    beta_trial: float = 0.05,
    rho: float = 0.0,
    rho_clip: float = 0.2,
    f: str = "linear",
    ddof: int = 0,
) -> tuple[list[float], dict[str, list[float]]]:
    """PA-GRPO rewards of one group and their components (``z_T``, ``z_sub``, ``z_trial``,
    ``accel``, ``bonus`` = the bracket minus 1).  All sequences have one entry per sample."""
    n = len(correct)
    for name, seq in (("T", T), ("r_sub", r_sub), ("r_trial", r_trial), ("eta", eta)):
        if len(seq) != n:
            raise ValueError(f"{name} has {len(seq)} entries, expected {n} (one per sample)")
    if f not in F_NAMES:
        raise ValueError(f"f must be one of {F_NAMES}, got {f!r}")
    zt, zs, zr = zscores(T, ddof), zscores(r_sub, ddof), zscores(r_trial, ddof)
    rewards: list[float] = []
    comp: dict[str, list[float]] = {"z_T": zt, "z_sub": zs, "z_trial": zr, "accel": [], "bonus": []}
    for i in range(n):
        acc = acceleration(float(eta[i]), rho, rho_clip) if eta[i] is not None else 0.0
        bonus = -alpha * transform(zt[i], f) + beta_sub * transform(zs[i], f)
        bonus += beta_trial * transform(zr[i], f) + acc
        comp["accel"].append(acc)
        comp["bonus"].append(bonus)
        rewards.append(-1.0 + 2.0 * (1.0 if correct[i] else 0.0) * (1.0 + bonus))
    return rewards, comp
