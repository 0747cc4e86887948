"""Answer equivalence: a fast exact path, math-verify, and verl's DAPO scorer.

``verify(pred, gold)`` decides in three steps:

1. :func:`fast_verdict` -- normalised string equality, then exact equality of plain numbers
   (``"1,000" == "1000"``, ``"18.0" == "18"``, ``"1e2" == "100"``), compared digit by digit
   at any length.  Two different numbers are a definite *no*.  This settles the toy world's
   integer answers without sympy.
2. :func:`math_verify_equal` -- math-verify with the **LaTeX extractor only**: it parses
   through latex2sympy's ANTLR grammar.  math-verify's plain-expression extractor is never
   used because it goes through ``sympy.parse_expr``, i.e. ``eval`` of model text.
3. ``verifier="dapo"`` replaces both with verl's ``math_dapo.compute_score`` on the final
   text (DAPO-faithful: ``Answer:`` line, Minerva normalisation, exact match, +-1).

sympy can hang (``9^9^9^9``); run steps 2-3 under :class:`rewards.pool.TimeoutPool`, which
kills a worker past its per-item timeout.  Step 1 is cheap and bounded, safe in-process.

Example:
    >>> fast_verdict("1,000", "1000"), fast_verdict("41", "42"), fast_verdict("1/2", "0.5")
    (True, False, None)

Every verdict that is not *correct* carries its reason (``Analysis.reason``): ``no_answer`` (nothing
extracted), ``too_long`` (over ``MAX_ANSWER_CHARS`` and not a plain number), ``unparseable``
(math-verify read nothing in the prediction or the reference), ``mismatch`` (compared: different),
``multiple_answers`` (``multiple_answers="reject"`` and the text gives several), or the error of a
verification that failed (``timeout``, ``crash``, ...).
"""

from __future__ import annotations

import re
import threading

__all__ = [
    "MAX_ANSWER_CHARS",
    "dapo_correct",
    "fast_verdict",
    "math_verify_equal",
    "normalize",
    "slow_verify",
]

#: Longer extracted answers are judged wrong without calling sympy (no real answer is this
#: long; a megabyte of digits would only burn the timeout).
MAX_ANSWER_CHARS = 1000

_SPACING = re.compile(r"\\[!,;: ]|\\quad|\\qquad|\s+")
_NUMBER = re.compile(r"([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d{1,4}))?")
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")


def normalize(ans: str) -> str:
    """Conservative normal form: no spacing, ``$``, ``\\left``/``\\right``, trailing ``.``;
    ``\\dfrac``/``\\tfrac`` -> ``\\frac``; a ``\\text{..}`` wrapper around the whole answer
    dropped.  Never maps two different values to one string."""
    s = ans.strip().strip("$")
    s = _SPACING.sub("", s)
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    if s.startswith("\\text{") and s.endswith("}") and s.count("{") == 1:
        s = s[len("\\text{") : -1]
    return s.rstrip(".")


def _as_number(s: str) -> str | None:
    """A plain number's exact canonical form (sign, digits without leading zeros, point, digits
    without trailing zeros), else None: ``"0042.50"`` -> ``"42.5"``, ``"1e2"`` -> ``"100"``. Built
    from the digits, so any length costs linear time (a 100,000-digit answer was refused, unread)."""
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    m = _NUMBER.fullmatch(s)
    if m is None:
        return None
    sign, whole, frac, exp = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    if not whole and not frac:
        return None
    shift = int(exp) if exp else 0  # at most 4 digits: a shift of <= 9999 places
    digits, point = whole + frac, len(whole) + shift
    if point <= 0:
        digits, point = "0" * (1 - point) + digits, 1
    digits += "0" * max(0, point - len(digits))
    whole, frac = digits[:point].lstrip("0") or "0", digits[point:].rstrip("0")
    body = whole + ("." + frac if frac else "")
    return body if body == "0" or sign != "-" else "-" + body


def fast_verdict(pred: str, gold: str) -> bool | None:
    """True/False when decidable without sympy, None when math-verify must decide."""
    p, g = normalize(pred), normalize(gold)
    if p == g:
        return True
    pn, gn = _as_number(p), _as_number(g)
    if pn is not None and gn is not None:
        return pn == gn
    return None


def _soft_timeout(seconds: int) -> int | None:
    # math-verify's own timeout uses signal.alarm, which only works in the main thread;
    # elsewhere (threads of a Ray actor) the pool's hard kill is the only guard.
    return seconds if threading.current_thread() is threading.main_thread() else None


def math_verify_equal(pred: str, gold: str, soft_timeout_s: int = 5) -> bool:
    """math-verify equivalence of two answer strings, LaTeX extraction only (no ``eval``)."""
    return math_verify_verdict(pred, gold, soft_timeout_s)[0]


def math_verify_verdict(pred: str, gold: str, soft_timeout_s: int = 5) -> tuple[bool, str | None]:
    """``(equal, reason)``: reason ``unparseable`` when math-verify reads nothing in one of the two,
    ``mismatch`` when it compared them and they differ, None when equal."""
    import logging

    from math_verify import LatexExtractionConfig, parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its no-timeout warning is expected
    t = _soft_timeout(soft_timeout_s)
    cfg = [LatexExtractionConfig(boxed_match_priority=0)]
    gold_p = parse(f"\\boxed{{{gold}}}", extraction_config=cfg, parsing_timeout=t)
    pred_p = parse(f"\\boxed{{{pred}}}", extraction_config=cfg, parsing_timeout=t)
    if not gold_p or not pred_p:
        return False, "unparseable"
    if verify(gold_p, pred_p, timeout_seconds=t):
        return True, None
    # math-verify keeps the raw string beside what it read: a side with nothing else was not read as math
    read = all(any(not isinstance(x, str) for x in side) for side in (gold_p, pred_p))
    return False, "mismatch" if read else "unparseable"


def dapo_correct(final_text: str, gold: str) -> tuple[bool, str | None]:
    """verl's DAPO scorer (``math_dapo.compute_score``) on the final text: (correct, pred).

    Importing verl pulls torch; this runs inside pool workers only.
    """
    from verl.utils.reward_score.math_dapo import compute_score

    out = compute_score(final_text, gold)
    return bool(out["acc"]), out.get("pred")


def preload_modules(verifiers) -> tuple[str, ...]:
    """What a verification worker imports before it takes an item, for these verifiers: math-verify
    always (the fast path falls back to it), verl's DAPO scorer (5-8 s to import) for ``dapo``."""
    mods = ("rewards.verify", "math_verify")
    return mods + (("verl.utils.reward_score.math_dapo",) if "dapo" in set(verifiers) else ())


def slow_verify(pred: str | None, gold: str, verifier: str,
                final_text: str = "") -> tuple[bool, str | None, str | None]:
    """The sympy / verl step, ``(correct, pred, reason)`` (reason None when correct); meant for a
    pool worker.

    ``verifier="dapo"`` scores ``final_text``; ``"math_verify"`` compares ``pred`` to ``gold``.
    """
    if verifier == "dapo":
        correct, got = dapo_correct(final_text, gold)
        return correct, got, None if correct else ("mismatch" if got else "no_answer")
    if verifier != "math_verify":
        raise ValueError(f"unknown verifier {verifier!r}")
    if pred is None:
        return False, pred, "no_answer"
    if len(pred) > MAX_ANSWER_CHARS:
        return False, pred, "too_long"
    equal, reason = math_verify_verdict(pred, gold)
    return equal, pred, reason
