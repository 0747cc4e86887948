"""C accelerator (parallax.formats._speedups) vs the pure-Python path: identical splits, word counts,
parse results and metrics, on fuzz inputs, every string kind (1/2/4-byte, surrogates) and huge texts."""

import os
import random
import re
import subprocess
import sys
from contextlib import contextmanager

import pytest
from fmt_strategies import FRAGMENTS, mutate, trees
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_formats_fuzz import GENERATORS, SPECS

from parallax.formats import PARALLEL_R1, PARASON, compute_metrics, get_spec, parse, render, text_stats, units
from parallax.formats.scan import _compiled
from parallax.formats.units import _words, part_words

needs_c = pytest.mark.skipif(not units.speedups_available(), reason="parallax.formats._speedups is not built")

# non-ASCII tags: the text and the tags may have different string kinds
WIDE = get_spec(
    "parason", thread_open="<Нить>", thread_close="</Нить>", trial_open="<试>", trial_close="</试>"
)
ALL_SPECS = (*SPECS, WIDE)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ANY_CHAR = st.characters(codec=None, exclude_categories=())  # surrogates included


@contextmanager
def accelerated(on: bool):
    prev = units.use_speedups(on)
    try:
        yield
    finally:
        units.use_speedups(prev)


def both(fn, *args, **kw):
    """``fn(*args, **kw)`` on the C path and on the pure path."""
    with accelerated(True):
        a = fn(*args, **kw)
    with accelerated(False):
        b = fn(*args, **kw)
    return a, b


def assert_same(text: str, spec) -> None:
    """Every observable result agrees between the two paths."""
    for strict in (True, False):
        a, b = both(parse, text, spec, strict=strict)
        assert a == b and a._parts == b._parts
    if a.ok:
        assert a._words == part_words(text, a._parts) and b._words is None  # pure path: counted on demand
        assert both(compute_metrics, a, spec) == both(compute_metrics, b, spec)
        ma, mb = both(compute_metrics, a.tree, spec)
        assert ma == mb == compute_metrics(a, spec) == compute_metrics(a.tree, spec, _generic=True)
    sa, sb = both(text_stats, text, spec)
    assert sa == sb


def mixed_text(spec):
    pieces = st.one_of(st.sampled_from(list(spec.tags) + FRAGMENTS), st.text(ANY_CHAR, max_size=8))
    return st.lists(pieces, max_size=30).map("".join)


# --------------------------------------------------------------------------- split_tags itself


@needs_c
@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: s.name)
@SETTINGS
@given(data=st.data())
def test_split_tags_matches_regex_split_and_words(spec, data):
    text = data.draw(mixed_text(spec))
    comp = _compiled(spec)
    parts, words = units._speedups.split_tags(text, comp.tag_tuple)
    assert parts == comp.split(text)
    assert words == [_words(p) for p in parts] == part_words(text, parts)
    assert all(any(p is t for t in comp.tag_tuple) for p in parts[1::2])  # the tag objects themselves


@needs_c
def test_split_tags_arbitrary_tag_sets():
    """Regex alternation semantics for any tags starting with '<': first listed tag wins."""
    pool = ["<a>", "<ab>", "<", "<b", "</a>", "é", "\ud800", "😀", "数", "\x00", " ", "a", "<é>", "<😀>"]
    rng = random.Random(3)
    for tags in [("<a>", "</a>"), ("<ab>", "<a>"), ("<é>", "<😀>", "<数x>"), ("<",), ("<a", "<"), ()]:
        rx = re.compile("(" + "|".join(map(re.escape, tags)) + ")") if tags else None
        for _ in range(3000):
            text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 20)))
            parts, words = units._speedups.split_tags(text, tags)
            assert parts == (rx.split(text) if rx else [text])
            assert words == [_words(p) for p in parts]


@needs_c
def test_split_tags_rejects_bad_arguments():
    split = units._speedups.split_tags
    for args in [(b"x", ()), ("x", ["<a>"]), ("x",), ("x", (), 1)]:
        with pytest.raises(TypeError):
            split(*args)
    for tags in [("a>",), ("",), (3,), ("<a>",) * 65]:
        with pytest.raises(ValueError):
            split("x", tags)


# --------------------------------------------------------------------------- parse / metrics


@needs_c
def test_fuzz_inputs_same_on_both_paths():
    rng = random.Random(99)
    for gen, n in GENERATORS:
        for _ in range(n // 10):
            text = gen(rng)
            for spec in SPECS:
                assert_same(text, spec)


@needs_c
@pytest.mark.parametrize("spec", [PARALLEL_R1, PARASON, WIDE], ids=lambda s: s.name)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_trees_and_mutants_same_on_both_paths(spec, data):
    tree = data.draw(trees(spec))
    text = render(tree, spec)
    assert_same(text, spec)
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    assert_same(mutate(text, spec, rng), spec)
    assert_same(data.draw(mixed_text(spec)), spec)


@needs_c
@pytest.mark.parametrize(
    "filler",
    ["we compute x < 3 ", "é→ 数 ", "a\ud800 b ", "😀 y\t", "\x00\x1f!\x7f "],
    ids=["ascii", "ucs2", "surrogate", "ucs4", "controls"],
)
def test_huge_inputs_same_on_both_paths(filler):
    block = (
        "<Parallel>\n<Outlines><Subtask>" + filler + "</Subtask><Trial>t</Trial></Outlines>\n"
        "<Thread>" + filler * 50 + "</Thread>\n<Thread>" + filler + "</Thread>\n</Parallel>"
    )
    text = (filler * 20 + block) * 400  # 0.3-1 MB
    for t in (text, text + "<Parallel><Outlines><Sub", text[: len(text) // 2]):
        assert_same(t, PARASON)
    paths = "<Path>" + filler * 9 + "</Path><Path>p</Path>"
    r1 = ("s " + filler * 30 + "<Parallel>" + paths + "<Summary>s</Summary></Parallel>") * 800
    assert_same(r1, PARALLEL_R1)


# --------------------------------------------------------------------------- selection


def test_use_speedups_without_the_extension(monkeypatch):
    monkeypatch.setattr(units, "_speedups", None)
    prev = units.use_speedups(False)
    try:
        with pytest.raises(RuntimeError, match="not built"):
            units.use_speedups(True)
        assert parse(
            "a <Parallel><Path>x</Path><Path>y</Path><Summary>s</Summary></Parallel>", PARALLEL_R1
        ).ok
    finally:
        monkeypatch.undo()
        units.use_speedups(prev)


@needs_c
@pytest.mark.parametrize("value,pure", [("1", True), ("0", False), ("", False)])
def test_env_var_selects_the_pure_path(value, pure):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PARALLAX_FORMATS_PURE=value, PYTHONPATH=root)
    out = subprocess.run(
        [sys.executable, "-c", "from parallax.formats import units; print(not units.speedups_enabled())"],
        env=env, cwd=root, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == str(pure)
