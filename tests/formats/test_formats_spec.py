import dataclasses
import subprocess
import sys

import pytest

from parallax import formats
from parallax.formats import ALL_SPECIAL_TOKENS, PARALLEL_R1, PARASON, FormatSpec, get_spec


def test_defaults():
    assert PARALLEL_R1.name == "parallel_r1" and PARASON.name == "parason"
    for s in (PARALLEL_R1, PARASON):
        assert (s.min_branches, s.max_branches, s.max_depth) == (2, 8, 4)
    assert PARALLEL_R1.tags == ("<Parallel>", "</Parallel>", "<Path>", "</Path>", "<Summary>", "</Summary>")
    assert PARASON.tags == (
        "<Parallel>", "</Parallel>", "<Outlines>", "</Outlines>", "<Subtask>", "</Subtask>",
        "<Trial>", "</Trial>", "<Thread>", "</Thread>",
    )  # fmt: skip


def test_all_special_tokens():
    assert ALL_SPECIAL_TOKENS == (
        "<Parallel>", "</Parallel>", "<Path>", "</Path>", "<Summary>", "</Summary>",
        "<Outlines>", "</Outlines>", "<Subtask>", "</Subtask>", "<Trial>", "</Trial>", "<Thread>", "</Thread>",
    )  # fmt: skip
    assert len(set(ALL_SPECIAL_TOKENS)) == len(ALL_SPECIAL_TOKENS)
    assert set(ALL_SPECIAL_TOKENS) == set(PARALLEL_R1.tags) | set(PARASON.tags)


def test_get_spec_and_overrides():
    assert get_spec("parason") is PARASON
    s = get_spec("parason", max_depth=2, thread_open="<T>", thread_close="</T>")
    assert s.max_depth == 2 and s.thread_open == "<T>" and s.name == "parason"
    assert PARASON.max_depth == 4  # defaults untouched


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        PARASON.max_depth = 3  # type: ignore[misc]


def test_unknown_name_lists_valid():
    with pytest.raises(ValueError, match="parallel_r1.*parason"):
        get_spec("nope")
    with pytest.raises(ValueError):
        FormatSpec(name="other")


def test_unknown_field():
    with pytest.raises(ValueError, match="unknown FormatSpec field"):
        get_spec("parason", max_dept=3)


@pytest.mark.parametrize(
    "kw",
    [
        {"min_branches": 0},
        {"min_branches": 3, "max_branches": 2},
        {"max_depth": 0},
        {"max_depth": 65},
        {"max_branches": 65},
        {"thread_open": "Thread"},
        {"thread_open": "<Thr<ead>"},
        {"thread_open": "<Thr ead>"},
        {"thread_open": "<>"},
        {"thread_open": "<Trial>"},  # duplicate tag
    ],
)
def test_invalid_specs(kw):
    with pytest.raises(ValueError):
        get_spec("parason", **kw)


def test_unused_fields_do_not_clash():
    # Parallel-R1 ignores the Parason tags, so they may coincide with its own.
    s = get_spec("parallel_r1", thread_open="<Path>")
    assert s.tags == PARALLEL_R1.tags


def test_import_is_light():
    code = (
        "import sys, parallax.formats; heavy = [m for m in ('torch', 'ray', 'vllm', 'xgrammar', 'transformers') "
        "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_public_api_documented():
    doc = formats.__doc__
    for name in (
        "parse",
        "render",
        "final_segment",
        "compute_metrics",
        "text_stats",
        "ebnf",
        "GrammarChecker",
    ):
        assert name in formats.__all__ and name in doc
