"""Generation: determinism, splits, answers, difficulty, bad input."""

from __future__ import annotations

import pytest
from toyworld_checks import parse_subtask, parse_trial, solve

from parallax import toyworld

N = 2000


@pytest.fixture(scope="module")
def mixed_all_levels() -> list[toyworld.Problem]:
    levels = tuple(range(1, toyworld.MAX_DIFFICULTY + 1))
    return toyworld.generate("mixed", N, seed=7, difficulty=levels)


def test_same_seed_same_problems_other_seed_differs():
    a = toyworld.generate("mixed", 50, seed=3, difficulty=2)
    b = toyworld.generate("mixed", 50, seed=3, difficulty=2)
    c = toyworld.generate("mixed", 50, seed=4, difficulty=2)
    assert a == b
    assert [p.prompt for p in a] != [p.prompt for p in c]


def test_problem_is_frozen():
    p = toyworld.generate("subtask", 1, seed=0)[0]
    with pytest.raises(AttributeError):
        p.answer = "0"


def test_mixed_alternates_families_and_fields_are_well_typed():
    ps = toyworld.generate("mixed", 6, seed=0)
    assert [p.family for p in ps] == ["subtask", "trial"] * 3
    assert len({p.uid for p in ps}) == 6
    for p in ps:
        assert set(p.traces) == {"serial", "parallel_r1", "parason"}
        assert p.answer == str(int(p.answer))


def test_every_answer_recomputed_from_the_prompt(mixed_all_levels):
    for p in mixed_all_levels:
        family, answer = solve(p.prompt)  # asserts exactly one trial winner
        assert family == p.family, p.prompt
        assert p.answer == str(answer), p.prompt


def test_trial_answer_is_one_of_the_candidates_and_not_always_in_one_place():
    ps = toyworld.generate("trial", 400, seed=1, difficulty=3)
    positions = set()
    for p in ps:
        _, _, cands = parse_trial(p.prompt)
        assert len(set(cands)) == len(cands)
        positions.add(cands.index(int(p.answer)))
    assert positions == {0, 1, 2, 3}  # the winner's slot is not a copyable pattern


@pytest.mark.parametrize("d", range(1, toyworld.MAX_DIFFICULTY + 1))
def test_difficulty_sets_number_of_parts_and_candidates(d):
    for p in toyworld.generate("mixed", 40, seed=d, difficulty=d):
        assert p.difficulty == d
        n = len(parse_subtask(p.prompt)) if p.family == "subtask" else len(parse_trial(p.prompt)[2])
        assert n == 1 + d


def test_difficulty_widens_operands():
    def largest(d: int) -> int:
        return max(
            max(a, b)
            for p in toyworld.generate("subtask", 200, seed=0, difficulty=d)
            for a, b in parse_subtask(p.prompt)
        )

    assert largest(1) <= 9 < largest(5) <= 12


def test_mixed_difficulty_draws_every_level():
    ps = toyworld.generate("mixed", 300, seed=0, difficulty=(1, 2, 3))
    assert {p.difficulty for p in ps} == {1, 2, 3}


def test_prompts_and_traces_are_short_at_low_difficulty():
    for p in toyworld.generate("mixed", 300, seed=5, difficulty=1):
        assert 12 <= len(p.prompt) <= 40, p.prompt
        assert 20 <= len(p.traces["serial"]) <= 80, p.traces["serial"]
        assert max(len(t) for t in p.traces.values()) <= 170, p.traces


def test_splits_disjoint_even_up_to_reordering():
    def key(prompt: str):
        if prompt.startswith("Q: x*"):
            m, r, cands = parse_trial(prompt)
            return ("t", m, r, tuple(sorted(cands)))
        return ("s", tuple(sorted(tuple(sorted(t)) for t in parse_subtask(prompt))))

    train, test = toyworld.make_splits(3000, 300, seed=0, difficulty=1)
    assert len(train) == 3000 and len(test) == 300
    test_keys = [key(p.prompt) for p in test]
    assert len(set(test_keys)) == len(test_keys)
    assert not {key(p.prompt) for p in train} & set(test_keys)
    assert not {p.prompt for p in train} & {p.prompt for p in test}
    assert {p.uid for p in train}.isdisjoint(p.uid for p in test)
    assert toyworld.make_splits(3000, 300, seed=0, difficulty=1) == (train, test)


def test_splits_single_family_and_too_small_space():
    train, test = toyworld.make_splits(10, 10, seed=1, difficulty=2, family="trial")
    assert {p.family for p in train + test} == {"trial"}
    with pytest.raises(ValueError, match="too small"):
        toyworld.make_splits(0, 100_000, seed=0, difficulty=1, family="trial")


def test_corpus_covers_prompts_traces_and_tags():
    texts = toyworld.corpus(50, seed=0)
    assert len(texts) == 200
    joined = "".join(texts)
    for tag in ("<Path>", "<Summary>", "<Subtask>", "<Trial>", "<Thread>", "<Outlines>", " #### "):
        assert tag in joined
    assert texts == toyworld.corpus(50, seed=0)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: toyworld.generate("algebra", 1, 0), "subtask, trial, mul, search, mixed, all"),
        (lambda: toyworld.make_splits(1, 1, 0, family="algebra"), "subtask, trial, mul, search, mixed, all"),
        (lambda: toyworld.generate("mixed", 1, 0, difficulty=0), "difficulty"),
        (lambda: toyworld.generate("mixed", 1, 0, difficulty=toyworld.MAX_DIFFICULTY + 1), "difficulty"),
        (lambda: toyworld.generate("mixed", 1, 0, difficulty=()), "empty"),
        (lambda: toyworld.generate("mixed", -1, 0), "non-negative"),
    ],
)
def test_bad_input_raises_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("difficulty", [1.5, "2", True, (1, 2.0)])
def test_non_int_difficulty_is_a_type_error(difficulty):
    with pytest.raises(TypeError, match="difficulty must be an int"):
        toyworld.generate("mixed", 1, 0, difficulty=difficulty)
