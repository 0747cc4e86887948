"""Answer extraction from the final part of a trajectory.

Three answer conventions are recognised; when several occur, the one that STARTS LAST in
the text wins (the model's final word):

* GSM8K / toy world: ``#### 42`` (rest of the line);
* ``\\boxed{...}`` / ``\\fbox{...}`` with nested braces (an unterminated box is ignored);
* DAPO: an ``Answer: ...`` line.

Only string scanning, linear in the text length: no regex backtracking, nothing evaluated.
The caller passes the part after the last join (see :func:`rewards.analysis.final_part`):
an answer written inside a branch does not count.

Example:
    >>> extract_answer("so \\\\boxed{\\\\frac{1}{2}} ... #### 7")
    '7'
    >>> extract_answer("The answer is \\\\boxed{\\\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    >>> extract_answer("no answer here") is None
    True
"""

from __future__ import annotations

import re

__all__ = ["extract_answer", "extract_answer_line", "extract_answers", "extract_boxed", "extract_gsm8k"]

_HASHES = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_LINE = re.compile(r"(?i)\banswer[ \t]*:[ \t]*([^\n]*)")


def _last_match(pattern: re.Pattern[str], text: str) -> tuple[int, str] | None:
    last = None
    for m in pattern.finditer(text):
        last = m
    if last is None:
        return None
    return last.start(), last.group(1)


def _clean(ans: str) -> str:
    """Strip spaces, a trailing full stop and wrapping ``$`` signs."""
    ans = ans.strip()
    while ans.endswith(".") and not ans.endswith(".."):
        ans = ans[:-1].rstrip()
    if len(ans) >= 2 and ans[0] == "$" and ans[-1] == "$":
        ans = ans.strip("$").strip()
    return ans


# Bounds that keep adversarial text (a megabyte of unterminated boxes) linear-time.
_MAX_BOX_CHARS = 20_000
_MAX_BOX_TRIES = 16


def _braced(text: str, open_pos: int) -> str | None:
    """Content of the brace group opening at ``text[open_pos] == '{'``; None if unterminated
    within ``_MAX_BOX_CHARS`` characters."""
    depth = 0
    i = open_pos
    n = min(len(text), open_pos + _MAX_BOX_CHARS)
    while i < n:
        c = text[i]
        if c == "\\":  # an escaped character (\{, \}) never opens or closes a group
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[open_pos + 1 : i]
        i += 1
    return None


def _last_boxed(text: str) -> tuple[int, str] | None:
    """Last *terminated* ``\\boxed{..}``/``\\fbox{..}`` (or ``\\boxed 5``) and its start."""
    pos = len(text)
    for _ in range(_MAX_BOX_TRIES):
        b = text.rfind("\\boxed", 0, pos)
        f = text.rfind("\\fbox", 0, pos)
        start = max(b, f)
        if start < 0:
            return None
        j = start + (len("\\boxed") if start == b else len("\\fbox"))
        if j < len(text) and text[j] == "{":
            content = _braced(text, j)
            if content is not None:
                return start, content
        elif j < len(text) and text[j] == " ":
            token = text[j + 1 :].split(maxsplit=1)
            if token:
                return start, token[0].split("$")[0]
        pos = start  # unterminated or malformed: look further left
    return None


def extract_boxed(text: str) -> str | None:
    """Content of the last terminated ``\\boxed{...}``, None if there is none."""
    hit = _last_boxed(text)
    return None if hit is None else _clean(hit[1])


_NUM_TOKEN = re.compile(r"[-+]?\$?[\d,]*\.?\d+\.?")


def _gsm8k_value(rest: str) -> str:
    """``#### 42 dollars`` -> ``42``: a leading number token alone, else the whole line."""
    rest = _clean(rest)
    first = rest.split(maxsplit=1)[0] if rest else ""
    return _clean(first.replace("$", "")) if first and _NUM_TOKEN.fullmatch(first) else rest


def extract_gsm8k(text: str) -> str | None:
    """Rest of the line after the last ``####`` (its leading number if it starts with one),
    None if absent or empty."""
    hit = _last_match(_HASHES, text)
    return (_gsm8k_value(hit[1]) or None) if hit else None


def extract_answer_line(text: str) -> str | None:
    """Rest of the last ``Answer:`` line (DAPO convention), None if absent or empty."""
    hit = _last_match(_ANSWER_LINE, text)
    return (_clean(hit[1]) or None) if hit else None


_BOX = re.compile(r"\\(?:boxed|fbox)")
_MAX_ANSWERS = 32  # more final answers than this is hedging whatever they say: not read further


def extract_answers(text: str) -> list[str]:
    """Every final answer ``text`` gives, as :func:`extract_answer` reads each: every ``####``
    line, every terminated box, every ``Answer:`` line (at most ``_MAX_ANSWERS + 1``; bounded like
    the rest of this module on adversarial text).

    >>> extract_answers("#### 12\n#### 13"), extract_answers("\\boxed{12} and \\boxed{12}")
    (['12', '13'], ['12', '12'])
    """
    out: list[str] = []
    for pattern in (_HASHES, _ANSWER_LINE):
        for m in pattern.finditer(text):
            ans = _gsm8k_value(m.group(1)) if pattern is _HASHES else _clean(m.group(1))
            inner = extract_boxed(ans) if "\\boxed" in ans or "\\fbox" in ans else None
            if inner or ans:
                out.append(inner or ans)
            if len(out) > _MAX_ANSWERS:
                return out
    failed = 0
    for m in _BOX.finditer(text):
        j = m.end()
        content = _braced(text, j) if j < len(text) and text[j] == "{" else None
        if content is not None and _clean(content):
            out.append(_clean(content))
        elif (failed := failed + 1) > 4 * _MAX_BOX_TRIES:  # a run of unterminated boxes: stop scanning
            break
        if len(out) > _MAX_ANSWERS:
            break
    return out


def extract_answer(text: str) -> str | None:
    """The final answer of ``text``: whichever convention starts last wins.

    An ``Answer:`` line whose content is itself a ``\\boxed{}`` yields the box content.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    cands = []
    for hit in (_last_match(_HASHES, text), _last_boxed(text), _last_match(_ANSWER_LINE, text)):
        if hit is not None and _clean(hit[1]):
            cands.append(hit)
    if not cands:
        return None
    start, ans = max(cands, key=lambda h: h[0])
    ans = _gsm8k_value(ans) if text.startswith("####", start) else _clean(ans)
    inner = extract_boxed(ans) if "\\boxed" in ans or "\\fbox" in ans else None
    return inner if inner else ans
