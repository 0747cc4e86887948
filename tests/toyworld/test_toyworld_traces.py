"""Teacher traces: valid under the formats contract, arithmetically true, mutually consistent."""

from __future__ import annotations

import re

import pytest
from toyworld_checks import check_step, content_tokens, parse_subtask, parse_trial

from parallax import toyworld
from parallax.formats import PATH, SUBTASK, TRIAL, Block, compute_metrics, final_segment, parse, thread_header

ANSWER_LINE = re.compile(r" #### (-?\d+)\Z")


@pytest.fixture(scope="module")
def problems() -> list[toyworld.Problem]:
    levels = tuple(range(1, toyworld.MAX_DIFFICULTY + 1))
    return toyworld.generate("mixed", 3000, seed=11, difficulty=levels)


def test_every_parallel_trace_parses_strictly_with_one_block_of_the_right_kind(problems):
    for p in problems:
        n_parts = 1 + p.difficulty
        r1 = parse(p.traces["parallel_r1"], "parallel_r1", strict=True)
        assert r1.ok, (p.traces["parallel_r1"], r1.error)
        blocks = [n for n in r1.tree.nodes if isinstance(n, Block)]
        assert len(blocks) == 1 and len(blocks[0].branches) == n_parts
        assert {b.kind for b in blocks[0].branches} == {PATH}

        pa = parse(p.traces["parason"], "parason", strict=True)
        assert pa.ok, (p.traces["parason"], pa.error)
        blocks = [n for n in pa.tree.nodes if isinstance(n, Block)]
        assert len(blocks) == 1 and len(blocks[0].branches) == n_parts
        want = SUBTASK if p.family == "subtask" else TRIAL
        assert {b.kind for b in blocks[0].branches} == {want}


def test_serial_trace_has_no_tags_and_is_not_parallel_under_either_format(problems):
    for p in problems[:300]:
        assert "<" not in p.traces["serial"]
        for fmt in ("parallel_r1", "parason"):
            r = parse(p.traces["serial"], fmt)
            assert r.ok and not r.tree.has_parallel


def test_all_traces_end_with_the_same_answer_line(problems):
    for p in problems:
        for kind, trace in p.traces.items():
            m = ANSWER_LINE.search(trace)
            assert m and m.group(1) == p.answer, (kind, trace)
        # The answer sits on the main chain after the block, where the rewards look for it.
        assert final_segment(p.traces["parallel_r1"], "parallel_r1") == f" #### {p.answer}"
        assert final_segment(p.traces["parason"], "parason").endswith(f" #### {p.answer}")


def test_every_step_is_arithmetically_true(problems):
    for p in problems:
        for trace in p.traces.values():
            for tok in content_tokens(trace):
                assert check_step(tok), (tok, trace)


def test_three_traces_carry_the_same_steps_in_the_same_order(problems):
    for p in problems:
        serial = content_tokens(p.traces["serial"])
        assert content_tokens(p.traces["parallel_r1"]) == serial
        # Parason adds the outline entries (one per part) before the same steps, and each thread
        # opens with its entry (the header the executor forces).
        tree = parse(p.traces["parason"], "parason").tree
        outlines = [b.outline for b in tree.nodes[0].branches]
        assert all(b.body[0].startswith(thread_header(b.outline)) for b in tree.nodes[0].branches)
        parason = content_tokens(p.traces["parason"])
        assert parason[: len(outlines)] == outlines
        rest = parason[len(outlines):]
        for o in outlines:  # drop each thread's header
            rest.pop(rest.index(o))
        assert rest == serial


def test_branches_cover_every_part_of_the_prompt(problems):
    for p in problems[:500]:
        steps = content_tokens(p.traces["serial"])
        if p.family == "subtask":
            terms = [f"{a}*{b}" for a, b in parse_subtask(p.prompt)]
            assert [s.split("=")[0] for s in steps[: len(terms)]] == terms
        else:
            _, _, cands = parse_trial(p.prompt)
            products = [s for s in steps if re.fullmatch(r"\d+\*\d+=\d+", s)]
            assert [s.split("*")[0] for s in products] == [str(c) for c in cands]
            verdicts = [s for s in steps if s in ("yes", "no")]
            assert verdicts.count("yes") == 1
            assert steps[-3] == f"x={p.answer}"


def test_parallel_traces_are_shorter_on_the_critical_path(problems):
    # The point of the parallel traces: latency (critical path) below total length.
    for p in problems[:300]:
        for fmt in ("parallel_r1", "parason"):
            m = compute_metrics(parse(p.traces[fmt], fmt).tree, fmt)
            assert m.critical_path_tokens < m.total_tokens
