"""Metrics counted in tokens of a tokenizer: offset mapping path, encode fallback, real HF tokenizer."""

import re

import pytest
from fmt_strategies import trees
from hypothesis import HealthCheck, given, settings

from parallax.formats import ALL_SPECIAL_TOKENS, PARALLEL_R1, PARASON, compute_metrics, parse, render, text_stats

_TAG_RE = re.compile("|".join(re.escape(t) for t in ALL_SPECIAL_TOKENS))


class CharTokenizer:
    """One token per character, except that every tag string is one token (HF-style __call__)."""

    def _offsets(self, text):
        out, i = [], 0
        for m in _TAG_RE.finditer(text):
            out.extend((k, k + 1) for k in range(i, m.start()))
            out.append((m.start(), m.end()))
            i = m.end()
        out.extend((k, k + 1) for k in range(i, len(text)))
        return out

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
        offs = self._offsets(text)
        d = {"input_ids": list(range(len(offs)))}
        if return_offsets_mapping:
            d["offset_mapping"] = offs
        return d

    def encode(self, text, add_special_tokens=False):
        return list(range(len(self._offsets(text))))


class EncodeOnlyTokenizer(CharTokenizer):
    """No offsets: forces the per-piece encode fallback."""

    def __call__(self, *a, **k):
        raise NotImplementedError("no offsets")


R1 = "ab<Parallel><Path>xy</Path><Path>z</Path><Summary></Summary></Parallel>c"
PARASON_TEXT = (
    "hi <Parallel><Outlines><Subtask>a</Subtask><Trial>bb</Trial></Outlines>"
    "<Thread>xyz</Thread><Thread>w</Thread></Parallel>!"
)


@pytest.mark.parametrize("tok", [CharTokenizer(), EncodeOnlyTokenizer()])
def test_char_tokenizer_hand_worked(tok):
    # a b | P | Path x y /Path (4) | Path z /Path (3) | Summary /Summary (2) | /P | c
    m = compute_metrics(parse(R1, "parallel_r1").tree, "parallel_r1", tok)
    assert (m.total_tokens, m.critical_path_tokens, m.first_parallel_token) == (14, 11, 2)
    assert (m.path_tokens, m.main_tokens) == (7, 7)
    # h i ' ' | P O | Subtask a /Subtask (3) | Trial b b /Trial (4) | /O | Thread x y z /Thread (5) |
    # Thread w /Thread (3) | /P | !
    m = compute_metrics(parse(PARASON_TEXT).tree, "parason", tok)
    assert m.total_tokens == 3 + 2 + 3 + 4 + 1 + 5 + 3 + 1 + 1
    assert m.critical_path_tokens == m.total_tokens - 8 + 5
    assert (m.subtask_tokens, m.trial_tokens, m.main_tokens) == (3 + 5, 4 + 3, 3 + 2 + 1 + 1 + 1)
    assert m.first_parallel_token == 3


def test_error_token_offset_with_tokenizer():
    text = "ab <Parallel><Path>x</Trial>"  # '</Trial>' is text in Parallel-R1 -> truncated
    r = parse(text, "parallel_r1", tokenizer=CharTokenizer())
    assert (
        r.status == "truncated_in_branch" and r.error.token_offset == 3 + 1 + 1 + 2
    )  # x, </Trial> (a tag token in CharTokenizer)
    r = parse("ab </Path>", "parallel_r1", tokenizer=CharTokenizer())
    assert r.error.char_offset == 3 and r.error.token_offset == 3


def test_hf_tokenizer_offsets_match_per_piece_encoding(hf_tokenizer):
    for text, fmt in ((R1, "parallel_r1"), (PARASON_TEXT, "parason")):
        tree = parse(text, fmt).tree
        m = compute_metrics(tree, fmt, hf_tokenizer)
        assert m.total_tokens == len(hf_tokenizer.encode(text, add_special_tokens=False))

        class NoOffsets:
            def __call__(self, *a, **k):
                raise NotImplementedError

            def encode(self, s, add_special_tokens=False):
                return hf_tokenizer.encode(s, add_special_tokens=add_special_tokens)

        assert compute_metrics(tree, fmt, NoOffsets()) == m


def test_hf_tokenizer_tags_are_single_tokens(hf_tokenizer):
    for t in ALL_SPECIAL_TOKENS:
        assert len(hf_tokenizer.encode(t, add_special_tokens=False)) == 1
    # so each tag costs one token and the example's tag structure matches default units
    text = "<Parallel><Path></Path><Path></Path><Summary></Summary></Parallel>"
    m = compute_metrics(parse(text, "parallel_r1").tree, "parallel_r1", hf_tokenizer)
    assert (m.total_tokens, m.critical_path_tokens) == (8, 6)


def test_hf_error_token_offset(hf_tokenizer):
    text = "<Parallel><Path>a</Path><Path>b</Path><Parallel>"
    r = parse(text, "parallel_r1", tokenizer=hf_tokenizer)
    # tokens: P Path a /Path Path b /Path | the second <Parallel> is token 7
    assert r.error.char_offset == text.rindex("<Parallel>") and r.error.token_offset == 7


def test_text_stats_with_tokenizer(hf_tokenizer):
    d = text_stats(R1, "parallel_r1", hf_tokenizer)
    assert d["valid"] and d["total_tokens"] == len(hf_tokenizer.encode(R1, add_special_tokens=False))
    d = text_stats(R1[:30], "parallel_r1", hf_tokenizer)
    assert not d["valid"] and d["total_tokens"] == len(hf_tokenizer.encode(R1[:30], add_special_tokens=False))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(PARASON, written=True))  # the tokenizer's special tokens are the tags the format writes
def test_hf_offsets_vs_pieces_property_parason(hf_tokenizer, tree):
    _offsets_vs_pieces(hf_tokenizer, tree, PARASON)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(PARALLEL_R1))
def test_hf_offsets_vs_pieces_property_r1(hf_tokenizer, tree):
    _offsets_vs_pieces(hf_tokenizer, tree, PARALLEL_R1)


def _offsets_vs_pieces(hf_tokenizer, tree, spec):
    """With tags as special tokens, a whole-text tokenisation splits exactly at tags, so counting
    by offsets equals encoding each piece -- but only for pieces that do not merge across gaps;
    we check the invariants that always hold instead of exact equality for arbitrary text."""
    text = render(tree, spec)
    m = compute_metrics(tree, spec, hf_tokenizer, text=text)
    assert m.total_tokens == len(hf_tokenizer.encode(text, add_special_tokens=False))
    assert 0 <= m.critical_path_tokens <= m.total_tokens
    assert m.main_tokens + m.subtask_tokens + m.trial_tokens + m.path_tokens == m.total_tokens
    d = compute_metrics(tree, spec)
    assert (m.num_blocks, m.num_branches, m.depth, m.has_parallel) == (
        d.num_blocks,
        d.num_branches,
        d.depth,
        d.has_parallel,
    )
