"""The families with long branches (mul, search) and the teacher's critical-path table.

Checked from the text alone (toyworld_checks-style: no generator code reused): every step is
true, the branches cover the prompt, the serial search stops at the winner, the mixtures keep
today's problems, and ``python -m parallax.toyworld stats`` says where a fork pays.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys

import pytest
from toyworld_checks import check_step, content_tokens

from parallax import toyworld
from parallax.formats import SUBTASK, TRIAL, Block, compute_metrics, parse

MUL_PROMPT = re.compile(r"Q: (\d{3}\*\d(?:\+\d{3}\*\d)*)\nA:")
SEARCH_PROMPT = re.compile(r"Q: x\*(\d)\*(\d)\*(\d)%10=(\d) x\?(\d+(?: \d+)*)\nA:")


@pytest.fixture(scope="module")
def problems() -> list[toyworld.Problem]:
    return toyworld.generate("all", 800, seed=5, difficulty=tuple(range(1, toyworld.MAX_DIFFICULTY + 1)))


def _chain_last_digit(x: int, factors: list[int]) -> int:
    value = x
    for f in factors:
        value = value * f % 10
    return value


def test_all_alternates_the_four_families_and_mixed_is_unchanged():
    assert [p.family for p in toyworld.generate("all", 8, seed=0)] == ["subtask", "trial", "mul", "search"] * 2
    # "mixed" draws exactly the problems it drew before the long families existed (read off d997a14)
    assert [p.prompt for p in toyworld.generate("mixed", 4, seed=0)] == [
        "Q: 6*9+3*7\nA:", "Q: x*8%10=4 x?9 3\nA:", "Q: 2*5+6*2\nA:", "Q: x*7%10=1 x?3 6\nA:"]
    train, test = toyworld.make_splits(50, 10, seed=3, difficulty=(1, 2, 3))
    digest = hashlib.sha256(repr([(p.prompt, p.traces) for p in train + test]).encode()).hexdigest()
    assert digest.startswith("901ed05ff84f1ea1")


def test_every_answer_and_step_is_true_and_branches_cover_the_prompt(problems):
    for p in problems:
        for trace in p.traces.values():
            assert all(check_step(t) for t in content_tokens(trace)), trace
            assert trace.endswith(f" #### {p.answer}")
        if p.family == "mul":
            terms = MUL_PROMPT.fullmatch(p.prompt).group(1).split("+")
            assert int(p.answer) == sum(int(a) * int(b) for a, b in (t.split("*") for t in terms))
            assert len(terms) == 1 + p.difficulty
        elif p.family == "search":
            *factors, r, cands = SEARCH_PROMPT.fullmatch(p.prompt).groups()
            cands = [int(c) for c in cands.split()]
            winners = [c for c in cands if _chain_last_digit(c, [int(f) for f in factors]) == int(r)]
            assert winners == [int(p.answer)] and len(cands) == 1 + p.difficulty


def test_mul_branches_work_their_product_digit_by_digit(problems):
    p = next(p for p in problems if p.family == "mul" and p.difficulty == 2)
    tree = parse(p.traces["parason"], "parason", strict=True).tree
    block = next(n for n in tree.nodes if isinstance(n, Block))
    assert {b.kind for b in block.branches} == {SUBTASK} and len(block.branches) == 3
    for b in block.branches:
        a, m = (int(x) for x in b.outline.split("*"))
        steps = b.body[0].split("\n", 1)[1].split()
        assert steps[-1].endswith(f"={a * m}")  # the branch ends on its product
        assert len(steps) >= 3  # several steps, not one fact


def test_serial_search_stops_at_the_winner_and_the_fork_checks_every_candidate(problems):
    searches = [p for p in problems if p.family == "search"]
    places = set()
    for p in searches:
        cands = SEARCH_PROMPT.fullmatch(p.prompt).group(5).split()
        verdicts = [t for t in content_tokens(p.traces["serial"]) if t in ("yes", "no")]
        assert verdicts == ["no"] * cands.index(p.answer) + ["yes"]
        places.add(cands.index(p.answer))
        tree = parse(p.traces["parason"], "parason", strict=True).tree
        block = next(n for n in tree.nodes if isinstance(n, Block))
        assert {b.kind for b in block.branches} == {TRIAL} and len(block.branches) == len(cands)
    assert len(places) >= 4  # the winner's place is not fixed


def test_stats_say_where_a_fork_pays():
    from parallax.tinylm.tokenizer import build_tokenizer
    from parallax.toyworld.stats import teacher_stats

    tok = build_tokenizer(toyworld.corpus(300, 0))  # digits are single tokens, tags one each
    short = teacher_stats(toyworld.generate("subtask", 40, seed=1, difficulty=1), tok)["subtask/d1"]
    long = teacher_stats(toyworld.generate("mul", 40, seed=1, difficulty=3), tok)["mul/d3"]
    assert short["speedup"] < 1 and long["speedup"] > 1.25  # two one-fact branches: the fork costs more
    # the critical path is the one formats measures, problem by problem (here in words)
    p = toyworld.generate("mul", 1, seed=1, difficulty=3)[0]
    one = teacher_stats([p])["mul/d3"]
    assert one["parason"] == compute_metrics(parse(p.traces["parason"], "parason"), "parason").critical_path_tokens
    assert one["serial"] == len(p.traces["serial"].split())


def test_stats_cli_prints_a_row_per_stratum_and_a_json_line(tmp_path):
    from parallax.tinylm.tokenizer import build_tokenizer

    build_tokenizer(toyworld.corpus(300, 0)).save_pretrained(tmp_path)  # as a tiny run's model_init/
    out = subprocess.run([sys.executable, "-m", "parallax.toyworld", "stats", "--family", "all", "-n", "64",
                          "--difficulty", "1,3", "--tokenizer", str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    table = json.loads(out[-1])
    assert table["units"] == str(tmp_path)
    strata = table["strata"]
    assert set(strata) == {f"{f}/d{d}" for f in ("subtask", "trial", "mul", "search") for d in (1, 3)} | {"all"}
    assert sum(s["n"] for k, s in strata.items() if k != "all") == strata["all"]["n"] == 64
    assert strata["mul/d3"]["speedup"] > 1.25 and strata["subtask/d1"]["speedup"] < 1
    assert any(line.startswith("mul/d3 ") for line in out)


def test_unknown_family_names_the_choices():
    with pytest.raises(ValueError, match="valid families: subtask, trial, mul, search, mixed, all"):
        toyworld.generate("long", 1, seed=0)


def test_families_joined_by_plus_alternate_in_their_order():
    """`subtask+mul`: short sums beside long products, each family's problems as its own stream draws them
    at that difficulty (the same prompts as `all` gives those two families is not promised, only the cycle)."""
    ps = toyworld.generate("subtask+mul", 6, seed=0, difficulty={"subtask": 1, "mul": 2})
    assert [p.family for p in ps] == ["subtask", "mul"] * 3
    assert all(MUL_PROMPT.match(p.prompt) and p.prompt.count("*") == 3 for p in ps[1::2])
    for bad in ("subtask+subtask", "subtask+long", "mixed+mul"):
        with pytest.raises(ValueError, match="joined by '\\+'"):
            toyworld.generate(bad, 1, seed=0)


def test_a_difficulty_per_family_draws_each_familys_levels_and_names_what_is_missing():
    per_family = toyworld.as_difficulty("subtask:1,trial:6/7")
    assert per_family == {"subtask": 1, "trial": (6, 7)}
    assert toyworld.as_difficulty(toyworld.difficulty_text(per_family)) == per_family
    train, test = toyworld.make_splits(200, 40, seed=3, difficulty=per_family, family="mixed")
    levels = {fam: {p.difficulty for p in train + test if p.family == fam} for fam in ("subtask", "trial")}
    assert levels == {"subtask": {1}, "trial": {6, 7}}
    # a single level per family draws nothing extra: the subtask problems are the plain difficulty-1 ones
    plain = [p.prompt for p in toyworld.generate("mixed", 10, seed=0) if p.family == "subtask"]
    mapped = [p.prompt for p in toyworld.generate("mixed", 10, seed=0, difficulty={"subtask": 1, "trial": 1})
              if p.family == "subtask"]
    assert mapped == plain
    with pytest.raises(ValueError, match="must name each of subtask, trial and no other; got subtask"):
        toyworld.generate("mixed", 1, seed=0, difficulty={"subtask": 1})
    with pytest.raises(ValueError, match="must be in 1..7, got 9"):
        toyworld.generate("mixed", 1, seed=0, difficulty={"subtask": 1, "trial": 9})


def test_the_run_config_takes_a_difficulty_per_family():
    from parallax.contract.data import DataConfig
    from parallax.contract.errors import ConfigError

    DataConfig(difficulty={"subtask": 1, "trial": [6, 7]})
    with pytest.raises(ConfigError, match="data.difficulty"):
        DataConfig(difficulty={"subtask": 1, "trial": 0})
    with pytest.raises(ConfigError, match="data.difficulty"):
        DataConfig(difficulty={})
