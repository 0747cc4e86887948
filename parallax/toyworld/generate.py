"""Seeded generation of toy problems, train/test splits and the tokenizer corpus.

Determinism: every function builds its own ``random.Random`` from its ``seed`` (string seeds
for derived streams, which Python hashes deterministically), so the same arguments give the
same problems in every process.

Mixed difficulty: wherever ``difficulty`` is accepted, a sequence of ints (``(1, 2, 3)``)
draws each problem's difficulty uniformly from it, and a mapping from each family of the cycle
to an int or a sequence (``{"subtask": 1, "trial": 7}``) draws it per family: short problems
beside long ones (`as_difficulty` reads every spelling a config or command line uses).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence

from parallax.formats import PARALLEL_R1, FormatSpec
from parallax.toyworld.problem import FAMILIES, FAMILY_CHOICES, LONG_FAMILIES, MAX_DIFFICULTY, Problem
from parallax.toyworld.tasks import check_difficulty, flawed, sample_mul, sample_search, sample_subtask, sample_trial
from parallax.toyworld.traces import render_all

__all__ = ["Difficulty", "as_difficulty", "corpus", "difficulty_text", "generate", "make_splits"]

Difficulty = int | Sequence[int] | Mapping[str, int | Sequence[int]]
_SAMPLERS = {"subtask": sample_subtask, "trial": sample_trial, "mul": sample_mul, "search": sample_search}
_CYCLES = {"mixed": FAMILIES, "all": FAMILIES + LONG_FAMILIES}
# make_splits gives up after this many draws in a row that found nothing new: the problem
# space (a few hundred problems at difficulty 1) is then (nearly) exhausted.
_MAX_CONSECUTIVE_MISSES = 2000


def _cycle(family: str) -> tuple[str, ...]:
    """The families a stream alternates: ``mixed``, ``all``, one family, or several joined by ``+``
    (``subtask+mul``: short sums beside long products)."""
    if family in _CYCLES:
        return _CYCLES[family]
    parts = tuple(family.split("+"))
    if not all(p in FAMILIES + LONG_FAMILIES for p in parts) or len(set(parts)) != len(parts):
        raise ValueError(f"unknown family {family!r}; valid families: {', '.join(FAMILY_CHOICES)}, or several "
                         f"of {', '.join(FAMILIES + LONG_FAMILIES)} joined by '+' (subtask+mul)")
    return parts


def _check_family(family: str) -> str:
    _cycle(family)
    return family


def _levels(difficulty: int | Sequence[int], where: str = "") -> tuple[int, ...]:
    if isinstance(difficulty, int):
        levels = (difficulty,)
    elif isinstance(difficulty, Sequence) and not isinstance(difficulty, str):
        levels = tuple(difficulty)
    else:
        raise TypeError(f"difficulty{where} must be an int or a sequence of ints, got {difficulty!r}")
    if not levels:
        raise ValueError(f"difficulty{where} sequence must not be empty")
    return tuple(check_difficulty(d) for d in levels)


def _difficulties(difficulty: Difficulty, cycle: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """Each family of ``cycle`` -> the levels its problems draw from; a mapping must name exactly them."""
    if not isinstance(difficulty, Mapping):
        levels = _levels(difficulty)
        return {fam: levels for fam in cycle}
    if set(difficulty) != set(cycle):
        raise ValueError(f"a difficulty per family must name each of {', '.join(cycle)} and no other; "
                         f"got {', '.join(map(str, difficulty)) or 'none'}")
    return {fam: _levels(difficulty[fam], f" of {fam}") for fam in cycle}


def as_difficulty(value) -> Difficulty:
    """A difficulty as a config or command line spells it -> `Difficulty`: an int, a list (Hydra's
    ListConfig too), a mapping (DictConfig too), or text: ``"2"``, ``"1,2,3"``, ``"subtask:1,trial:6/7"``.

    >>> as_difficulty("1,2"), as_difficulty("subtask:1,trial:6/7"), as_difficulty({"trial": [7]})
    ((1, 2), {'subtask': 1, 'trial': (6, 7)}, {'trial': (7,)})
    """
    if isinstance(value, str):
        if ":" in value:
            pairs = [item.split(":", 1) for item in value.split(",")]
            return {fam.strip(): as_difficulty(levels.replace("/", ",")) for fam, levels in pairs}
        try:
            levels = tuple(int(t) for t in value.split(","))
        except ValueError:
            raise ValueError(f"difficulty must be an int, a comma list of ints or family:levels pairs "
                             f"(subtask:1,trial:6/7), got {value!r}") from None
        return levels[0] if len(levels) == 1 else levels
    if isinstance(value, Mapping):
        return {str(fam): as_difficulty(v) for fam, v in value.items()}
    if isinstance(value, Sequence):
        return tuple(int(d) for d in value)
    return value


def difficulty_text(difficulty: Difficulty) -> str:
    """The command-line spelling `as_difficulty` reads back.

    >>> difficulty_text({"subtask": 1, "trial": (6, 7)}), difficulty_text((1, 2))
    ('subtask:1,trial:6/7', '1,2')
    """
    if isinstance(difficulty, Mapping):
        return ",".join(f"{fam}:{difficulty_text(v).replace(',', '/')}" for fam, v in difficulty.items())
    return str(difficulty) if isinstance(difficulty, int) else ",".join(map(str, difficulty))


def _stream(
    family: str, rng: random.Random, difficulty: Difficulty, tag: str, teacher_error: float = 0.0,
    teacher_no_answer: float = 0.0, teacher_serial: float = 0.0, r1_spec: FormatSpec = PARALLEL_R1,
    teacher_verify: float = 0.0, teacher_midfork: float = 0.0,
) -> Iterator[tuple[Problem, tuple]]:
    """Endless ``(problem, identity key)`` pairs; ``mixed`` alternates subtask, trial, ... and
    ``all`` subtask, trial, mul, search, ...

    With ``teacher_error`` p, each problem's traces are, with probability p, rendered from a
    :func:`~parallax.toyworld.tasks.flawed` solution (the answer stays the true one).  With
    ``teacher_no_answer`` q, each problem's traces, with probability q, stop before the final
    ``#### answer`` line.  With ``teacher_serial`` s, each problem's parallel traces, with
    probability s, are its serial trace (a teacher that forks only sometimes).  With
    ``teacher_verify`` v and ``teacher_midfork`` m, each problem's parallel traces fork, with
    probability v, after the whole serial solution (a parallel verification) and, with
    probability m, after its first part (``parallax.toyworld.traces.SHAPES``); otherwise at their
    first token.  Each kind of slip draws from its own stream, so the problems (and the other
    kinds' slips) are the same for every p, q, s, v and m.
    """
    _check_family(family)
    _check_error(teacher_error, "teacher_error")
    _check_error(teacher_no_answer, "teacher_no_answer")
    _check_error(teacher_serial, "teacher_serial")
    _check_shapes(teacher_verify, teacher_midfork)
    cycle = _cycle(family)
    levels = _difficulties(difficulty, cycle)
    slips = random.Random(f"{tag}/teacher_error")
    drops = random.Random(f"{tag}/teacher_no_answer")
    serials = random.Random(f"{tag}/teacher_serial")
    shapes = random.Random(f"{tag}/teacher_shape")
    i = 0
    while True:
        fam = cycle[i % len(cycle)]
        d = levels[fam][0] if len(levels[fam]) == 1 else rng.choice(levels[fam])
        prompt, sol = _SAMPLERS[fam](rng, d)
        slip = teacher_error > 0 and slips.random() < teacher_error
        drop = teacher_no_answer > 0 and drops.random() < teacher_no_answer
        serial = teacher_serial > 0 and serials.random() < teacher_serial
        shape = _shape(shapes, teacher_verify, teacher_midfork)
        traces = render_all(flawed(sol, slips) if slip else sol, answer_line=not drop, r1_spec=r1_spec, shape=shape)
        problem = Problem(
            uid=f"{tag}-{i}",
            family=fam,
            difficulty=d,
            prompt=prompt,
            answer=str(sol.answer),
            traces=traces,
            teacher_flawed=slip,
            teacher_no_answer=drop,
            teacher_shape=shape,
            key=sol.key,
        )
        if serial:
            problem = problem.as_serial()
        yield problem, sol.key
        i += 1


def _check_error(p: float, name: str) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        raise ValueError(f"{name} must be a probability in [0, 1), got {p!r}")
    return p


def _check_shapes(verify: float, midfork: float) -> None:
    _check_error(verify, "teacher_verify")
    _check_error(midfork, "teacher_midfork")
    if verify + midfork > 1:
        raise ValueError(f"teacher_verify + teacher_midfork must be at most 1, got {verify} + {midfork}")


def _shape(rng: random.Random, verify: float, midfork: float) -> str:
    """Where this problem's parallel traces fork: one draw from ``rng`` when either option is on."""
    if verify <= 0 and midfork <= 0:
        return "fork"
    u = rng.random()
    return "verify" if u < verify else "midfork" if u < verify + midfork else "fork"


def _check_count(name: str, n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{name} must be a non-negative int, got {n!r}")
    return n


def generate(family: str, n: int, seed: int, difficulty: Difficulty = 1) -> list[Problem]:
    """``n`` problems of ``family`` ("subtask", "trial" or "mixed"), deterministic in ``seed``.

    Prompts may repeat (independent draws); use :func:`make_splits` for disjoint sets.

    >>> ps = generate("mixed", 2, seed=0)
    >>> [p.family for p in ps], ps[0].traces["serial"].endswith(" #### " + ps[0].answer)
    (['subtask', 'trial'], True)
    """
    return list(iter_problems(family, n, seed, difficulty))


def iter_problems(family: str, n: int, seed: int, difficulty: Difficulty = 1) -> Iterator[Problem]:
    """The problems of :func:`generate`, one at a time (constant memory: `toyworld sample` streams them)."""
    _check_count("n", n)
    stream = _stream(family, random.Random(f"toyworld/{family}/{seed}"), difficulty, f"{family}-s{seed}")
    return (next(stream)[0] for _ in range(n))


def _take(
    stream: Iterator[tuple[Problem, tuple]], n: int, banned: set[tuple], split: str, distinct: bool
) -> list[Problem]:
    """First ``n`` problems whose identity key is not in ``banned``.

    With ``distinct`` each taken key is banned too (no repeats within the split).
    """
    out: list[Problem] = []
    misses = 0
    while len(out) < n and misses < _MAX_CONSECUTIVE_MISSES:
        problem, key = next(stream)
        if key in banned:
            misses += 1
            continue
        misses = 0
        if distinct:
            banned.add(key)
        out.append(problem)
    if len(out) == n:
        return out
    raise ValueError(
        f"could only find {len(out)} {split} problems of {n} outside the test set; "
        "the problem space is too small: raise the difficulty or ask for fewer problems"
    )


def make_splits(
    n_train: int, n_test: int, seed: int, difficulty: Difficulty = 1, family: str = "mixed",
    teacher_error: float = 0.0,
    teacher_no_answer: float = 0.0,
    teacher_serial: float = 0.0,
    r1_spec: FormatSpec = PARALLEL_R1,
    teacher_verify: float = 0.0,
    teacher_midfork: float = 0.0,
) -> tuple[list[Problem], list[Problem]]:
    """Disjoint train and test sets.

    ``r1_spec``: the Parallel-R1 spec the traces are written in (where the summary goes).

    ``teacher_error``, ``teacher_no_answer`` and ``teacher_serial`` make the train traces those
    of an imperfect teacher, ``teacher_verify`` and ``teacher_midfork`` those of one that forks
    later (see :func:`_stream`); test traces are always right and fork first.

    Test problems are distinct, and no train problem equals a test problem even up to
    reordering (``3*4+5*6`` vs ``6*5+4*3``; the same trial candidates in another order), so
    no prompt is shared.  Train may repeat a problem (independent draws), so ``n_train`` is
    not limited by the size of the problem space.  uids are ``train-s{seed}-{i}`` /
    ``test-s{seed}-{i}``.

    >>> train, test = make_splits(20, 5, seed=0)
    >>> len(train), len(test), not {p.prompt for p in train} & {p.prompt for p in test}
    (20, 5, True)
    """
    _check_count("n_train", n_train)
    _check_count("n_test", n_test)
    _check_family(family)
    seen: set[tuple] = set()
    # Test first: it is the smaller, fixed yardstick; train then skips every test prompt.
    test_stream = _stream(
        family, random.Random(f"toyworld/test/{family}/{seed}"), difficulty, f"test-s{seed}", r1_spec=r1_spec
    )
    test = _take(test_stream, n_test, seen, "test", distinct=True)
    train_stream = _stream(
        family, random.Random(f"toyworld/train/{family}/{seed}"), difficulty, f"train-s{seed}", teacher_error,
        teacher_no_answer, teacher_serial, r1_spec, teacher_verify, teacher_midfork,
    )
    train = _take(train_stream, n_train, seen, "train", distinct=False)
    return train, test


def corpus(n: int, seed: int) -> list[str]:
    """Text to train the tiny tokenizer on: for ``n`` mixed problems over every difficulty,
    the prompt and its three traces (``4 * n`` strings).

    >>> texts = corpus(2, seed=0)
    >>> len(texts), texts[0].startswith("Q: ")
    (8, True)
    """
    _check_count("n", n)
    levels = tuple(range(1, MAX_DIFFICULTY + 1))
    stream = _stream("mixed", random.Random(f"toyworld/corpus/{seed}"), levels, f"corpus-s{seed}")
    texts: list[str] = []
    for _ in range(n):
        p, _ = next(stream)
        texts.append(p.prompt)
        texts.extend(p.traces[k] for k in ("serial", "parallel_r1", "parason"))
    return texts
