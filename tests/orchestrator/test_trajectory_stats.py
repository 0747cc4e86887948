"""Per-step / per-evaluation parallel-structure metrics, and accuracy split by forking."""

from __future__ import annotations

import pytest

from orchestrator.structure import trajectory_stats
from parallax.contract.batch import Trajectory

FORK = "<Parallel><Path>3*4=12</Path><Path>5*6=30</Path><Summary>12+30=42</Summary></Parallel> #### 42"
SERIAL = "3*4=12 5*6=30 12+30=42 #### 42"
BROKEN = "<Parallel><Path>3*4=12 #### 42"  # a block opened, never closed: not a parallel sample


def _trajs(*texts: str) -> list[Trajectory]:
    return [Trajectory("u", [1], [2], [0.0], "stop", t) for t in texts]


def test_ratio_and_accuracy_split_by_forking():
    trajs = _trajs(FORK, FORK, FORK, SERIAL, SERIAL, BROKEN)
    out = trajectory_stats(trajs, "parallel_r1", "p", [True, True, False, False, True, True])
    assert out["p/ratio"] == pytest.approx(4 / 6)  # the broken text still holds a <Parallel>
    assert out["p/valid"] == pytest.approx(5 / 6)
    assert out["p/valid_parallel"] == pytest.approx(3 / 6)
    assert out["p/acc_parallel"] == pytest.approx(2 / 3)  # the three well-formed forks
    assert out["p/acc_serial"] == pytest.approx(2 / 3)  # two serial + the broken one


def test_a_side_without_samples_is_left_out():
    out = trajectory_stats(_trajs(SERIAL, SERIAL), "parallel_r1", "p", [True, False])
    assert out["p/acc_serial"] == 0.5 and "p/acc_parallel" not in out and "p/first_pos" not in out
    assert "p/acc_serial" not in trajectory_stats(_trajs(SERIAL), "parallel_r1", "p")


def test_flags_must_match_the_trajectories():
    with pytest.raises(ValueError, match="2 correctness flags for 3"):
        trajectory_stats(_trajs(SERIAL, FORK, FORK), "parallel_r1", "p", [True, False])


def test_steps_ok_is_the_share_of_units_that_check():
    bad_branch = FORK.replace("5*6=30", "5*6=31")  # branches 1/2 right, the join 12+30=42 right: 2/3
    out = trajectory_stats(_trajs(FORK, bad_branch, SERIAL, BROKEN), "parallel_r1", "p", truths=["42"] * 4)
    assert out["p/steps_ok"] == pytest.approx((1 + 2 / 3 + 1 + 0) / 4)
    assert "p/steps_ok" not in trajectory_stats(_trajs(FORK), "parallel_r1", "p")
    with pytest.raises(ValueError, match="ground truths"):
        trajectory_stats(_trajs(FORK, FORK), "parallel_r1", "p", truths=["42"])
