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
    assert slow_verify(pred, "1", "math_verify") == (False, pred)
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
    assert slow_verify("9" * 1_000_000, "1", "math_verify") == (False, "9" * 1_000_000)  # too long: no sympy
    assert fast_verdict("9" * 1_000_000, "1") is None
    assert time.perf_counter() - t0 < 5.0
    assert extract_boxed("\\boxed{\\frac{1}{2}") is None
