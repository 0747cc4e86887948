"""pass@k / mean@k / budgets / strata against hand-worked values and independent brute force."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest

from parallax.evaluation import evaluate_outputs, flatten_metrics, mean_at_k, pass_at_k
from parallax.evaluation.metrics import stratum_of

PR = "<Parallel><Path>6*7=42</Path><Path>7*6=42</Path><Summary>42</Summary></Parallel> #### 42"  # 13 units, T=10
PARASON = ("First. <Parallel><Outlines><Subtask>3*4</Subtask><Subtask>5*6</Subtask></Outlines>"
           "<Thread>3*4=12</Thread><Thread>5*6=30</Thread></Parallel> 12+30=42 #### 42")  # formats docstring: 20, T=17


def brute_pass(n: int, c: int, k: int) -> Fraction:
    """Share of all k-subsets of n samples (the first c correct) holding a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(any(i < c for i in s) for s in subsets), len(subsets))


@pytest.mark.parametrize("n,c,k,want", [(4, 1, 2, 0.5), (5, 2, 1, 0.4), (5, 0, 3, 0.0), (3, 3, 1, 1.0),
                                        (10, 1, 10, 1.0), (16, 2, 4, 1 - (14 * 13 * 12 * 11) / (16 * 15 * 14 * 13))])
def test_pass_at_k_hand_values(n, c, k, want):
    assert pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)


def test_pass_at_k_matches_enumeration():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(float(brute_pass(n, c, k)), abs=1e-12), (n, c, k)


@pytest.mark.parametrize("args", [(0, 0, 1), (3, 4, 1), (3, 1, 4), (3, 1, 0), (3, -1, 1)])
def test_pass_at_k_rejects_bad_input(args):
    with pytest.raises(ValueError):
        pass_at_k(*args)


def test_hand_made_outputs_parallel_r1():
    s = [{"uid": "a", "benchmark": "b", "text": PR, "answer": "42"},
         {"uid": "a", "benchmark": "b", "text": "#### 41", "answer": "42"},
         {"uid": "c", "benchmark": "b", "text": "x y z #### 7", "answer": "7"},
         {"uid": "c", "benchmark": "b", "text": "#### 7", "answer": "7"}]
    r = evaluate_outputs(s, "parallel_r1", budgets=[3, 8, 100])
    b = r["benchmarks"]["b"]
    assert r["k"] == 2 and b["n_problems"] == 2
    assert b["mean@2"] == pytest.approx(0.75) and b["pass@1"] == pytest.approx(0.75) and b["pass@2"] == 1.0
    assert b["parallel_ratio"] == 0.25 and b["format_valid"] == 1.0
    assert b["first_parallel_pos"] == 0.0
    assert b["total_tokens"] == pytest.approx((13 + 2 + 5 + 2) / 4)
    assert b["critical_path_tokens"] == pytest.approx((10 + 2 + 5 + 2) / 4)
    assert b["speedup"] == pytest.approx(22 / 19)
    assert b["speedup_per_sample"] == pytest.approx((1.3 + 1 + 1 + 1) / 4)
    # B=3: only "#### 7" (T=2) counts; B=8: problem c fully, PR (T=10) is over budget.
    assert b["budget_acc"] == pytest.approx({"3": 0.25, "8": 0.5, "100": 0.75})
    flat = flatten_metrics(r)
    assert flat["eval/b/acc@8"] == pytest.approx(0.5) and flat["eval/overall/mean@2"] == pytest.approx(0.75)


def test_parason_metrics_and_malformed_text():
    bad = "go <Parallel><Outlines><Trial>x</Trial> #### 41"  # malformed (cannot run in parallel), wrong
    r = evaluate_outputs([{"uid": "p", "text": PARASON, "answer": "42"}, {"uid": "p", "text": bad, "answer": "42"}],
                         "parason", budgets=[16, 17])
    d = r["benchmarks"]["default"]
    assert d["format_valid"] == 0.5 and d["parallel_ratio"] == 0.5
    assert d["first_parallel_pos"] == pytest.approx(0.05)  # 1 unit before <Parallel> of 20
    assert d["subtask_share"] == pytest.approx(0.6 / 2)
    n_bad = 8  # go <Parallel> <Outlines> <Trial> x </Trial> #### 41: T = total for a malformed text
    assert d["critical_path_tokens"] == pytest.approx((17 + n_bad) / 2)
    assert d["total_tokens"] == pytest.approx((20 + n_bad) / 2)
    assert d["mean@2"] == 0.5
    assert d["budget_acc"] == pytest.approx({"16": 0.0, "17": 0.5})  # T=17 fits B=17 only


def test_against_independent_computation_on_random_outputs():
    rng = random.Random(7)
    samples, truth = [], {}
    for bench in ("aime24", "math500"):
        for u in range(12):
            rows = []
            for _ in range(6):
                c, t = rng.random() < 0.4, rng.randint(1, 60)
                rows.append((c, t))
                samples.append({"uid": f"{bench}{u}", "benchmark": bench, "text": "x", "answer": "1", "correct": c,
                                    "critical_path_tokens": t, "problem_number": u + 1})
            truth[(bench, u)] = rows
    budgets = [5, 20, 40]
    r = evaluate_outputs(samples, "parallel_r1", 6, budgets=budgets, pass_ks=[1, 2, 3, 6])
    for bench in ("aime24", "math500"):
        probs = [truth[(bench, u)] for u in range(12)]
        b = r["benchmarks"][bench]
        assert b["mean@6"] == pytest.approx(sum(sum(c for c, _ in p) / 6 for p in probs) / 12)
        for k in (1, 2, 3, 6):
            want = sum(float(brute_pass(6, sum(c for c, _ in p), k)) for p in probs) / 12
            assert b[f"pass@{k}"] == pytest.approx(want)
        for B in budgets:
            want = sum(sum(c and t <= B for c, t in p) / 6 for p in probs) / 12
            assert b["budget_acc"][str(B)] == pytest.approx(want)
        assert b["critical_path_tokens"] == pytest.approx(sum(t for p in probs for _, t in p) / 72)
    aime = r["benchmarks"]["aime24"]["strata"]
    assert list(aime) == ["easy", "medium", "hard"]  # problem numbers 1..12: terciles of 4
    easy = [truth[("aime24", u)] for u in range(4)]
    assert aime["easy"]["mean@6"] == pytest.approx(sum(sum(c for c, _ in p) / 6 for p in easy) / 4)
    assert r["overall"]["avg_mean@6"] == pytest.approx(
        (r["benchmarks"]["aime24"]["mean@6"] + r["benchmarks"]["math500"]["mean@6"]) / 2)


def test_k_selects_first_samples_and_checks_counts():
    s = [{"uid": "a", "text": "", "answer": "1", "correct": c} for c in (True, False, False)]
    assert evaluate_outputs(s, k=1, budgets=[1])["benchmarks"]["default"]["mean@1"] == 1.0
    assert evaluate_outputs(s, budgets=[1])["k"] == 3
    with pytest.raises(ValueError, match="fewer samples"):
        evaluate_outputs(s, k=4)
    with pytest.raises(ValueError, match="uid"):
        evaluate_outputs([{"text": "x", "answer": "1"}])
    with pytest.raises(ValueError, match="budgets"):
        evaluate_outputs(s, budgets=[0])
    with pytest.raises(ValueError, match="format"):
        evaluate_outputs(s, "nope")


@pytest.mark.parametrize("sample,want", [
    ({"benchmark": "aime25", "problem_number": 1}, "easy"), ({"benchmark": "aime25", "problem_number": 5}, "easy"),
    ({"benchmark": "aime25", "problem_number": 6}, "medium"), ({"benchmark": "aime25", "problem_number": 11}, "hard"),
    ({"benchmark": "aime25", "problem_number": 15}, "hard"), ({"benchmark": "math500", "level": 3}, "level_3"),
    ({"benchmark": "toyworld", "difficulty": 2}, "difficulty_2"), ({"benchmark": "amc23", "problem_number": 3}, None),
])
def test_strata(sample, want):
    assert stratum_of(sample, 15) == want


def test_mean_at_k():
    assert mean_at_k([True, False, True, True]) == 0.75
    with pytest.raises(ValueError):
        mean_at_k([])
