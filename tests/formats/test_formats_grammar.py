"""Grammars: compile with xgrammar on CPU; the grammar, the strict parser and the renderer agree."""

import random

import pytest
from fmt_strategies import mutate, trees
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parallax.formats import (
    PARALLEL_R1,
    PARASON,
    GrammarChecker,
    compute_metrics,
    ebnf,
    get_spec,
    is_written,
    parse,
    render,
)

xgr = pytest.importorskip("xgrammar")

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SMALL = get_spec(
    "parason", min_branches=1, max_branches=3, max_depth=2, thread_open="<T>", thread_close="</T>"
)
SMALL_R1 = get_spec(
    "parallel_r1", min_branches=3, max_branches=4, summary_open="<Sum>", summary_close="</Sum>"
)


@pytest.fixture(scope="module")
def small_checkers(hf_tokenizer):
    return {SMALL: GrammarChecker(SMALL, hf_tokenizer), SMALL_R1: GrammarChecker(SMALL_R1, hf_tokenizer)}


def test_ebnf_shape():
    for spec in (PARALLEL_R1, PARASON, SMALL):
        g = ebnf(spec)
        assert g.startswith("root ::= ")
        for t in spec.tags:
            assert f'"{t}"' in g
    assert "block_4" in ebnf(PARASON) and "block_5" not in ebnf(PARASON)
    assert "block_2" in ebnf(SMALL) and "block_3" not in ebnf(SMALL)
    assert ebnf("parason") == ebnf(PARASON)


def test_ebnf_parses_in_xgrammar():
    for spec in (PARALLEL_R1, PARASON, SMALL, SMALL_R1):
        xgr.Grammar.from_ebnf(ebnf(spec))


def test_compiles_with_real_tokenizer(hf_tokenizer):
    from parallax.formats import compile_grammar

    for name in ("parallel_r1", "parason"):
        cg = compile_grammar(name, hf_tokenizer)
        assert isinstance(cg, xgr.CompiledGrammar)


def test_accept_string_exists():
    assert hasattr(xgr.GrammarMatcher, "accept_string")


HAND = [
    ("", "parason", True),
    ("x < 3 <Foo> <Pa th>", "parason", True),
    (("First. <Parallel><Outlines><Subtask>3*4</Subtask><Subtask>5*6</Subtask></Outlines>"
      "<Thread>3*4=12</Thread><Thread>5*6=30</Thread></Parallel> 12+30=42 #### 42"), "parason", True),
    ("<Parallel><Outlines><Subtask>a</Subtask></Outlines><Thread>x</Thread></Parallel>", "parason", False),
    ("<Parallel><Outlines><Subtask>a</Subtask><Trial>b</Trial></Outlines><Thread>x</Thread></Parallel>",
     "parason", False),
    (("<Parallel> <Outlines>\n<Subtask>a</Subtask>\t<Trial>b</Trial> </Outlines>\n"
      "<Thread>x</Thread> <Thread>y</Thread>\n</Parallel>"), "parason", True),
    ("<Parallel><Outlines>z<Subtask>a</Subtask><Trial>b</Trial></Outlines><Thread>x</Thread><Thread>y</Thread></Parallel>",
     "parason", False),
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel><Summary>s</Summary>", "parallel_r1", True),
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel>\n<Summary>s</Summary>\nFinal Answer: 3", "parallel_r1", True),
    ("<Parallel><Path>a</Path></Parallel><Summary>s</Summary>", "parallel_r1", False),
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel>", "parallel_r1", False),
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel> so <Summary>s</Summary>", "parallel_r1", False),
    ("<Parallel><Path>a<Path>b</Path><Path>b</Path></Parallel><Summary>s</Summary>", "parallel_r1", False),
    ("<Parallel><Path>a <Thread> b</Path><Path>b</Path></Parallel><Summary>s</Summary>", "parallel_r1", True),
    ("<Parallel>" + "<Path>p</Path>" * 8 + "</Parallel><Summary></Summary>", "parallel_r1", True),
    ("<Parallel>" + "<Path>p</Path>" * 9 + "</Parallel><Summary></Summary>", "parallel_r1", False),
    ("<Parallel><Path>a</Path><Path>b</Path><Summary>s</Summary></Parallel><Summary>t</Summary>", "parallel_r1", False),
    ("x <Conclusion> y", "parason", False),  # an alias tag is never free text
    ("</Parallel>", "parason", False),
    ("<Parallel", "parason", True),
    ("a </Thread", "parason", True),
]  # fmt: skip


@pytest.mark.parametrize("text,fmt,ok", HAND)
def test_hand_cases_agree(checkers, text, fmt, ok):
    assert parse(text, fmt).ok is ok
    assert checkers[fmt].accepts(text) is ok
    assert checkers[fmt].accepts_tokens(text) is ok


# The parser reads more than the grammar writes: the other summary placement, the release aliases.
READ_NOT_WRITTEN = [
    ("<Parallel><Path>a</Path><Path>b</Path><Summary>s</Summary></Parallel> F", "parallel_r1"),
    (("<Parallel><Outlines><Outline>1: a</Outline><Outline>2: b</Outline></Outlines>"
      "<Thread>x</Thread><Thread>y</Thread><Conclusion>c</Conclusion></Parallel>"), "parason"),
    (("<Parallel><Outlines><Subtask>a</Subtask><Trial>b</Trial></Outlines>"
      "<Thread>x</Thread><Thread>y</Thread></Parallel>\n<Conclusion>c</Conclusion>"), "parason"),
]  # fmt: skip


@pytest.mark.parametrize("text,fmt", READ_NOT_WRITTEN)
def test_parser_reads_what_the_grammar_never_writes(checkers, text, fmt):
    r = parse(text, fmt)
    assert r.ok and not is_written(r.tree, fmt == "parason")
    assert not checkers[fmt].accepts(text)


def test_inside_placement_grammar(hf_tokenizer):
    inside = get_spec("parallel_r1", summary_placement="inside")
    g = GrammarChecker(inside, hf_tokenizer)
    assert g.accepts("<Parallel><Path>a</Path><Path>b</Path><Summary>s</Summary></Parallel>")
    assert not g.accepts("<Parallel><Path>a</Path><Path>b</Path></Parallel><Summary>s</Summary>")
    only = get_spec("parallel_r1", summary_placement="inside", summary_accept=("inside",))
    assert not parse("<Parallel><Path>a</Path><Path>b</Path></Parallel><Summary>s</Summary>", only).ok


def _nest(depth):
    s = "leaf"
    for _ in range(depth):
        s = ("<Parallel><Outlines><Subtask>o</Subtask><Trial>p</Trial></Outlines>"
             f"<Thread>{s}</Thread><Thread>q</Thread></Parallel>")
    return s


@pytest.mark.parametrize("depth,ok", [(1, True), (4, True), (5, False)])
def test_depth_agrees(checkers, depth, ok):
    assert parse(_nest(depth), "parason").ok is ok
    assert checkers["parason"].accepts(_nest(depth)) is ok


def _roundtrip_and_grammar(tree, spec, checker):
    text = render(tree, spec)
    r = parse(text, spec)
    assert r.ok, (text, r.error)
    assert r.tree == tree
    assert render(r.tree, spec) == text
    assert compute_metrics(r, spec) == compute_metrics(tree, spec, _generic=True)
    assert checker.accepts(text) is is_written(tree, spec.is_parason), text


@settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(PARASON))
def test_property_parason(checkers, tree):
    _roundtrip_and_grammar(tree, PARASON, checkers["parason"])


@SETTINGS
@given(trees(PARALLEL_R1))
def test_property_r1(checkers, tree):
    _roundtrip_and_grammar(tree, PARALLEL_R1, checkers["parallel_r1"])


@SETTINGS
@given(trees(SMALL))
def test_property_small_custom_spec(small_checkers, tree):
    _roundtrip_and_grammar(tree, SMALL, small_checkers[SMALL])


@SETTINGS
@given(trees(SMALL_R1))
def test_property_small_custom_r1(small_checkers, tree):
    _roundtrip_and_grammar(tree, SMALL_R1, small_checkers[SMALL_R1])


@SETTINGS
@given(trees(PARALLEL_R1, written=True))
def test_property_r1_written(checkers, tree):
    _roundtrip_and_grammar(tree, PARALLEL_R1, checkers["parallel_r1"])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(PARASON, written=True))
def test_property_token_level(checkers, tree):
    text = render(tree, PARASON)
    assert checkers["parason"].accepts_tokens(text)


def _differential(spec, checker, tree, seed):
    rng = random.Random(seed)
    s = render(tree, spec)
    for _ in range(4):
        s = mutate(s, spec, rng)
        r = parse(s, spec)
        assert checker.accepts(s) == (r.ok and is_written(r.tree, spec.is_parason)), repr(s)


@settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(PARASON), st.integers(0, 2**32))
def test_differential_parason(checkers, tree, seed):
    _differential(PARASON, checkers["parason"], tree, seed)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(PARALLEL_R1), st.integers(0, 2**32))
def test_differential_r1(checkers, tree, seed):
    _differential(PARALLEL_R1, checkers["parallel_r1"], tree, seed)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(SMALL), st.integers(0, 2**32))
def test_differential_small(small_checkers, tree, seed):
    _differential(SMALL, small_checkers[SMALL], tree, seed)


def test_differential_seeded_corpus(checkers):
    """Deterministic: 600 mutants of hand-written valid texts; count both outcomes occur."""
    from test_formats_parser import EXAMPLE, NESTED, R1, R1_AFTER

    rng = random.Random(1234)
    seen = {True: 0, False: 0}
    for base, fmt in ((EXAMPLE, "parason"), (NESTED, "parason"), (_nest(4), "parason"), (R1, "parallel_r1"),
                      (R1_AFTER, "parallel_r1")):
        spec = PARASON if fmt == "parason" else PARALLEL_R1
        for _ in range(150):
            s = base
            for _ in range(rng.randint(1, 3)):
                s = mutate(s, spec, rng)
            r = parse(s, spec)
            ok = r.ok and is_written(r.tree, spec.is_parason)
            assert checkers[fmt].accepts(s) == ok, repr(s)
            seen[ok] += 1
    assert seen[True] > 20 and seen[False] > 200


FRAGMENTS = get_spec("parason", min_branches=2, max_branches=3, max_depth=2)
# (start, text the request writes from there, grammar-valid): the request executor's fragments
FRAGMENT_CASES = [
    ("main", ("Go. <Parallel><Outlines><Subtask>a</Subtask><Trial>b</Trial></Outlines>"
             "<Thread>a\n1</Thread><Thread>b\n2</Thread></Parallel> done"), True),
    ("thread_1", ("1 <Parallel><Outlines><Trial>p</Trial><Trial>q</Trial></Outlines><Thread>p\nx</Thread>"
                 "<Thread>q\ny</Thread></Parallel> so 3</Thread>"), True),
    ("thread_2", "x=2 no</Thread>", True),
    ("thread_2", "x <Parallel><Outlines><Trial>p</Trial><Trial>q</Trial></Outlines></Thread>", False),  # depth cap
    ("thread_1", "no closing tag", False),
    ("outline_pre", " <Outlines><Subtask>a</Subtask> <Trial>b</Trial></Outlines>", True),
    ("outline_pre", "<Outlines><Subtask>a</Subtask></Outlines>", False),  # fewer than min_branches
    ("outline_1", "<Trial>b</Trial></Outlines>", True),
    ("outline_1", "</Outlines>", False),
    ("outline_1", "<Trial>b</Trial><Trial>c</Trial><Trial>d</Trial></Outlines>", False),  # over max_branches
    ("subtask_0", "xy</Subtask><Trial>q</Trial></Outlines>", True),
    ("subtask_0", "xy</Trial>", False),
    ("trial_2", "z</Trial></Outlines>", True),
]


@pytest.mark.parametrize("start,text,ok", FRAGMENT_CASES)
def test_request_fragments_accept_exactly_their_part(hf_tokenizer, start, text, ok):
    """`ebnf(spec, start)`: the grammar of what one request of the request executor writes."""
    from parallax.formats.grammar import starts

    assert start in starts(FRAGMENTS)
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(hf_tokenizer))
    m = xgr.GrammarMatcher(compiler.compile_grammar(ebnf(FRAGMENTS, start)))
    assert (m.accept_string(text) and m.is_completed()) == ok


def test_parallel_r1_fragments_and_unknown_starts(hf_tokenizer):
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(hf_tokenizer))
    for start, text in (("path", "3*4=12</Path>"), ("summary", "12+30=42</Summary>")):
        m = xgr.GrammarMatcher(compiler.compile_grammar(ebnf("parallel_r1", start)))
        assert m.accept_string(text) and m.is_completed()
    with pytest.raises(ValueError, match="grammar start"):
        ebnf("parallel_r1", "thread_1")
