"""The teacher that forks late (``teacher_verify``, ``teacher_midfork``): where the block sits."""

from __future__ import annotations

import pytest

from parallax import toyworld
from parallax.formats import parse
from parallax.formats.metrics import compute_metrics

V, M = 0.3, 0.25


@pytest.fixture(scope="module")
def splits():
    return toyworld.make_splits(3000, 150, seed=5, difficulty=(1, 2), teacher_verify=V, teacher_midfork=M)


@pytest.fixture(scope="module")
def clean():
    return toyworld.make_splits(3000, 150, seed=5, difficulty=(1, 2))


def test_shape_rates_and_the_test_split_forks_first(splits, clean):
    train, test = splits
    rates = {s: sum(p.teacher_shape == s for p in train) / len(train) for s in toyworld.traces.SHAPES}
    assert abs(rates["verify"] - V) < 0.04 and abs(rates["midfork"] - M) < 0.04, rates  # binomial sd < 0.009
    assert [p.traces for p in test] == [p.traces for p in clean[1]]


def test_each_shape_puts_its_block_where_it_says_with_the_same_work(splits, clean):
    train, _ = splits
    for p, c in zip(train, clean[0], strict=True):
        assert p.prompt == c.prompt and p.answer == c.answer  # the same problems at every rate
        assert p.traces["serial"] == c.traces["serial"]
        r1 = p.traces["parallel_r1"]
        if p.teacher_shape == "fork":
            assert p.traces == c.traces
            continue
        prefix = r1[: r1.index("<Parallel>")]
        serial_steps = c.traces["serial"].removesuffix(" #### " + p.answer)
        if p.teacher_shape == "verify":
            assert prefix == serial_steps + " "  # the whole solution first, then the block re-checks it
        else:
            first = serial_steps.split(" ")[0] if p.family == "subtask" else " ".join(serial_steps.split(" ")[:3])
            assert prefix == first + " "  # the first part, then the block solves the rest and re-checks it
        for kind in ("parallel_r1", "parason"):
            result = parse(p.traces[kind], kind, strict=True)
            m = compute_metrics(result, kind)
            assert result.ok and m.num_blocks == 1, (kind, p.traces[kind])
            # The block's branches are the teacher's parts (in another order for midfork).
            fork_parts = sorted(b.body[0].split("\n")[-1] for b in result.tree.nodes[1].branches)
            clean_parts = sorted(b.body[0].split("\n")[-1] for b in parse(c.traces[kind], kind).tree.nodes[0].branches)
            assert fork_parts == clean_parts
            assert p.traces[kind].endswith(" #### " + p.answer)


def test_the_first_parallel_position_moves_with_the_shape(splits):
    train, _ = splits
    pos = {}
    for s in toyworld.traces.SHAPES:
        got = [compute_metrics(parse(p.traces["parallel_r1"], "parallel_r1"), "parallel_r1").first_parallel_pos
               for p in train if p.teacher_shape == s]
        pos[s] = sum(got) / len(got)
    assert pos["fork"] == 0.0
    assert 0.05 < pos["midfork"] < pos["verify"] < 0.6, pos


def test_serial_overrides_the_shape_and_the_draws_are_independent():
    serial, _ = toyworld.make_splits(2000, 100, seed=2, teacher_serial=0.5)
    both, _ = toyworld.make_splits(2000, 100, seed=2, teacher_serial=0.5, teacher_verify=0.5, teacher_midfork=0.5)
    assert [p.teacher_serial for p in both] == [p.teacher_serial for p in serial]
    assert all(p.teacher_shape == "fork" for p in both if p.teacher_serial)
    assert {p.teacher_shape for p in both if not p.teacher_serial} == {"verify", "midfork"}


@pytest.mark.parametrize("kw", [{"teacher_verify": 0.6, "teacher_midfork": 0.5}, {"teacher_verify": 1.0},
                                {"teacher_midfork": -0.1}])
def test_bad_shape_probabilities_are_refused(kw):
    with pytest.raises(ValueError, match="teacher_"):
        toyworld.make_splits(10, 5, seed=0, **kw)


def test_the_config_refuses_shapes_that_sum_past_one():
    from parallax.contract.config import DataConfig

    assert DataConfig(teacher_verify=0.5, teacher_midfork=0.5).teacher_midfork == 0.5
    with pytest.raises(ValueError, match="data.teacher_verify"):
        DataConfig(teacher_verify=0.6, teacher_midfork=0.5)
