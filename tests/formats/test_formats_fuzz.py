"""Robustness: >= 10,000 fuzzed inputs never raise, keep the invariants, and parse in linear time."""

import gc
import random
import time

import pytest
from fmt_strategies import FRAGMENTS, mutate

from parallax.formats import (
    ALL_SPECIAL_TOKENS,
    PARALLEL_R1,
    PARASON,
    STATUSES,
    compute_metrics,
    get_spec,
    parse,
    render,
    text_stats,
)
from parallax.formats.parser import _compiled, _words, part_words

SPECS = (PARALLEL_R1, PARASON, get_spec("parason", max_depth=2, min_branches=1))

VALID_SEEDS = [
    (
        "First. <Parallel><Outlines><Subtask>3*4</Subtask><Subtask>5*6</Subtask></Outlines>"
        "<Thread>3*4=12</Thread><Thread>5*6=30</Thread></Parallel> 12+30=42 #### 42"
    ),
    (
        "Go <Parallel><Outlines><Trial>a</Trial><Subtask>b</Subtask></Outlines>\n"
        "<Thread>x <Parallel><Outlines><Subtask>c</Subtask><Subtask>d</Subtask></Outlines>"
        "<Thread>cc</Thread><Thread>dd</Thread></Parallel> y</Thread><Thread>bb</Thread></Parallel> end"
    ),
    "Q <Parallel>\n<Path>a b</Path>\n<Path></Path>\n<Summary>s</Summary>\n</Parallel> A",
    "<Parallel><Outlines><Subtask></Subtask><Trial></Trial></Outlines><Thread></Thread><Thread></Thread></Parallel>",
]


def check(text, spec):
    """All invariants of one parse; returns the status."""
    n = len(text)
    strict = parse(text, spec)
    lenient = parse(text, spec, strict=False)
    assert strict.status in STATUSES and strict.status == lenient.status
    assert strict.ok == (strict.error is None) and strict.ok == (strict.status == "ok")
    assert strict.error == lenient.error
    if strict.ok:
        assert render(strict.tree, spec) == text
        m = compute_metrics(strict, spec)  # vectorised word counts over the parser's pieces
        assert (
            m
            == compute_metrics(strict.tree, spec, text=text)
            == compute_metrics(strict.tree, spec, _generic=True)
        )
        assert 0 <= m.critical_path_tokens <= m.total_tokens
        assert m.main_tokens + m.subtask_tokens + m.trial_tokens + m.path_tokens == m.total_tokens
        assert m.speedup >= 1.0 and 0.0 <= m.eta < 1.0
    else:
        assert strict.tree is None
        assert 0 <= strict.error.char_offset <= n and strict.error.token_offset >= 0
        assert 0 <= lenient.prefix_end <= n
        prefix = text[: lenient.prefix_end]
        assert render(lenient.tree, spec) == prefix
        assert parse(prefix, spec).ok
    assert part_words(text, spec_split(spec)(text)) == [_words(p) for p in spec_split(spec)(text)]
    d = text_stats(text, spec)
    assert d["valid"] == strict.ok and d["status"] == strict.status
    return strict.status


def spec_split(spec):
    return _compiled(spec).split


def _soup(rng: random.Random) -> str:
    pool = list(ALL_SPECIAL_TOKENS) * 3 + FRAGMENTS + ["", " ", "\n"]
    return "".join(rng.choice(pool) for _ in range(rng.randint(0, 60)))


def _structured(rng: random.Random) -> str:
    """Plausible but imperfect trajectories: right skeleton with random omissions/repeats."""
    out = [rng.choice(["", "Q. ", "x < 3 "])]
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.5:
            n = rng.randint(0, 10)
            out.append("<Parallel>")
            out.extend(f"<Path>{rng.choice(['', 'p', 'a b'])}</Path>" for _ in range(n))
            if rng.random() < 0.8:
                out.append("<Summary>s</Summary>")
            if rng.random() < 0.8:
                out.append("</Parallel>")
        else:
            n = rng.randint(0, 9)
            out.append("<Parallel><Outlines>")
            out.extend(
                rng.choice(["<Subtask>o</Subtask>", "<Trial>t</Trial>", "<Subtask>o</Trial>"])
                for _ in range(n)
            )
            out.append("</Outlines>")
            out.extend(
                f"<Thread>{rng.choice(['', 'w', 'v v'])}</Thread>" for _ in range(n + rng.randint(-1, 1))
            )
            if rng.random() < 0.8:
                out.append("</Parallel>")
        out.append(rng.choice(["", " ", "\n", " mid "]))
    return "".join(out)


def _nested(rng: random.Random) -> str:
    depth = rng.randint(1, 12)
    open_ = "<Parallel><Outlines><Subtask>a</Subtask><Trial>b</Trial></Outlines><Thread>"
    close = "</Thread><Thread>z</Thread></Parallel>"
    s = open_ * depth + "leaf" + close * depth
    cut = rng.random()
    if cut < 0.3:
        s = s[: rng.randint(0, len(s))]
    elif cut < 0.5:
        s = open_ * depth  # unclosed chain
    return s


def _interleaved(rng: random.Random) -> str:
    pairs = [("<Path>", "</Path>"), ("<Thread>", "</Thread>"), ("<Subtask>", "</Subtask>"),
             ("<Trial>", "</Trial>"), ("<Parallel>", "</Parallel>"), ("<Outlines>", "</Outlines>")]  # fmt: skip
    k = rng.randint(2, 6)
    chosen = [rng.choice(pairs) for _ in range(k)]
    opens = [o for o, _ in chosen]
    closes = [c for _, c in chosen]
    rng.shuffle(closes)
    return "".join(opens) + "x" + "".join(closes)


def _random_unicode(rng: random.Random) -> str:
    return "".join(chr(rng.choice([rng.randint(0, 0x7F), rng.randint(0x80, 0x2FFF), 0xD800, 0x1F600, 60, 62]))
                   for _ in range(rng.randint(0, 40)))  # fmt: skip


def _mutant(rng: random.Random) -> str:
    base = rng.choice(VALID_SEEDS)
    spec = rng.choice(SPECS[:2])
    for _ in range(rng.randint(1, 4)):
        base = mutate(base, spec, rng)
    return base


GENERATORS = [(_soup, 3000), (_structured, 2500), (_mutant, 2500), (_nested, 800), (_interleaved, 700),
              (_random_unicode, 700)]  # fmt: skip


def test_fuzz_10k_inputs():
    rng = random.Random(20240601)
    counts: dict[str, int] = {}
    total = 0
    worst = 0.0
    for gen, n in GENERATORS:
        for _ in range(n):
            text = gen(rng)
            for spec in SPECS:
                t0 = time.process_time()
                st = check(text, spec)
                worst = max(worst, time.process_time() - t0)
                counts[st] = counts.get(st, 0) + 1
            total += 1
    assert total >= 10_000
    # every status is exercised
    assert set(counts) == set(STATUSES), counts
    assert worst < 0.5  # short inputs: no pathological case


def test_empty_and_whitespace():
    for text in ("", " ", "\n\n", "\t"):
        for spec in SPECS:
            assert check(text, spec) == "ok"


@pytest.mark.parametrize("pattern", [
    "<Parallel><Outlines><Subtask>a</Subtask><Subtask>b</Subtask></Outlines><Thread>",  # deep unclosed nesting
    "<<<<Parallel<Parallel>>",
    "<Parallel><Path>a</Path><Path>",
    "x <Pat",
    "<Parallel><Outlines><Subtask>a</Subtask><Subtask>b</Subtask></Outlines><Thread>t</Thread><Thread>u</Thread></Parallel>",
])  # fmt: skip
def test_huge_inputs_linear_time(pattern):
    """Parse time grows linearly: 8x the input costs well under 8x^2 (allow 20x for noise)."""

    def timed(k):
        text = pattern * k
        best = 1e9
        gc.disable()  # measure the algorithm, not when the cyclic GC happens to run
        try:
            for _ in range(3):
                t0 = time.process_time()
                for spec in (PARALLEL_R1, PARASON):
                    parse(text, spec)
                    parse(text, spec, strict=False)
                best = min(best, time.process_time() - t0)
        finally:
            gc.enable()
        return best, text

    small, _ = timed(1_000)
    big, text = timed(8_000)  # ~0.1-1 MB
    assert big < max(small, 5e-3) * 20
    assert big < 5.0
    for spec in (PARALLEL_R1, PARASON):
        assert check(text, spec) in STATUSES


def test_deep_nesting_is_bounded():
    chain = "<Parallel><Outlines><Subtask>a</Subtask><Subtask>b</Subtask></Outlines><Thread>" * 50_000
    t0 = time.process_time()
    r = parse(chain, PARASON)
    assert time.process_time() - t0 < 2.0
    assert r.status == "malformed" and r.error.code == "too_deep"
    # the error is reported at the (max_depth + 1)-th <Parallel>
    unit = len("<Parallel><Outlines><Subtask>a</Subtask><Subtask>b</Subtask></Outlines><Thread>")
    assert r.error.char_offset == 4 * unit


def test_huge_valid_trajectory_metrics():
    block = ("<Parallel><Outlines><Subtask>a b</Subtask><Trial>c</Trial></Outlines>"
             "<Thread>w w w</Thread><Thread>v</Thread></Parallel>")
    text = ("step " + block + " ") * 20_000
    r = parse(text, PARASON)
    assert r.ok
    m = compute_metrics(r.tree, PARASON, text=text)
    # per repetition: step(1) P O Sub(4) Trial(3) /O T(5) T(3) /P = 1 + 1+1+4+3+1+5+3+1 = 20; T = 20 - 8 + 5 = 17
    assert (m.total_tokens, m.critical_path_tokens, m.num_blocks) == (400_000, 340_000, 20_000)
