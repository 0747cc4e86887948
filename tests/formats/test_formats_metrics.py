"""Hand-worked metrics (default units: whitespace words, each tag 1 unit) and metric invariants."""

from fractions import Fraction

import pytest

from parallax.formats import Tree, compute_metrics, get_spec, parse, text_stats

EXAMPLE = (
    "First. <Parallel><Outlines><Subtask>3*4</Subtask><Subtask>5*6</Subtask></Outlines>"
    "<Thread>3*4=12</Thread><Thread>5*6=30</Thread></Parallel> 12+30=42 #### 42"
)
NESTED = (
    "Go <Parallel><Outlines><Trial>a</Trial><Subtask>b</Subtask></Outlines>\n"
    "<Thread>x <Parallel><Outlines><Subtask>c</Subtask><Subtask>d</Subtask></Outlines>"
    "<Thread>cc</Thread><Thread>dd</Thread></Parallel> y</Thread><Thread>bb</Thread></Parallel> end"
)
DEEP = (
    "<Parallel><Outlines><Subtask>u</Subtask><Subtask>v</Subtask></Outlines>"
    "<Thread><Parallel><Outlines><Trial>w</Trial><Trial>x</Trial></Outlines>"
    "<Thread>1 2 3 4</Thread>"
    "<Thread><Parallel><Outlines><Subtask>y</Subtask><Subtask>z</Subtask></Outlines>"
    "<Thread>5</Thread><Thread>6 7</Thread></Parallel></Thread>"
    "</Parallel></Thread><Thread>8</Thread></Parallel>"
)
R1 = (
    "Q: 2+2?\n<Parallel>\n<Path>two plus two is 4</Path>\n<Path>4</Path>\n<Path></Path>\n"
    "<Summary>all say 4</Summary>\n</Parallel>\nAnswer: 4"
)
R1_TWO = (
    "A <Parallel><Path>1 2 3</Path><Path>4</Path><Summary></Summary></Parallel> B "
    "<Parallel><Path>5</Path><Path>6 7</Path><Summary>8</Summary></Parallel> C"
)
START = (
    "<Parallel><Outlines><Subtask>a</Subtask><Trial>b b</Trial></Outlines>"
    "<Thread>p q r</Thread><Thread>s</Thread></Parallel>"
)
TRIALS = (
    "Try two ways.\n\n<Parallel>\n  <Outlines>\n    <Trial>guess and check</Trial>\n    <Trial>algebra</Trial>\n"
    "    <Trial>table</Trial>\n  </Outlines>\n  <Thread>x=1 no, x=2 yes</Thread>\n"
    "  <Thread>2x = 4 so x = 2</Thread>\n  <Thread>1 2 3</Thread>\n</Parallel>\nSo x = 2. #### 2"
)

# name, text, format, total, T, first_token, blocks, branches, depth, (main, subtask, trial, path)
CASES = [
    ("example", EXAMPLE, "parason", 20, 17, 1, 1, 2, 1, (8, 12, 0, 0)),
    # Go(1) [P O Trial:a(3) Subtask:b(3) /O  T1(2 + x + inner 16 + y = 20)  T2(3)  /P](33) end(1)
    # inner: 16 total, T 13; T1 crit 17; outer T = 33 - 23 + 17 = 27; T = 1 + 27 + 1
    ("nested", NESTED, "parason", 35, 29, 1, 2, 4, 2, (6, 18, 11, 0)),
    # C: 17/14, B: 35/26, A: 50/38
    ("deep", DEEP, "parason", 50, 38, 0, 3, 6, 3, (4, 28, 18, 0)),
    # Q: 2+2?(2) P(1) Path(7) Path(3) Path(2) Summary(5) /P(1) Answer: 4(2)
    ("r1", R1, "parallel_r1", 23, 18, 2, 1, 3, 1, (11, 0, 0, 12)),
    ("r1_two_blocks", R1_TWO, "parallel_r1", 27, 21, 1, 2, 4, 1, (12, 0, 0, 15)),
    ("block_at_start", START, "parason", 19, 16, 0, 1, 2, 1, (4, 8, 7, 0)),
    # Try two ways.(3) P O [Trial 2+3][Trial 2+1][Trial 2+1] /O T(2+4) T(2+7) T(2+3) /P  So x = 2. #### 2(6)
    ("trials_with_whitespace", TRIALS, "parason", 44, 33, 3, 1, 3, 1, (13, 0, 31, 0)),
    ("adjacent_words", "x<Parallel><Path>p</Path><Path>q</Path><Summary>s</Summary></Parallel>y", "parallel_r1",
     13, 10, 1, 1, 2, 1, (7, 0, 0, 6)),
    ("sequential_only", "just some text here", "parason", 4, 4, None, 0, 0, 0, (4, 0, 0, 0)),
    ("whitespace_kinds", "a \t b\n\nc  d\r\ne\x0bf\x0cg", "parallel_r1", 7, 7, None, 0, 0, 0, (7, 0, 0, 0)),
    ("empty", "", "parason", 0, 0, None, 0, 0, 0, (0, 0, 0, 0)),
    ("non_ascii", "é → 数 <Parallel><Path>ü ö</Path><Path>ß</Path><Summary>∑</Summary></Parallel>", "parallel_r1",
     15, 12, 3, 1, 2, 1, (8, 0, 0, 7)),
    ("unbalanced_branches", "<Parallel><Path>a b c d e f g h i j</Path><Path>k</Path><Summary>l</Summary></Parallel>",
     "parallel_r1", 20, 17, 0, 1, 2, 1, (5, 0, 0, 15)),
]  # fmt: skip


@pytest.mark.parametrize(
    "name,text,fmt,total,T,first,blocks,branches,depth,shares", CASES, ids=[c[0] for c in CASES]
)
@pytest.mark.parametrize("mode", ["tree", "tree+text", "result"])
def test_hand_worked(name, text, fmt, total, T, first, blocks, branches, depth, shares, mode):
    r = parse(text, fmt)
    assert r.ok, r.error
    if mode == "result":
        m = compute_metrics(r, fmt)
    else:
        m = compute_metrics(r.tree, fmt, text=text if mode == "tree+text" else None)
    assert m.total_tokens == total
    assert m.critical_path_tokens == T
    assert m.first_parallel_token == first
    assert m.num_blocks == blocks and m.num_branches == branches and m.depth == depth
    assert m.has_parallel == (blocks > 0)
    assert (m.main_tokens, m.subtask_tokens, m.trial_tokens, m.path_tokens) == shares
    if total:
        assert m.speedup == pytest.approx(total / T)
        assert m.eta == pytest.approx((total - T) / total)
        assert m.subtask_share == pytest.approx(shares[1] / total)
        assert m.trial_share == pytest.approx(shares[2] / total)
        assert m.path_share == pytest.approx(shares[3] / total)
    else:
        assert (m.speedup, m.eta, m.subtask_share, m.trial_share, m.path_share) == (1.0, 0.0, 0.0, 0.0, 0.0)
    if first is None:
        assert m.first_parallel_pos is None
    else:
        assert m.first_parallel_pos == pytest.approx(first / total)
    # the reference walker agrees with the fast one
    ref = compute_metrics(r.tree, fmt, _generic=True)
    assert ref == m


def test_example_exact_values():
    m = compute_metrics(parse(EXAMPLE).tree)
    assert Fraction(m.speedup).limit_denominator(1000) == Fraction(20, 17)
    assert m.eta == pytest.approx(0.15)
    assert m.first_parallel_pos == pytest.approx(0.05)
    assert m.subtask_share == pytest.approx(0.6) and m.trial_share == 0.0


def test_gaps_count_zero_but_keep_positions():
    a = "w <Parallel><Path>a</Path><Path>b c</Path><Summary>s</Summary></Parallel>"
    b = "w <Parallel>\n\n<Path>a</Path>   <Path>b c</Path>\t<Summary>s</Summary>\r\n</Parallel>"
    ma, mb = (compute_metrics(parse(x, "parallel_r1").tree, "parallel_r1", text=x) for x in (a, b))
    assert ma == mb


def test_tags_override_changes_nothing_structural():
    spec = get_spec("parallel_r1", path_open="<P>", path_close="</P>")
    text = "a <Parallel><P>x y</P><P>z</P><Summary>s</Summary></Parallel>"
    m = compute_metrics(parse(text, spec).tree, spec, text=text)
    assert (m.total_tokens, m.critical_path_tokens) == (13, 10)


def test_deep_chain_critical_path():
    # a single chain of nested blocks: each level has a long and a short thread
    depth = 4
    s = "w w w w"
    for _ in range(depth):
        s = ("<Parallel><Outlines><Subtask>o</Subtask><Subtask>o</Subtask></Outlines>"
             f"<Thread>{s}</Thread><Thread>z</Thread></Parallel>")
    m = compute_metrics(parse(s).tree)
    # innermost thread: 2 + 4 = 6 critical; each level adds P O e(3) e(3) /O /P = 10 sequential + 2 thread tags
    # and a short thread of 3 off the critical path.
    # T_1 = 10 + 6 = 16 ; T_k = 10 + 2 + T_{k-1}
    assert m.critical_path_tokens == 16 + 12 * (depth - 1)
    # total_k = 10 + 3 + 2 + total_{k-1}; total_1 = 10 + 3 + 6 = 19
    assert m.total_tokens == 19 + 15 * (depth - 1)
    assert m.depth == depth and m.num_blocks == depth and m.num_branches == 2 * depth


def test_text_stats_valid_and_invalid():
    d = text_stats(EXAMPLE, "parason")
    assert d["valid"] and d["status"] == "ok" and d["error"] is None and d["total_tokens"] == 20
    d = text_stats(EXAMPLE[:100], "parason")
    assert not d["valid"] and d["status"] == "truncated_in_branch"
    assert d["critical_path_tokens"] is None and d["has_parallel"] is True
    assert d["total_tokens"] == 12  # First. P O Sub 3*4 /Sub Sub 5*6 /Sub /O Thread 3*4=12
    assert d["error"]["code"] == "truncated_in_branch"
    d = text_stats(None, "parason")  # type: ignore[arg-type]
    assert not d["valid"] and d["status"] == "malformed"


def test_failed_result_rejected():
    with pytest.raises(ValueError, match="failed parse"):
        compute_metrics(parse("<Parallel>", "parason"), "parason")


def test_control_characters_are_whitespace():
    # code points <= 32 separate words; other Unicode spaces (NBSP, em space) do not
    m = compute_metrics(parse("a\x00b\x1fc d\u00a0e\u2003f").tree, "parason")
    assert m.total_tokens == 4


def test_metrics_dict_roundtrip():
    m = compute_metrics(parse(NESTED).tree)
    d = m.to_dict()
    assert d["total_tokens"] == 35 and set(d) >= {"speedup", "eta", "first_parallel_pos", "subtask_share"}


def test_sequential_tree_from_constructor():
    m = compute_metrics(Tree(("a b",)), "parason")
    assert (m.total_tokens, m.critical_path_tokens, m.has_parallel) == (2, 2, False)


def test_tree_the_parser_rejects_uses_the_reference_walker():
    # 3 paths where the spec allows 2: no parse of the rendering, so the tree is walked as is
    tree = parse(R1, "parallel_r1").tree
    tight = get_spec("parallel_r1", max_branches=2)
    m = compute_metrics(tree, tight)
    assert m == compute_metrics(tree, "parallel_r1") == compute_metrics(tree, tight, _generic=True)
    # a text node holding a tag string (its rendering does not parse): walked as given, 3 words
    odd = Tree(("a <Parallel> b",))
    assert compute_metrics(odd, "parason").total_tokens == 3


def test_non_canonical_tree_is_measured_as_its_rendering():
    # adjacent text nodes merge when rendered: "a" + "b" is one word, as in the text "ab"
    m = compute_metrics(Tree(("a", "", "b")), "parason")
    assert m == compute_metrics(parse("ab").tree, "parason")
    assert m.total_tokens == 1
