"""Units: default-unit word counting, the tag split, and the tokenizer adapters.

Default unit (the metrics' unit when no tokenizer is given, see :mod:`parallax.formats.metrics`): every tag
string counts 1, every other piece of text counts its whitespace-separated words, whitespace being
the code points <= 32.

Accelerator
-----------
``parallax.formats._speedups`` (``parallax/formats/_speedups.c``, built by ``setup.py`` as an *optional* extension)
splits a text at the format's tags and counts the words of every piece in one pass over the
string.  Without it (no C compiler at install time), or with ``PARALLAX_FORMATS_PURE=1`` in the
environment, the pure-Python path runs instead: a regex split, and the word counts from one
vectorised numpy pass (:func:`part_words`) only when metrics need them.  Both paths give identical
results (``tests/formats/test_formats_speedups.py``); :func:`use_speedups` switches at run time.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from importlib import import_module

try:  # the compiled extension, by its full name (it imports nothing back from formats)
    _speedups = import_module("parallax.formats._speedups")
except ImportError:  # not built: pure-Python path
    _speedups = None

__all__ = ["part_words", "speedups_available", "speedups_enabled", "split_tags", "use_speedups"]

_split_c = None  # the accelerator's split_tags while enabled, else None


def speedups_available() -> bool:
    """Whether the C accelerator was built."""
    return _speedups is not None


def speedups_enabled() -> bool:
    """Whether the tag split currently runs in the C accelerator."""
    return _split_c is not None


def use_speedups(on: bool) -> bool:
    """Use the C accelerator (``True``) or the pure-Python path (``False``); returns the previous
    setting.  Raises ``RuntimeError`` when asked for the accelerator and it is not built."""
    global _split_c
    if on and _speedups is None:
        raise RuntimeError("parallax.formats._speedups is not built (pip install -e . with a C compiler)")
    prev = _split_c is not None
    _split_c = _speedups.split_tags if on else None
    return prev


use_speedups(_speedups is not None and os.environ.get("PARALLAX_FORMATS_PURE", "0") in ("", "0"))


def split_tags(text: str, tags: tuple[str, ...], regex_split) -> tuple[list[str], list[int] | None]:
    """``(parts, words)``: ``parts == regex_split(text)`` (text, tag, ..., text), where ``regex_split``
    splits at the alternation of ``tags`` in that order; ``words`` is ``[_words(p) for p in parts]``
    from the accelerator, or ``None`` on the pure path (compute it with :func:`part_words`)."""
    split = _split_c
    if split is not None:
        return split(text, tags)
    return regex_split(text), None


# --------------------------------------------------------------------------- default units

#: Default-unit whitespace: code points 0-32 (space and the ASCII control characters, which
#: include \t \n \v \f \r); every other character is part of a word.
_WS_TABLE = bytes(32 if b <= 32 else 97 for b in range(256))


def _words(s: str) -> int:
    """Whitespace-separated words of ``s`` (a tag string is one word)."""
    if not s:
        return 0
    # UTF-8 bytes <= 32 are exactly the code points <= 32 (multi-byte sequences are >= 0x80)
    b = s.encode("utf-8", "surrogatepass").translate(_WS_TABLE)
    return b.count(b" a") + (b[0] == 97)


def part_words(text: str, parts: list) -> list[int]:
    """Whitespace-word count of every element of ``parts`` (a split of ``text``), vectorised.

    One numpy pass over the text finds every word start; each part's count is then a binary
    search.  Equals ``[_words(p) for p in parts]``.
    """
    import numpy as np

    n = len(text)
    if n == 0:
        return [0] * len(parts)
    if text.isascii():
        arr = np.frombuffer(text.encode("ascii"), np.uint8)
    else:  # one code unit per character, so part lengths are offsets
        arr = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    ws = arr <= 32
    starts = np.flatnonzero(ws[:-1] > ws[1:])  # p: whitespace at p, a word starts at p + 1
    lens = np.array(list(map(len, parts)))
    e = lens.cumsum()
    a = e - lens
    m = len(parts)
    # word starts strictly inside (a, e) are p in [a, e - 1); plus one if the part starts a word
    q = np.searchsorted(starts, np.concatenate((e - 1, a)))
    first = ~ws[np.minimum(a, n - 1)]
    return np.where(lens > 0, q[:m] - q[m:] + first, 0).tolist()


def _default_count(s: str, is_tag: bool) -> int:
    return 1 if is_tag else _words(s)


# --------------------------------------------------------------------------- tokenizer units


def _token_starts(tokenizer, text: str) -> list[int] | None:
    """Sorted token start offsets of ``text`` from one tokenisation, or ``None`` if unavailable."""
    offsets = None
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
    except Exception:  # noqa: BLE001
        offsets = None
    if offsets is None:
        try:
            enc = tokenizer.encode(text, add_special_tokens=False)
            offsets = getattr(enc, "offsets", None)
        except Exception:  # noqa: BLE001
            offsets = None
    if offsets is None:
        return None
    if (
        offsets
        and isinstance(offsets[0], (list, tuple))
        and offsets[0]
        and isinstance(offsets[0][0], (list, tuple))
    ):
        offsets = offsets[0]  # batched output
    starts = [int(o[0]) for o in offsets]
    if any(starts[i] > starts[i + 1] for i in range(len(starts) - 1)):
        starts.sort()
    return starts


def _encode_len(tokenizer, s: str) -> int:
    if not s:
        return 0
    try:
        ids = tokenizer.encode(s, add_special_tokens=False)
    except TypeError:
        ids = tokenizer.encode(s)
    ids = getattr(ids, "ids", ids)
    return len(ids)


def _offset_counter(starts: list[int]):
    """Counter charging each consecutive piece the tokens whose start offset lies inside it."""
    state = [0, 0]  # char cursor, token index at cursor

    def count(s: str, is_tag: bool) -> int:
        state[0] += len(s)
        i = bisect_left(starts, state[0])
        u = i - state[1]
        state[1] = i
        return u

    return count


def _encode_counter(tokenizer):
    """Counter encoding each piece separately (tokenizers without offsets); tags are cached."""
    cache: dict[str, int] = {}

    def count(s: str, is_tag: bool) -> int:
        if is_tag:
            u = cache.get(s)
            if u is None:
                u = cache[s] = _encode_len(tokenizer, s)
            return u
        return _encode_len(tokenizer, s)

    return count
