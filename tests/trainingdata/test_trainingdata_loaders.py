"""Every loader on the real files under shared/data, plus error paths and prompts."""

from __future__ import annotations

import json

import pytest

from parallax.formats import get_spec
from parallax.trainingdata import build_prompt, load_benchmark, repair_form_feed
from parallax.trainingdata.loaders import BENCHMARKS, toyworld_problems

# (benchmark, rows, first uid, first answer) -- counts from shared/data/README.md.
CASES = [
    ("gsm8k", 1319, "gsm8k/gsm8k-0", "18"),
    ("gsm8k_train", 7473, "gsm8k_train/gsm8k_train-0", "72"),
    ("math500", 500, "math500/test/precalculus/807.json", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("aime24", 30, "aime24/2024-I-1", "204"),
    ("aime25", 30, "aime25/2025-I-1", "70"),
    ("amc23", 40, "amc23/amc23-0", "27"),
    ("dapo_math_17k", 17917, "dapo_math_17k/dapo_math_17k-0", "34"),
]


@pytest.mark.parametrize("name,rows,uid,answer", CASES)
def test_loader_reads_real_file(real_data, name, rows, uid, answer):
    probs = load_benchmark(name)
    assert len(probs) == rows
    assert (probs[0].uid, probs[0].answer) == (uid, answer)
    assert all(p.question.strip() and p.answer for p in probs)
    assert len({p.uid for p in probs}) == rows  # uids identify problems
    assert all(p.benchmark == name for p in probs)


def test_gsm8k_answer_is_number_after_hashes(real_data):
    raw = [json.loads(x) for x in (real_data / "gsm8k/test.jsonl").read_text().splitlines()[:50]]
    probs = load_benchmark("gsm8k", limit=50)
    assert [p.answer for p in probs] == [r["answer"].split("####")[-1].strip().replace(",", "") for r in raw]
    assert all("####" not in p.answer for p in probs)


def test_strata_meta(real_data):
    math = load_benchmark("math500")
    assert {p.meta["level"] for p in math} == {1, 2, 3, 4, 5}
    aime = load_benchmark("aime24")
    assert sorted(p.meta["problem_number"] for p in aime) == sorted(list(range(1, 16)) * 2)


def test_dapo_form_feed_repaired(real_data):
    raw = (real_data / "math/dapo_math_17k.jsonl").read_text()
    rows = [json.loads(x) for x in raw.splitlines()]
    assert sum("\x0c" in r["problem"] for r in rows) == 637  # the flaw is in the file ...
    probs = load_benchmark("dapo_math_17k")
    assert not any("\x0c" in p.question for p in probs)  # ... and not in what we load
    frac_rac = sum(r["problem"].count("\x0crac") for r in rows)
    assert frac_rac > 600
    assert sum(p.question.count("\\frac") for p in probs) == sum(r["problem"].count("\\frac") for r in rows) + frac_rac


@pytest.mark.parametrize("broken,fixed", [
    ("m = \x0crac{1}{2}", "m = \\frac{1}{2}"),
    ("the other fi\x0cve", "the other five"),
    ("the \x0cfirst shop", "the first shop"),
    ("de\x0cne f", "define f"),
    ("= \x0c \x0c\n", "=    \n"),
    ("no damage", "no damage"),
])
def test_repair_form_feed_table(broken, fixed):
    assert repair_form_feed(broken) == fixed


def test_missing_file_error_names_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PARALLAX_DATA_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "math" / "aime25.jsonl")):
        load_benchmark("aime25")
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_benchmark("aime25", str(tmp_path / "nope.jsonl"))


def test_env_data_dir_and_custom_file(tmp_path, monkeypatch):
    (tmp_path / "math").mkdir()
    (tmp_path / "math" / "amc23.jsonl").write_text(json.dumps({"problem": "1+1?", "answer": 2}) + "\n")
    monkeypatch.setenv("PARALLAX_DATA_DIR", str(tmp_path))
    [p] = load_benchmark("amc23")
    assert (p.question, p.answer) == ("1+1?", "2")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "x"}\n')
    with pytest.raises(ValueError, match="answer"):
        load_benchmark("mine", str(bad))
    with pytest.raises(ValueError, match="unknown benchmark"):
        load_benchmark("no_such_benchmark")


def test_toyworld_matches_training_split():
    from parallax import toyworld

    _, test = toyworld.make_splits(5, 6, 3, 2, family="mixed")
    probs = toyworld_problems(n=6, seed=3, difficulty=2)
    assert [(p.uid, p.question, p.answer) for p in probs] == [(t.uid, t.prompt, t.answer) for t in test]
    assert all(p.meta["difficulty"] == 2 for p in probs)


@pytest.mark.parametrize("fmt", ["parallel_r1", "parason"])
def test_parallel_prompt_names_the_format_tags(fmt):
    spec = get_spec(fmt)
    text = build_prompt("What is 2+3?", "parallel", fmt)
    assert all(tag in text for tag in spec.tags) and "What is 2+3?" in text
    plain = build_prompt("What is 2+3?", "plain", fmt)
    assert not any(tag in plain for tag in spec.tags) and "\\boxed" in plain
    assert build_prompt("Q: 1\nA:", "raw") == "Q: 1\nA:"
    with pytest.raises(ValueError, match="style"):
        build_prompt("x", "fancy")


def test_benchmark_table_has_hub_names():
    assert BENCHMARKS["gsm8k"].hub.startswith("openai/gsm8k")
    assert all("/" in b.hub for b in BENCHMARKS.values())
