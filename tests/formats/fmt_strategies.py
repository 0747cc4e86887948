"""Hypothesis strategies for canonical trajectory trees of either format, plus string mutators."""

from __future__ import annotations

import random
import re

from hypothesis import strategies as st

from parallax.formats import OUTLINE, PATH, SUBTASK, TRIAL, Block, Branch, FormatSpec, Tree, canonical_nodes

# Fragments chosen to stress the content alphabet rule: '<', '>', partial tags, tag names
# without brackets, tags of the *other* format, multi-byte characters, whitespace of all kinds.
FRAGMENTS = [
    "a", "b", "x", "1", "42", " ", "  ", "\n", "\t", "\r\n", "=", "*", "+", "#### ", ".", "é", "→", "数",
    "<", ">", "/", "x < 3", "a>b", "<Pa", "Path>", "</Thr", "<Thread", "Subtask", "<Foo>", "</", "<<",
    "<Parallel", "Parallel>", "</Summary", "<Outlines", "<Trial", "Trial>", "<Outline", "<Conclusion", "<Conclusion>",
    "<Outline>",
]  # fmt: skip


def tag_regex(spec: FormatSpec) -> re.Pattern:
    return re.compile("|".join(re.escape(t) for t in spec.parse_tags))


def free_text(spec: FormatSpec, max_size: int = 6):
    """Strings that contain no tag of ``spec`` (the content alphabet rule)."""
    rx = tag_regex(spec)
    frag = st.sampled_from(FRAGMENTS + [t for t in _other_tags(spec)])
    return st.lists(frag, max_size=max_size).map("".join).filter(lambda s: rx.search(s) is None)


def _other_tags(spec: FormatSpec) -> list[str]:
    from parallax.formats import ALL_SPECIAL_TOKENS

    return [t for t in ALL_SPECIAL_TOKENS if t not in spec.parse_tags]


gap_text = st.text(alphabet=" \t\r\n", max_size=3)


def _gaps(draw, k: int) -> tuple[str, ...]:
    if draw(st.booleans()):
        return ()
    g = tuple(draw(gap_text) for _ in range(k))
    return g if any(g) else ()


def _placement(draw, spec: FormatSpec, written: bool):
    """A block's recorded placement: None (where the spec writes it) or another accepted one."""
    if written:
        return None
    p = draw(st.sampled_from(spec.summary_accept))
    return None if p == spec.summary_placement else p


@st.composite
def parason_block(draw, spec: FormatSpec, depth: int = 1, written: bool = False):
    # full branch range at the top level; nested blocks stay small so trees do not explode
    hi = spec.max_branches if depth == 1 else min(spec.max_branches, spec.min_branches + 1)
    n = draw(st.integers(spec.min_branches, hi))
    text = free_text(spec)
    aliases = spec.uses_aliases and not written
    kinds = (SUBTASK, TRIAL, OUTLINE) if aliases else (SUBTASK, TRIAL)
    branches = []
    for _ in range(n):
        kind = draw(st.sampled_from(kinds))
        outline = draw(text)
        body = draw(parason_seq(spec, depth, written))
        branches.append(Branch(kind, body, outline))
    if aliases and draw(st.booleans()):  # the release's <Conclusion>
        return Block(tuple(branches), draw(text), _gaps(draw, 2 * n + 4), _placement(draw, spec, written))
    return Block(tuple(branches), None, _gaps(draw, 2 * n + 3))


@st.composite
def parason_seq(draw, spec: FormatSpec, depth: int, written: bool = False):
    """Thread body (``depth`` = depth of the enclosing block) or top level (``depth`` = 0)."""
    text = free_text(spec)
    nodes = [draw(text)]
    if depth < spec.max_depth:
        # top level: 0-2 blocks; inside a thread: a nested block with probability ~1/4
        k = draw(st.integers(0, 2)) if depth == 0 else int(draw(st.integers(0, 3)) == 3)
        for _ in range(k):
            nodes.append(draw(parason_block(spec, depth + 1, written)))
            nodes.append(draw(text))
    return canonical_nodes(nodes)


@st.composite
def r1_block(draw, spec: FormatSpec, written: bool = False):
    n = draw(st.integers(spec.min_branches, spec.max_branches))
    text = free_text(spec)
    branches = tuple(Branch(PATH, canonical_nodes([draw(text)])) for _ in range(n))
    return Block(branches, draw(text), _gaps(draw, n + 2), _placement(draw, spec, written))


@st.composite
def r1_seq(draw, spec: FormatSpec, written: bool = False):
    text = free_text(spec)
    nodes = [draw(text)]
    for _ in range(draw(st.integers(0, 3))):
        nodes.append(draw(r1_block(spec, written)))
        nodes.append(draw(text))
    return canonical_nodes(nodes)


def trees(spec: FormatSpec, written: bool = False):
    """Canonical :class:`Tree` trees of ``spec``'s format: everything its parser accepts (every
    accepted summary placement, the release aliases), or with `written` only what it writes."""
    seq = parason_seq(spec, 0, written) if spec.is_parason else r1_seq(spec, written)
    return seq.map(Tree)


# --------------------------------------------------------------------------- mutations


def mutate(s: str, spec: FormatSpec, rng: random.Random) -> str:
    """One random edit likely to break (or occasionally keep) validity."""
    tags = list(spec.tags)
    positions = [m.start() for m in tag_regex(spec).finditer(s)]
    op = rng.randrange(10)
    n = len(s)
    if op == 0 and n:  # delete a span
        i = rng.randrange(n)
        return s[:i] + s[i + rng.randint(1, 12) :]
    if op == 1:  # insert a random tag
        i = rng.randint(0, n)
        return s[:i] + rng.choice(tags) + s[i:]
    if op == 2 and positions:  # delete a tag
        i = rng.choice(positions)
        m = tag_regex(spec).match(s, i)
        return s[:i] + s[m.end() :]
    if op == 3 and positions:  # replace a tag by another
        i = rng.choice(positions)
        m = tag_regex(spec).match(s, i)
        return s[:i] + rng.choice(tags) + s[m.end() :]
    if op == 4 and positions:  # duplicate a tag
        i = rng.choice(positions)
        m = tag_regex(spec).match(s, i)
        return s[: m.end()] + m.group() + s[m.end() :]
    if op == 5:  # truncate
        return s[: rng.randint(0, n)]
    if op == 6 and positions:  # text right after a tag (often between structural tags)
        i = rng.choice(positions)
        m = tag_regex(spec).match(s, i)
        return s[: m.end()] + rng.choice(["x", " ", "\n", "<", "Path>", " y "]) + s[m.end() :]
    if op == 7 and len(positions) >= 2:  # swap two tags
        i, j = sorted(rng.sample(positions, 2))
        mi = tag_regex(spec).match(s, i)
        mj = tag_regex(spec).match(s, j)
        return s[:i] + mj.group() + s[mi.end() : j] + mi.group() + s[mj.end() :]
    if op == 8 and positions:  # cut a tag in half
        i = rng.choice(positions)
        m = tag_regex(spec).match(s, i)
        k = rng.randint(i + 1, m.end() - 1)
        return s[:k] + s[m.end() :]
    # insert a random fragment
    i = rng.randint(0, n)
    return s[:i] + rng.choice(FRAGMENTS) + s[i:]
