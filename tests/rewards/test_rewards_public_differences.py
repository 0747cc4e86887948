"""Where Parallax differs from the public code on purpose (rewards/pa_grpo.py, parallax/formats/metrics.py):
each difference worked out by hand from the seed formulas."""

from __future__ import annotations

import pytest

from parallax.formats import compute_metrics, parse
from rewards.pa_grpo import pa_grpo_rewards, zscores


def test_factor_two_and_minus_alpha_z_of_T():
    # two right answers, T = [10, 30]: z(T) = [-1, 1]; alpha = 0.1, no other term
    # seed: R = -1 + 2 * (1 - 0.1 * z) = [1.2, 0.8]
    r, comp = pa_grpo_rewards([True, True], [10, 30], [0, 0], [0, 0], [0, 0], alpha=0.1, beta_sub=0, beta_trial=0)
    assert r == pytest.approx([1.2, 0.8]) and comp["z_T"] == pytest.approx([-1.0, 1.0])
    # the release: no factor 2 and +alpha * z(1 - T/total); with total = [20, 40]: 1 - T/total = [0.5, 0.25],
    # z = [1, -1], R = 1 * (1 + 0.1 * z) - 1 = [0.1, -0.1] -- half the spread, and a right answer at 0
    public = [1.0 * (1 + 0.1 * z) - 1 for z in zscores([0.5, 0.25])]
    assert public == pytest.approx([0.1, -0.1]) and r != pytest.approx(public)
    # a wrong answer is -1 whatever its shape
    r, _ = pa_grpo_rewards([False, True], [10, 30], [0, 0], [0, 0], [0, 0], alpha=0.1, beta_sub=0, beta_trial=0)
    assert r == pytest.approx([-1.0, 0.8])


def test_padding_a_branch_is_not_rewarded():
    # the same answer, the second sample pads a branch: T 10 -> 12, total 20 -> 40.
    # seed: z(T) = [-1, 1] -> the padded sample scores lower (0.8 < 1.2)
    r, _ = pa_grpo_rewards([True, True], [10, 12], [0, 0], [0, 0], [0, 0], alpha=0.1, beta_sub=0, beta_trial=0)
    assert r[1] < r[0]
    # the release's share 1 - T/total = [0.5, 0.7] rewards the padding
    assert zscores([0.5, 0.7])[1] > 0


def test_samples_without_stats_stay_out_of_the_z_statistics():
    # T = [10, 30, None]: mean 20 and population std 10 over the two with stats -> z = [-1, 1, 0]
    assert zscores([10, 30, None]) == pytest.approx([-1.0, 1.0, 0.0])
    # the release's [10, 30, 0]: mean 13.33, std 12.47 -> the first sample's z is no longer -1
    assert zscores([10, 30, 0])[0] == pytest.approx((10 - 40 / 3) / (((10 - 40 / 3) ** 2 + (30 - 40 / 3) ** 2
                                                                        + (40 / 3) ** 2) / 3) ** 0.5)
    assert zscores([10, 30, 0])[0] != pytest.approx(-1.0)


def test_wrapper_tags_off_the_critical_path_do_not_count():
    text = ("<Parallel><Outlines><Subtask>a</Subtask><Subtask>b</Subtask><Subtask>c</Subtask></Outlines>"
            "<Thread>x y z</Thread><Thread>w</Thread><Thread>v</Thread></Parallel>")
    # units: <Parallel> <Outlines> 3 entries x 3 </Outlines> = 12; threads 5 + 3 + 3 = 11; </Parallel> 1
    # total 24; T = 24 - 11 + 5 = 18 (the longest thread with its own two tags only)
    m = compute_metrics(parse(text, "parason"), "parason")
    assert (m.total_tokens, m.critical_path_tokens) == (24, 18)
    # counting every wrapper tag as sequential (the public code) would give 18 + 2 * 2 = 22


def test_nesting_is_recursive():
    inner = ("<Parallel><Outlines><Trial>p</Trial><Trial>q</Trial></Outlines>"
             "<Thread>a b c d</Thread><Thread>e</Thread></Parallel>")
    text = ("<Parallel><Outlines><Subtask>s</Subtask><Subtask>t</Subtask></Outlines>"
            f"<Thread>{inner}</Thread><Thread>f g h i j</Thread></Parallel>")
    # inner block: 1 + 1 + 3 + 3 + 1 (outline part 9) + threads 6 + 3 + </Parallel> 1 = 19; its T = 19 - 9 + 6 = 16
    # outer thread 1: 2 + 19 = 21 units, critical 2 + 16 = 18; thread 2: 2 + 5 = 7
    # outer: 1 + 1 + 3 + 3 + 1 = 9, + 21 + 7 + 1 = 38 total; T = 38 - 28 + max(18, 7) = 28
    m = compute_metrics(parse(text, "parason"), "parason")
    assert (m.total_tokens, m.critical_path_tokens, m.depth) == (38, 28, 2)
    # flattening one level (the nested block's branches summed into thread 1) gives T = 38 - 28 + 21 = 31
