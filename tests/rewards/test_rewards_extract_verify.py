"""Answer extraction, the exact fast path and math-verify equivalence."""

import time

import pytest

from rewards.extract import extract_answer, extract_boxed
from rewards.verify import fast_verdict, math_verify_equal, normalize, slow_verify


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so 6*7 = 42\n#### 42", "42"),
        ("#### 1,000.", "1,000"),
        ("#### $18 dollars", "18"),
        ("The answer is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("\\boxed{\\frac{\\sqrt{3}}{2}} and \\fbox{7}", "7"),  # the last one wins
        ("nested \\boxed{\\{1, \\{2\\}\\}}", "\\{1, \\{2\\}\\}"),
        ("\\boxed 5 is it", "5"),
        ("Answer: $\\frac{3}{4}$", "\\frac{3}{4}"),
        ("answer: 12\nthen #### 13", "13"),  # whichever starts last
        ("#### 13\nAnswer: \\boxed{12}", "12"),
        ("first \\boxed{3} then \\boxed{4", "3"),  # unterminated box ignored
        ("no answer at all", None),
        ("\\boxed{", None),
        ("####   ", None),
    ],
)
def test_extract(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "pred, gold, verdict",
    [
        ("42", "42", True),
        ("1,000", "1000", True),
        ("18.0", "18", True),  # exact decimal equality
        ("41", "42", False),  # two different integers: definite no, no sympy
        ("\\dfrac{1}{2}", "\\frac{1}{2}", True),
        ("\\text{Evelyn}", "Evelyn", True),
        ("$ 7 $", "7", True),
        ("\\frac{1}{2}", "0.5", None),  # undecided: math-verify's job
        ("x+1", "1+x", None),
    ],
)
def test_fast_verdict(pred, gold, verdict):
    assert fast_verdict(pred, gold) is verdict


@pytest.mark.parametrize(
    "pred, gold, equal",
    [
        ("\\frac{1}{2}", "0.5", True),
        ("3\\sqrt{13}", "\\sqrt{117}", True),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)", True),
        ("x+1", "1+x", True),
        ("\\frac{14}{3}+1", "\\frac{14}{3}", False),
        ("\\text{Evelyn}+1", "\\text{Evelyn}", False),
    ],
)
def test_math_verify_equal(pred, gold, equal):
    assert math_verify_equal(pred, gold) is equal


def test_model_text_is_never_evaluated(tmp_path):
    # math-verify's expression extractor would eval this through sympy.parse_expr
    marker = tmp_path / "pwned"
    pred = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    assert slow_verify(pred, "1", "math_verify")[:2] == (False, pred)
    assert not marker.exists()


def test_normalize_is_conservative():
    assert normalize("\\left(1,2\\right)") == "(1,2)"
    assert normalize("2") != normalize("-2")


def test_adversarial_text_is_bounded_in_process():
    t0 = time.perf_counter()
    assert extract_answer("9" * 1_000_000) is None
    assert extract_answer("\\boxed{" * 150_000) is None  # a megabyte of unterminated boxes
    assert extract_answer("\\boxed{" + "{" * 1_000_000) is None
    assert len(extract_answer("#### " + "9" * 1_000_000)) == 1_000_000
    assert slow_verify("x" * 1_000_000, "1", "math_verify") == (False, "x" * 1_000_000, "too_long")  # no sympy
    assert fast_verdict("9" * 1_000_000, "1") is False  # two plain numbers: compared digit by digit
    assert time.perf_counter() - t0 < 5.0
    assert extract_boxed("\\boxed{\\frac{1}{2}") is None


@pytest.mark.parametrize("pred, gold, verdict", [
    ("1e2", "100", True), ("1.5E-1", "0.15", True), ("-2e0", "-2", True), ("1e2", "101", False),
    ("0042.50", "42.5", True), ("-0", "0", True), ("1e99999", "1", None),  # exponent past 4 digits: not plain
])
def test_plain_numbers_compare_exactly_in_scientific_notation_too(pred, gold, verdict):
    assert fast_verdict(pred, gold) is verdict


def _one(text, gold, **opts):
    from rewards.analysis import AnalysisOptions, analyze_group

    return analyze_group([text], gold, AnalysisOptions("parallel_r1", **opts))[0]


def test_a_correct_hundred_thousand_digit_answer_is_right():
    """It was scored wrong with pred null and error null (over MAX_ANSWER_CHARS, never compared)."""
    big = "7" * 100_000
    t0 = time.perf_counter()
    right, wrong = _one(f"#### {big}", big), _one(f"#### {big}", big[:-1] + "8")
    assert (right.correct, right.reason, right.pred == big) == (True, None, True)
    assert (wrong.correct, wrong.reason) == (False, "mismatch")
    assert time.perf_counter() - t0 < 2.0


@pytest.mark.parametrize("text, gold, reason", [
    ("I am not sure.", "4", "no_answer"),
    ("<Parallel>" * 10_000 + "\\boxed{1}", "1", "no_answer"),  # unclosed blocks: nothing after the last one
    ("#### 41", "42", "mismatch"),
    ("#### x^{" + "2" * 2000 + "}", "4", "too_long"),
    ("#### \\frac{1}{3}", "\\sqrt{2}+", "unparseable"),  # math-verify reads nothing in the reference
    ("#### @@", "4", "unparseable"),  # no math read in the prediction
    ("\\boxed{x+2}", "x+1", "mismatch"),  # compared by math-verify: different
])
def test_every_wrong_verdict_says_why(text, gold, reason):
    s = _one(text, gold)
    assert (s.correct, s.reason) == (False, reason), (s.pred, s.reason)


def test_several_final_answers_are_a_setting():
    hedge = "#### 12\n#### 13"
    assert (_one(hedge, "13").correct, _one(hedge, "13").reason) == (True, None)  # last: verl's convention
    for text in (hedge, "\\boxed{12} \\boxed{13}", "Answer: 12\n#### 13"):
        s = _one(text, "13", multiple_answers="reject")
        assert (s.correct, s.reason) == (False, "multiple_answers"), text
    same = _one("#### 13\nso \\boxed{13.0}", "13", multiple_answers="reject")  # one answer, said twice
    assert (same.correct, same.reason) == (True, None)


def test_multiple_answers_is_checked_as_a_reward_param():
    from rewards.types import BaseParams

    assert BaseParams(multiple_answers="reject").multiple_answers == "reject"
    with pytest.raises(ValueError, match="multiple_answers must be 'last' or 'reject'"):
        BaseParams(multiple_answers="first")
