"""Summary placement (after </Parallel>, the public convention, or inside) and the Parason release's
aliases (<Outline>, <Conclusion>): parse, render, metrics by hand, config errors."""

from __future__ import annotations

import pytest

from parallax.formats import (
    OUTLINE,
    SUBTASK,
    Block,
    Branch,
    Tree,
    answer_text,
    compute_metrics,
    get_spec,
    parse,
    render,
)

AFTER = "a <Parallel><Path>x y</Path><Path>z</Path></Parallel> <Summary>s t</Summary> #### 3"
INSIDE = "a <Parallel><Path>x y</Path><Path>z</Path><Summary>s t</Summary> </Parallel> #### 3"
RELEASE = ("go <Parallel><Outlines><Outline>p</Outline><Subtask>q r</Subtask></Outlines><Thread>x y</Thread>"
           "<Thread>z</Thread><Conclusion>c</Conclusion></Parallel> #### 3")


@pytest.mark.parametrize("text,placement", [(AFTER, None), (INSIDE, "inside")])
def test_both_placements_parse_to_one_block(text, placement):
    r = parse(text, "parallel_r1")
    assert r.ok
    (block,) = [n for n in r.tree.nodes if isinstance(n, Block)]
    assert block.summary == "s t" and block.placement == placement  # None: where the spec writes it
    assert render(r.tree, "parallel_r1") == text
    # the default spec writes the summary after: a tree built without placement renders so
    assert render(Tree(("a ", Block(block.branches, "s t"), " #### 3")), "parallel_r1") == AFTER.replace("> <S", "><S")


@pytest.mark.parametrize("text", [AFTER, INSIDE])
def test_metrics_by_hand_are_the_same_for_both_placements(text):
    # a(1) <Parallel>(1) <Path>x y</Path>(4) <Path>z</Path>(3) </Parallel>(1) <Summary>s t</Summary>(4) "#### 3"(2)
    m = compute_metrics(parse(text, "parallel_r1"), "parallel_r1")
    assert (m.total_tokens, m.critical_path_tokens, m.path_tokens, m.main_tokens) == (16, 13, 7, 9)
    assert m == compute_metrics(parse(text, "parallel_r1").tree, "parallel_r1", _generic=True)


def test_accepted_placements_are_config():
    inside_only = get_spec("parallel_r1", summary_placement="inside", summary_accept=("inside",))
    r = parse(AFTER, inside_only)
    assert not r.ok and r.error.code == "unexpected_tag" and "summary_accept" in r.error.message
    assert parse(INSIDE, inside_only).tree.nodes[1].placement is None  # its own placement
    after_only = get_spec("parallel_r1", summary_accept=("after",))
    assert parse(AFTER, after_only).ok and not parse(INSIDE, after_only).ok


@pytest.mark.parametrize("text,code", [
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel>\nBoth agree.\n<Summary>s</Summary>", "missing_summary"),
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel> Final Answer: 2", "missing_summary"),
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel><Summary>s</Summary><Summary>t</Summary>", "unexpected_tag"),
    ("<Parallel><Path>a</Path><Path>b</Path><Summary>s</Summary></Parallel><Summary>t</Summary>", "unexpected_tag"),
])
def test_a_block_has_one_summary_right_where_it_belongs(text, code):
    r = parse(text, "parallel_r1")
    assert r.status == "malformed" and r.error.code == code


def test_the_release_generator_output_parses():
    r = parse(RELEASE, "parason")
    assert r.ok and render(r.tree, "parason") == RELEASE
    block = r.tree.nodes[1]
    assert [b.kind for b in block.branches] == [OUTLINE, SUBTASK] and block.summary == "c"
    assert block.placement == "inside"  # the spec writes no conclusion; "after" is its default slot
    after = RELEASE.replace("<Conclusion>c</Conclusion></Parallel>", "</Parallel>\n<Conclusion>c</Conclusion>")
    assert parse(after, "parason").tree.nodes[1].placement is None
    assert answer_text(RELEASE, "parason") == " #### 3"  # a conclusion is not the final answer
    assert not parse(RELEASE, get_spec("parason", aliases=False)).ok  # aliases are config


@pytest.mark.parametrize("kind,shares", [
    ("outline", (7, 0, 7)), ("subtask", (14, 0, 0)), ("trial", (7, 7, 0))])
def test_untyped_entries_count_as_configured(kind, shares):
    # go(1) <Parallel>(1) <Outlines>(1) <Outline>p</Outline>(3) <Subtask>q r</Subtask>(4) </Outlines>(1)
    # <Thread>x y</Thread>(4) <Thread>z</Thread>(3) <Conclusion>c</Conclusion>(3) </Parallel>(1) "#### 3"(2)
    spec = get_spec("parason", outline_kind=kind)
    m = compute_metrics(parse(RELEASE, spec), spec)
    assert (m.total_tokens, m.critical_path_tokens) == (24, 21)
    assert (m.subtask_tokens, m.trial_tokens, m.outline_tokens) == shares
    assert m.main_tokens == 24 - sum(shares) == 10
    assert m == compute_metrics(parse(RELEASE, spec).tree, spec, _generic=True)


def test_nested_block_conclusion_after():
    text = ("<Parallel><Outlines><Trial>1</Trial><Trial>2</Trial></Outlines><Thread>A <Parallel><Outlines>"
            "<Outline>a</Outline><Outline>b</Outline></Outlines><Thread>x</Thread><Thread>y</Thread></Parallel>"
            " <Conclusion>c</Conclusion> z</Thread><Thread>B</Thread></Parallel>")
    r = parse(text, "parason")
    assert r.ok and render(r.tree, "parason") == text
    inner = r.tree.nodes[0].branches[0].body[1]
    assert inner.summary == "c" and inner.gaps[-1] == " "


@pytest.mark.parametrize("overrides,match", [
    ({"summary_placement": "before"}, "summary_placement"),
    ({"summary_accept": ("inside",)}, "must include summary_placement"),
    ({"summary_accept": ()}, "non-empty"),
    ({"outline_kind": "path"}, "outline_kind"),
])
def test_bad_options_fail_clearly(overrides, match):
    with pytest.raises(ValueError, match=match):
        get_spec("parallel_r1", **overrides)


def test_branch_kind_outline_renders_its_own_tag():
    b = Block((Branch(OUTLINE, ("x",), "o"), Branch(SUBTASK, ("y",), "p")))
    assert render(Tree((b,)), "parason").startswith("<Parallel><Outlines><Outline>o</Outline><Subtask>p</Subtask>")
