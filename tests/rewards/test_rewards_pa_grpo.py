"""PA-GRPO and acceleration math against values worked out by hand."""

import math

import pytest

from rewards import Analysis, RewardContext, TrajStats, score_group
from rewards.pa_grpo import acceleration, pa_grpo_rewards, transform, zscores
from rewards.parason import PAGRPOParams, pa_grpo

S = 1.224744871391589  # 1/sqrt(2/3): z of the ends of [a-d, a, a+d] with population std


def test_zscores_table():
    # [10, 20, 30]: mean 20, population var (100 + 0 + 100)/3, std 8.165 -> z = -+1.2247
    assert zscores([10, 20, 30]) == pytest.approx([-S, 0.0, S])
    # sample std (ddof 1): var 200/2 = 100, std 10 -> z = [-1, 0, 1]
    assert zscores([10, 20, 30], ddof=1) == pytest.approx([-1.0, 0.0, 1.0])
    assert zscores([5, 5, 5]) == [0.0, 0.0, 0.0]  # zero spread
    assert zscores([0.1, 0.1, 0.1]) == [0.0, 0.0, 0.0]  # float-noise spread counts as zero
    assert zscores([7]) == [0.0] and zscores([7], ddof=1) == [0.0]  # group of one
    assert zscores([]) == []
    assert zscores([10, None, 30]) == [-1.0, 0.0, 1.0]  # None excluded from mean/std
    with pytest.raises(ValueError):
        zscores([1.0, float("nan")])


def test_transform_and_clip():
    assert transform(-2.0, "linear") == -2.0
    assert transform(0.0, "sigmoid") == 0.5
    assert transform(1.0, "sigmoid") == pytest.approx(1 / (1 + math.exp(-1)))  # 0.731059
    assert transform(-1000.0, "sigmoid") == pytest.approx(0.0)  # no overflow
    with pytest.raises(ValueError):
        transform(0.0, "tanh")
    assert acceleration(0.1, rho=1.0, rho_clip=0.2) == pytest.approx(0.1)  # rho*eta under the clip
    assert acceleration(0.5, rho=1.0, rho_clip=0.2) == 0.2  # clipped


KW = {"alpha": 0.1, "beta_sub": 0.1, "beta_trial": 0.05, "rho": 0.5, "rho_clip": 0.2}
T3, SUB3, TRIAL3, ETA3 = [10, 20, 30], [0.0, 0.3, 0.6], [0.2, 0.2, 0.2], [0.5, 0.1, 0.0]


@pytest.mark.parametrize(
    "correct, kw, expected",
    [
        # linear: z_T = z_sub = [-S, 0, S] (cancel as alpha = beta_sub), z_trial = 0 (no spread),
        # accel = min(0.5*[0.5, 0.1, 0], 0.2) = [0.2, 0.05, 0]:
        # R = -1 + 2*(1 + accel) = [1.4, 1.1, 1.0]
        ([True, True, True], dict(KW, f="linear"), [1.4, 1.1, 1.0]),
        # sigmoid: f(z_T) = f(z_sub) still cancel, beta_trial * f(0) = 0.05*0.5 = 0.025:
        # R = -1 + 2*(1.025 + accel) = [1.45, 1.15, 1.05]
        ([True, True, True], dict(KW, f="sigmoid"), [1.45, 1.15, 1.05]),
        # the wrong sample gets -1 whatever its shape; the others as above
        ([True, False, True], dict(KW, f="linear"), [1.4, -1.0, 1.0]),
        ([False, False, False], dict(KW, f="sigmoid"), [-1.0, -1.0, -1.0]),  # all wrong
    ],
)
def test_pa_grpo_three_samples(correct, kw, expected):
    rewards, comp = pa_grpo_rewards(correct, T3, SUB3, TRIAL3, ETA3, **kw)
    assert rewards == pytest.approx(expected)
    assert comp["z_T"] == pytest.approx([-S, 0.0, S])
    assert comp["accel"] == pytest.approx([0.2, 0.05, 0.0])


@pytest.mark.parametrize(
    "T, kw, expected",
    [
        # alpha only, linear: z_T = [-1, 1] -> R = -1 + 2*(1 -+ 0.1) = [1.2, 0.8]
        ([10, 30], {"alpha": 0.1, "f": "linear"}, [1.2, 0.8]),
        # alpha only, sigmoid: f(-1) = 0.268941, f(1) = 0.731059
        # R = -1 + 2*(1 - 0.0268941) = 0.946212 ; -1 + 2*(1 - 0.0731059) = 0.853788
        ([10, 30], {"alpha": 0.1, "f": "sigmoid"}, [0.946212, 0.853788]),
        # sample std: std = sqrt(200/1) = 14.142, z = -+0.707107 -> R = -1 + 2*(1 +- 0.0707107)
        ([10, 30], {"alpha": 0.1, "f": "linear", "ddof": 1}, [1.141421, 0.858579]),
        # all-equal T: z = 0 -> R = 1 (linear) ; sigmoid: -1 + 2*(1 - 0.1*0.5) = 0.9
        ([5, 5], {"alpha": 0.1, "f": "linear"}, [1.0, 1.0]),
        ([5, 5], {"alpha": 0.1, "f": "sigmoid"}, [0.9, 0.9]),
    ],
)
def test_pa_grpo_latency_term(T, kw, expected):
    n = len(T)
    rewards, _ = pa_grpo_rewards(
        [True] * n, T, [0.0] * n, [0.0] * n, [0.0] * n, beta_sub=0, beta_trial=0, **kw
    )
    assert rewards == pytest.approx(expected, abs=1e-6)


def test_pa_grpo_group_of_one_and_clip():
    # one sample: every z = 0; accel = min(0.5*0.8, 0.2) = 0.2 -> R = -1 + 2*1.2 = 1.4
    r, _ = pa_grpo_rewards(
        [True],
        [100],
        [0.3],
        [0.4],
        [0.8],
        alpha=0.1,
        beta_sub=0.1,
        beta_trial=0.1,
        rho=0.5,
        rho_clip=0.2,
        f="linear",
    )
    assert r == pytest.approx([1.4])
    # ... sample std on one sample has no spread either: same answer
    r1, _ = pa_grpo_rewards([True], [100], [0.3], [0.4], [0.8], alpha=0.1, rho=0.5, rho_clip=0.2, ddof=1)
    assert r1 == pytest.approx([1.4])
    # under the clip: rho*eta = 1.0*0.1 = 0.1 -> R = -1 + 2*1.1 = 1.2
    r2, _ = pa_grpo_rewards([True], [1], [0], [0], [0.1], rho=1.0, rho_clip=0.2)
    assert r2 == pytest.approx([1.2])
    with pytest.raises(ValueError):
        pa_grpo_rewards([True, True], [1], [0, 0], [0, 0], [0, 0])  # length mismatch


def _st(T, sub=0.0, trial=0.0, eta=0.0, valid=True):
    return TrajStats(
        total_tokens=100,
        critical_tokens=T,
        sub_share=sub,
        trial_share=trial,
        eta=eta,
        n_blocks=1,
        valid=valid,
    )


def test_pa_grpo_reward_excludes_malformed_from_statistics():
    # valid T = 10, 30 -> z = -1, +1; the malformed sample is left out (z = 0, eta = 0)
    # alpha = 0.1 linear: R = -1 + 2*(1 +- 0.1) = [1.2, 0.8]; malformed but correct: 1.0
    g = [
        Analysis(True, "1", _st(10)),
        Analysis(True, "1", _st(30)),
        Analysis(True, "1", _st(99, eta=0.9, valid=False)),
    ]
    out = pa_grpo(g, RewardContext(), PAGRPOParams(alpha=0.1, beta_sub=0, beta_trial=0, rho=1.0))
    assert out.rewards == pytest.approx([1.2, 0.8, 1.0])
    assert out.components["z_T"] == pytest.approx([-1.0, 1.0, 0.0])
    # require_valid_format: the malformed correct sample now counts as wrong
    out2 = pa_grpo(
        g, RewardContext(), PAGRPOParams(alpha=0.1, beta_sub=0, beta_trial=0, require_valid_format=True)
    )
    assert out2.rewards[2] == -1.0 and out2.correct == [True, True, False]


PAR = (
    "First. <Parallel><Outlines><Subtask>3*4</Subtask><Subtask>5*6</Subtask></Outlines>"
    "<Thread>3*4=12</Thread><Thread>5*6=30</Thread></Parallel> 12+30=42 #### 42"
)
SER = "3*4=12 5*6=30 12+30=42 #### 42"


def test_pa_grpo_end_to_end_on_parason_texts():
    # PAR (formats' worked example): total 20, T 17, eta 3/20, sub_share 0.6 ; SER: total 5, T 5
    # z_T = [1, -1], z_sub = [1, -1], z_trial = 0; accel = [min(0.15, 0.2), 0] = [0.15, 0]
    # R_PAR = -1 + 2*(1 - 0.1 + 0.1 + 0.15) = 1.3 ; R_SER = -1 + 2*(1 + 0.1 - 0.1) = 1.0 ; wrong: -1
    out = score_group(
        "pa_grpo",
        [PAR, SER, SER.replace("#### 42", "#### 41")],
        "42",
        params={"alpha": 0.1, "beta_sub": 0.1, "beta_trial": 0.05, "rho": 1.0, "rho_clip": 0.2},
    )
    assert out.correct == [True, True, False]
    # T = [17, 5, 5]: mean 9, deviations 8, -4, -4, pop std sqrt(96/3) = 5.657 -> z = 1.414, -0.707, -0.707
    assert out.components["z_T"] == pytest.approx([math.sqrt(2), -math.sqrt(0.5), -math.sqrt(0.5)])
    # z_sub = same shape as z_T (0.6, 0, 0); alpha = beta_sub so the two cancel: R = -1 + 2*(1 + accel)
    assert out.rewards == pytest.approx([1.3, 1.0, -1.0])
    out2 = score_group("acceleration", [PAR, SER], "42")  # rho 1, clip 0.2: min(0.15, 0.2) = 0.15
    assert out2.rewards == pytest.approx([0.15, 0.0])


def test_bad_params_are_clear_errors():
    with pytest.raises(ValueError, match="f must be"):
        score_group("pa_grpo", [SER], "42", params={"f": "cubic"})
    with pytest.raises(ValueError, match="unknown param"):
        score_group("pa_grpo", [SER], "42", params={"betasub": 0.1})
    with pytest.raises(ValueError, match="std must be"):
        score_group("pa_grpo", [SER], "42", params={"std": "robust"})
