"""Parser and renderer: hand-worked trees, error table, statuses, lenient prefixes."""

import pytest

from parallax.formats import (
    PATH,
    STATUSES,
    SUBTASK,
    TRIAL,
    Block,
    Branch,
    Tree,
    final_segment,
    get_spec,
    parse,
    render,
)

EXAMPLE = (
    "First. <Parallel><Outlines><Subtask>3*4</Subtask><Subtask>5*6</Subtask></Outlines>"
    "<Thread>3*4=12</Thread><Thread>5*6=30</Thread></Parallel> 12+30=42 #### 42"
)

NESTED = (
    "Go <Parallel><Outlines><Trial>a</Trial><Subtask>b</Subtask></Outlines>\n"
    "<Thread>x <Parallel><Outlines><Subtask>c</Subtask><Subtask>d</Subtask></Outlines>"
    "<Thread>cc</Thread><Thread>dd</Thread></Parallel> y</Thread><Thread>bb</Thread></Parallel> end"
)

R1 = (
    "Q: 2+2?\n<Parallel>\n<Path>two plus two is 4</Path>\n<Path>4</Path>\n<Path></Path>\n"
    "<Summary>all say 4</Summary>\n</Parallel>\nAnswer: 4"
)
# the public Parallel-R1 convention: the summary right after </Parallel>
R1_AFTER = (
    "Q: 2+2?\n<Parallel>\n<Path>two plus two is 4</Path>\n<Path>4</Path>\n</Parallel>\n"
    "<Summary>both say 4</Summary>\n\nFinal Answer: 4"
)


def test_example_tree():
    r = parse(EXAMPLE, "parason")
    assert r.ok and r.status == "ok" and r.error is None and r.prefix_end == len(EXAMPLE)
    assert r.tree == Tree(
        (
            "First. ",
            Block(
                (
                    Branch(SUBTASK, ("3*4=12",), "3*4"),
                    Branch(SUBTASK, ("5*6=30",), "5*6"),
                )
            ),
            " 12+30=42 #### 42",
        )
    )
    assert render(r.tree, "parason") == EXAMPLE
    assert final_segment(r.tree) == " 12+30=42 #### 42"


def test_nested_tree():
    r = parse(NESTED, "parason")
    assert r.ok
    inner = Block((Branch(SUBTASK, ("cc",), "c"), Branch(SUBTASK, ("dd",), "d")))
    assert r.tree == Tree(
        (
            "Go ",
            Block(
                (Branch(TRIAL, ("x ", inner, " y"), "a"), Branch(SUBTASK, ("bb",), "b")),
                None,
                ("", "", "", "", "\n", "", ""),
            ),
            " end",
        )
    )
    assert render(r.tree) == NESTED


def test_r1_tree_with_gaps_and_empty_path():
    r = parse(R1, "parallel_r1")
    assert r.ok
    assert r.tree == Tree(
        (
            "Q: 2+2?\n",
            Block(
                (Branch(PATH, ("two plus two is 4",)), Branch(PATH, ("4",)), Branch(PATH, ())),
                "all say 4",
                ("\n", "\n", "\n", "\n", "\n"),
                "inside",  # not where the default spec writes it (after </Parallel>)
            ),
            "\nAnswer: 4",
        )
    )
    assert render(r.tree, "parallel_r1") == R1
    assert final_segment(r.tree) == "\nAnswer: 4"


@pytest.mark.parametrize(
    "text,fmt",
    [
        ("", "parason"),
        ("", "parallel_r1"),
        ("plain sequential chain, no blocks. #### 5", "parason"),
        ("x < 3 and y > 2, <Foo> and <Para and Path> are text", "parallel_r1"),
        ("<Thread> is just text in Parallel-R1", "parallel_r1"),
        ("<Path> is just text in Parason", "parason"),
        ("<Parallel><Outlines><Subtask></Subtask><Trial></Trial></Outlines><Thread></Thread><Thread></Thread></Parallel>",
         "parason"),
        ("<Parallel><Path></Path><Path></Path><Summary></Summary></Parallel>", "parallel_r1"),
        (" \t<Parallel> \r\n<Path>a</Path>\t<Path>b</Path> <Summary>c</Summary>\n\n</Parallel>", "parallel_r1"),
        (("a<Parallel><Path>1</Path><Path>2</Path><Summary>s</Summary></Parallel>"
          "b<Parallel><Path>3</Path><Path>4</Path><Summary>t</Summary></Parallel>c"), "parallel_r1"),
        (EXAMPLE, "parason"),
        (NESTED, "parason"),
        (R1, "parallel_r1"),
    ],
)  # fmt: skip
def test_valid_round_trip(text, fmt):
    r = parse(text, fmt)
    assert r.ok, r.error
    assert render(r.tree, fmt) == text
    assert parse(render(r.tree, fmt), fmt).tree == r.tree


def test_final_segment_cases():
    assert final_segment(Tree(())) == ""
    assert final_segment(Tree(("all text",))) == "all text"
    b = Block((Branch(PATH, ("a",)), Branch(PATH, ("b",))), "s")
    assert final_segment(Tree(("pre", b))) == ""
    assert final_segment(Tree(("pre", b, "mid", b, " #### 3"))) == " #### 3"
    # from text
    assert final_segment(EXAMPLE, "parason") == " 12+30=42 #### 42"
    assert final_segment(EXAMPLE[:-5], "parason") == " 12+30=42 ##"
    assert final_segment("<Parallel><Outlines>", "parason") is None
    # only the top level counts: text after a nested block is inside a thread
    assert final_segment(NESTED, "parason") == " end"


# (text, format, status, code, char_offset, default-unit token_offset)
ERRORS = [
    ("a </Path> b", "parallel_r1", "malformed", "unexpected_tag", 2, 1),
    ("</Parallel>", "parason", "malformed", "unexpected_tag", 0, 0),
    ("<Thread>x</Thread>", "parason", "malformed", "unexpected_tag", 0, 0),
    ("one two <Parallel><Path>x</Path><Summary>s</Summary></Parallel>",
     "parallel_r1", "malformed", "too_few_branches", 32, 6),
    ("<Parallel> x <Path>a</Path><Path>b</Path><Summary>s</Summary></Parallel>",
     "parallel_r1", "malformed", "text_between_tags", 10, 1),
    ("<Parallel><Path>a<Parallel>", "parallel_r1", "malformed", "unexpected_tag", 17, 3),
    ("<Parallel><Path>a</Path><Path>b</Path><Summary>s</Summary><Path>",
     "parallel_r1", "malformed", "unexpected_tag", 58, 10),
    ("<Parallel><Path>a</Path><Path>b</Path><Parallel>", "parallel_r1", "malformed", "unexpected_tag", 38, 7),
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel> so 3", "parallel_r1", "malformed", "missing_summary", 49, 8),
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel>\n<Path>", "parallel_r1", "malformed", "missing_summary", 50, 8),
    ("<Parallel><Outlines><Subtask>a</Trial>", "parason", "malformed", "mismatched_close", 30, 4),
    ("<Parallel><Subtask>", "parason", "malformed", "unexpected_tag", 10, 1),
    ("<Parallel><Outlines></Outlines>", "parason", "malformed", "too_few_branches", 20, 2),
    ("<Parallel><Outlines><Trial>a</Trial></Outlines>", "parason", "malformed", "too_few_branches", 36, 5),
    ("<Parallel><Outlines><Trial>a</Trial><Trial>b</Trial></Outlines><Thread>x</Thread></Parallel>",
     "parason", "malformed", "missing_thread", 81, 12),
    ("<Parallel><Outlines><Trial>a</Trial><Trial>b</Trial></Outlines><Thread>x</Thread><Thread>y</Thread><Thread>",
     "parason", "malformed", "extra_thread", 99, 15),
    ("<Parallel><Outlines><Trial>a</Trial><Trial>b</Trial></Outlines>z<Thread>",
     "parason", "malformed", "text_between_tags", 63, 9),
    ("<Parallel><Outlines><Trial>a</Trial><Trial>b</Trial></Outlines><Thread>x</Thread><Thread>y</Thread>\n</Thread>",
     "parason", "malformed", "unexpected_tag", 100, 15),
    # truncations
    ("<Parallel><Outlines><Subtask>a", "parason", "truncated_in_branch", "truncated_in_branch", 30, 4),
    ("w <Parallel><Path>a b", "parallel_r1", "truncated_in_branch", "truncated_in_branch", 21, 5),
    ("<Parallel><Path>a</Path><Path>b</Path><Summary>sum",
     "parallel_r1", "truncated_in_branch", "truncated_in_branch", 50, 9),
    ("<Parallel><Outlines><Trial>a</Trial><Trial>b</Trial></Outlines><Thread>x</Thread><Thread>y </Thr",
     "parason", "truncated_in_branch", "truncated_in_branch", 96, 15),
    ("<Parallel><Outlines><Subtask>a</Subtask>", "parason", "unclosed_block", "unclosed_block", 40, 5),
    ("<Parallel>\n", "parason", "unclosed_block", "unclosed_block", 11, 1),
    ("<Parallel>\n<Outl", "parason", "unclosed_block", "unclosed_block", 16, 2),
    ("<Parallel><Path>a</Path><Path>b</Path><Summary>s</Summary>",
     "parallel_r1", "unclosed_block", "unclosed_block", 58, 10),
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel>", "parallel_r1", "unclosed_block", "unclosed_block", 49, 8),
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel>\n<Summ",
     "parallel_r1", "unclosed_block", "unclosed_block", 55, 9),
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel><Summary>s",
     "parallel_r1", "truncated_in_branch", "truncated_in_branch", 59, 10),
    (("<Parallel><Outlines><Trial>a</Trial><Trial>b</Trial></Outlines><Thread>x</Thread><Thread>y</Thread></Parallel>"
      "<Conclusion>c"), "parason", "truncated_in_branch", "truncated_in_branch", 123, 18),
    ("<Parallel><Outlines><Trial>a</Trial><Trial>b</Trial></Outlines><Thread>x</Thread>",
     "parason", "unclosed_block", "unclosed_block", 81, 12),
]  # fmt: skip


@pytest.mark.parametrize("text,fmt,status,code,char,tok", ERRORS)
def test_error_table(text, fmt, status, code, char, tok):
    for strict in (True, False):
        r = parse(text, fmt, strict=strict)
        assert not r.ok
        assert r.status == status
        assert r.error.code == code
        assert r.error.char_offset == char
        assert r.error.token_offset == tok
        assert isinstance(r.error.message, str) and r.error.message
        if strict:
            assert r.tree is None
        else:
            assert r.tree is not None


def test_error_tag_field():
    r = parse("<Parallel><Outlines><Subtask>a</Trial>", "parason")
    assert r.error.tag == "</Trial>"
    d = r.error.to_dict()
    assert d["code"] == "mismatched_close" and d["char_offset"] == 30


def test_branch_limits_configurable():
    three = "<Parallel><Path>a</Path><Path>b</Path><Path>c</Path><Summary>s</Summary></Parallel>"
    assert parse(three, "parallel_r1").ok
    r = parse(three, get_spec("parallel_r1", max_branches=2))
    assert r.error.code == "too_many_branches" and r.error.char_offset == three.index("<Path>c")
    one = "<Parallel><Path>a</Path><Summary>s</Summary></Parallel>"
    assert parse(one, get_spec("parallel_r1", min_branches=1)).ok
    nine = "<Parallel>" + "<Path>p</Path>" * 9 + "<Summary></Summary></Parallel>"
    assert parse(nine, "parallel_r1").error.code == "too_many_branches"
    eight = "<Parallel>" + "<Path>p</Path>" * 8 + "<Summary></Summary></Parallel>"
    assert parse(eight, "parallel_r1").ok


def _nest(depth: int) -> str:
    """Parason text whose first thread nests ``depth`` blocks."""
    s = "leaf"
    for _ in range(depth):
        s = (
            "<Parallel><Outlines><Subtask>o</Subtask><Trial>p</Trial></Outlines>"
            f"<Thread>{s}</Thread><Thread>q</Thread></Parallel>"
        )
    return s


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_depth_limit_default(depth):
    assert parse(_nest(depth), "parason").ok


def test_depth_limit_exceeded():
    r = parse(_nest(5), "parason")
    assert r.status == "malformed" and r.error.code == "too_deep"
    # the 5th <Parallel> is the offending one
    assert r.error.char_offset == _nest(5).index(
        "<Parallel>", 4 * len("<Parallel><Outlines><Subtask>o</Subtask><Trial>p</Trial></Outlines><Thread>")
    )
    assert parse(_nest(2), get_spec("parason", max_depth=1)).error.code == "too_deep"
    assert parse(_nest(2), get_spec("parason", max_depth=2)).ok


def test_custom_tags():
    spec = get_spec(
        "parason",
        parallel_open="<par>", parallel_close="</par>", outlines_open="<plan>", outlines_close="</plan>",
        subtask_open="<and>", subtask_close="</and>", trial_open="<or>", trial_close="</or>",
        thread_open="<t>", thread_close="</t>",
    )  # fmt: skip
    text = "s <par><plan><and>a</and><or>b</or></plan><t>x</t><t>y</t></par> e"
    r = parse(text, spec)
    assert r.ok
    assert r.tree.nodes[1].branches[1] == Branch(TRIAL, ("y",), "b")
    assert render(r.tree, spec) == text
    assert parse(EXAMPLE, spec).tree == Tree((EXAMPLE,))  # default tags are plain text there


def test_non_string_input():
    for bad in (None, 3, b"<Parallel>", ["x"]):
        r = parse(bad, "parason")  # type: ignore[arg-type]
        assert r.status == "malformed" and r.error.code == "not_a_string" and r.tree is None


def test_statuses_constant():
    assert STATUSES == ("ok", "truncated_in_branch", "unclosed_block", "malformed")


def test_lenient_prefix_tree():
    text = "pre <Parallel><Path>a</Path><Path>b</Path><Summary>s</Summary></Parallel> mid <Parallel><Path>c"
    r = parse(text, "parallel_r1", strict=False)
    assert r.status == "truncated_in_branch"
    assert r.prefix_end == text.index("<Parallel>", 5)
    assert render(r.tree, "parallel_r1") == text[: r.prefix_end]
    assert r.tree.nodes[-1] == " mid "
    # a stray tag at top level: prefix ends at the tag
    r = parse("abc </Summary> def", "parallel_r1", strict=False)
    assert r.prefix_end == 4 and r.tree == Tree(("abc ",))
    # malformed inside a nested block: prefix ends at the outermost open block
    bad = "x " + NESTED.replace("<Thread>dd</Thread>", "")
    r = parse(bad, "parason", strict=False)
    assert r.status == "malformed" and r.prefix_end == 5 and r.tree == Tree(("x Go ",))


def test_every_prefix_of_valid_text_is_truncation_or_ok():
    for text, fmt in ((EXAMPLE, "parason"), (NESTED, "parason"), (R1, "parallel_r1"), (_nest(4), "parason")):
        for k in range(len(text) + 1):
            r = parse(text[:k], fmt, strict=False)
            assert r.status in ("ok", "truncated_in_branch", "unclosed_block"), (k, r)
            assert render(r.tree, fmt) == text[: r.prefix_end]


def test_render_rejects_bad_trees():
    with pytest.raises(ValueError):
        render(
            Tree((Block((Branch(PATH, ("a",)), Branch(PATH, ("b",))), "s", ("", "")),)), "parallel_r1"
        )
    with pytest.raises(ValueError):
        render(Tree((Block((Branch(PATH, ("a",)), Branch(PATH, ("b",))), "s"),)), "parason")
    with pytest.raises(ValueError):
        render(
            Tree((Block((Branch(SUBTASK, ("a",), "o"), Branch(TRIAL, ("b",), "p"))),)), "parallel_r1"
        )
    with pytest.raises(ValueError):
        render(Tree((3,)), "parason")  # type: ignore[arg-type]


def test_tree_equality_and_hash():
    a = parse(NESTED).tree
    b = parse(NESTED).tree
    assert a == b and hash(a) == hash(b)
    assert a != parse(NESTED.replace("bb", "bc")).tree
