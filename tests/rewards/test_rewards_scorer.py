"""RewardScorer (the reward actor's plain class): batches of groups, process-pool verification,
errors counted not raised."""

import time

import pytest

from actors.reward_worker import RewardGroup, RewardWorker
from rewards import RewardSpec

PAR = "<Parallel><Path>6*7</Path><Path>7*6</Path><Summary>42</Summary></Parallel> #### 42"


@pytest.fixture(scope="module")
def worker():
    w = RewardWorker("tiered", workers=2, timeout_s=2.0)
    yield w
    w.close()


def test_scores_groups_in_order_with_metrics(worker):
    groups = [
        RewardGroup([PAR, "#### 42", "#### 41"], "42"),
        RewardGroup(["so \\boxed{\\frac{1}{2}}", "\\boxed{0.4}"], "0.5"),  # math-verify path
        RewardGroup(["#### 204"], "204"),  # an AIME answer (an int in the data; the loaders give a string)
    ]
    out = worker.score(groups, step=3)
    assert out.rewards == [[1.2, 1.0, -1.0], [1.0, -1.0], [1.0]]
    assert out.correct == [[True, True, False], [True, False], [True]]
    assert out.errors == {}
    # 6 samples: rewards sum 1.2 + 1 - 1 + 1 - 1 + 1 = 2.2; 4 correct; 1 parallel
    assert out.metrics["reward/mean"] == pytest.approx(2.2 / 6)
    assert out.metrics["reward/correct"] == pytest.approx(4 / 6)
    assert out.metrics["reward/acc"] == pytest.approx(4 / 6)  # the rewards' "acc" component
    assert out.metrics["reward/parallel"] == pytest.approx(1 / 6)
    assert "timing/reward_analyse" in out.metrics


def test_a_group_that_is_not_a_reward_group_is_refused_by_name(worker):
    with pytest.raises(TypeError, match="RewardGroups"):
        worker.score([{"texts": ["#### 4"], "ground_truth": "4"}])
    with pytest.raises(TypeError, match="ground_truth: a string, got int 204"):
        RewardGroup(["#### 204"], 204)
    with pytest.raises(TypeError, match="texts: a list of strings"):
        RewardGroup("#### 4", "4")


def test_adversarial_items_time_out_without_crashing_the_step(worker):
    texts = [
        "\\boxed{9^{9^{9^{9}}}}",  # sympy would evaluate a gigantic power
        "\\boxed{(10^{10})!}",
        "#### " + "9" * 1_000_000,  # 1 MB of digits: too long, judged wrong without sympy
        "\\boxed{" + "1" * 100_000,  # unterminated box: no answer
        "#### 1",
    ]
    t0 = time.perf_counter()
    out = worker.score([RewardGroup(texts, "1")], step=8)
    elapsed = time.perf_counter() - t0
    assert out.correct == [[False, False, False, False, True]]
    assert out.rewards == [[-1.0, -1.0, -1.0, -1.0, 1.0]]
    # the two towers either time out (counted) or are rejected in time; never more than 2
    assert sum(out.errors.values()) <= 2
    assert set(out.errors) <= {"reward/errors/timeout"}
    assert elapsed < 10.0  # 2 workers x 2 s timeout, plus restarts
    assert worker.score([RewardGroup(["#### 5"], "5")]).correct == [[True]]  # still healthy


def test_per_call_spec_and_fallback_on_reward_bug():
    w = RewardWorker("accuracy", workers=1)
    try:
        # a stage switch: same worker, another reward for this call
        out = w.score([RewardGroup([PAR, "#### 42"], "42")], spec=RewardSpec("parallel_acc"))
        assert out.rewards == [[1.0, 0.0]]
        out = w.score([RewardGroup([None, "#### 42"], "42")])  # a non-text item is invalid, counted
        assert out.rewards == [[-1.0, 1.0]] and out.errors == {"reward/errors/bad_input": 1}
        assert w.score([]).rewards == []
    finally:
        w.close()
    with pytest.raises(ValueError, match="unknown reward"):
        RewardWorker("nope")
    with pytest.raises(ValueError, match="expects float"):
        RewardWorker("tiered", {"correct": "x"})


def test_format_only_reward_starts_no_processes():
    w = RewardWorker("format")
    out = w.score([RewardGroup([PAR, "<Parallel>", "plain"], "")])
    assert out.rewards == [[1.0, 0.0, 1.0]]
    assert w._pool is None  # nothing needed verification
    w.close()


def _burn(stop_at: float) -> None:
    while time.time() < stop_at:
        pass


def test_dapo_verifier_scores_correctly_on_busy_cores():
    """The issue's probe: DAPO's verifier at a 3 s timeout while every core is busy. verl's import
    (5-8 s, slower under load) happens before any item's clock starts, so nothing times out."""
    import multiprocessing as mp
    import os

    from rewards.scorer import RewardScorer

    stop = time.time() + 120
    burners = [mp.get_context("spawn").Process(target=_burn, args=(stop,), daemon=True)
               for _ in range(2 * (os.cpu_count() or 2))]
    for p in burners:
        p.start()
    scorer = RewardScorer("accuracy", {"verifier": "dapo"}, workers=2, timeout_s=3.0)
    try:
        texts = ["Answer: 4", "So the answer is Answer: 5", "Answer: 4", "no answer here", "Answer: 4"]
        out = scorer.score([RewardGroup(texts, "4"), RewardGroup(["Answer: 12"], "12")])
        assert out.correct == [[True, False, True, False, True], [True]]
        assert out.metrics["reward/timeouts"] == 0.0 and not out.errors
        assert "verl.utils.reward_score.math_dapo" in scorer.pool.preload
    finally:
        scorer.close()
        for p in burners:
            p.kill()


def test_a_step_where_most_answers_time_out_fails_loudly():
    from rewards.scorer import RewardScorer

    scorer = RewardScorer("accuracy", workers=2, timeout_s=0.5)
    try:
        towers = ["\\boxed{9^{9^{9^{9}}}}"] * 9 + ["#### 1"]
        with pytest.raises(RuntimeError, match=r"9 of 9 answers timed out .*reward\.timeout_s"):
            scorer.score([RewardGroup(towers, "1")])
        ok = scorer.score([RewardGroup(["#### 1", "\\boxed{9^{9^{9^{9}}}}"], "1")])
        assert ok.correct == [[True, False]] and ok.metrics["reward/timeouts"] in (0.0, 1.0)
    finally:
        scorer.close()
