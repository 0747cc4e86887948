"""Real data: every gold answer verifies against itself; a perturbed answer does not."""

import json

import pytest

from rewards.goldcheck import DEFAULT_DATA_DIR, load_golds, perturb, render, run_goldcheck

pytestmark = pytest.mark.skipif(not (DEFAULT_DATA_DIR / "math/math500.jsonl").exists(), reason="no real data")


def test_render_and_perturb():
    assert render("42", "gsm8k").endswith("#### 42")
    assert render("\\frac{1}{2}", "boxed").endswith("$\\boxed{\\frac{1}{2}}$.")
    assert perturb("42") == "43" and perturb("-1") == "0" and perturb("\\pi") == "\\pi+1"


def test_every_gold_answer_verifies_and_perturbed_does_not():
    sets = load_golds()
    assert {k: len(v[1]) for k, v in sets.items()} == {
        "gsm8k_test": 1319,
        "math500": 500,
        "aime24": 30,
        "aime25": 30,
        "amc23": 40,
    }
    report = run_goldcheck(workers=2)
    print(
        json.dumps(
            {
                k: {c: v[c] for c in ("n", "self_ok", "self_ok_mv", "perturbed_rejected")}
                for k, v in report.items()
            }
        )
    )
    for name, r in report.items():
        assert r["self_ok"] == r["n"], (name, r["fail_self"])
        assert r["self_ok_mv"] == r["n"], (name, r["fail_self_mv"])
        assert r["perturbed_rejected"] == r["n"], (name, r["fail_perturbed"])
        assert r["errors"] == {}, name
