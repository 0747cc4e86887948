"""Per-step / per-evaluation parallel-structure metrics, a fold over scored records: the reward scorer's one
parse of each text (`SampleScore.structure`) gives the figures the format package gives that text, and the
accuracy split by forking reads each record's own correctness."""

from __future__ import annotations

import pytest

from orchestrator.generation import scored
from orchestrator.structure import sample_stats
from parallax.contract.batch import Prompt, StepSamples, Trajectory
from parallax.formats import text_stats
from rewards.branch import steps_share
from rewards.scorer import RewardScorer
from rewards.types import RewardGroup

FORK = "<Parallel><Path>3*4=12</Path><Path>5*6=30</Path><Summary>12+30=42</Summary></Parallel> #### 42"
SERIAL = "3*4=12 5*6=30 12+30=42 #### 42"
BROKEN = "<Parallel><Path>3*4=12 #### 42"  # a block opened, never closed: not a parallel sample
WRONG = {FORK: FORK.replace("#### 42", "#### 41"), SERIAL: SERIAL.replace("#### 42", "#### 41")}


@pytest.fixture(scope="module")
def scorer():
    s = RewardScorer("accuracy", {"format": "parallel_r1"}, workers=1)
    yield s
    s.close()


def _step(scorer, *texts: str, truth: str = "42") -> StepSamples:
    """One group of `texts`, scored by the reward scorer as a reward actor scores it."""
    trajs = [Trajectory("u", [1], [2], [0.0], "stop", t) for t in texts]
    batch = scorer.score([RewardGroup(list(texts), truth)])
    return StepSamples([scored(Prompt("u", "q", [1], truth), trajs, batch.scores[0])])


def test_the_scorers_one_parse_gives_the_format_packages_figures(scorer):
    bad_branch = FORK.replace("5*6=30", "5*6=31")
    texts = [FORK, SERIAL, BROKEN, bad_branch, "", "<Parallel>", "no answer", FORK + FORK]
    step = _step(scorer, *texts)
    for x in step.trajectories:
        assert x.score.structure == {**text_stats(x.text, "parallel_r1"),
                                     "steps_ok": steps_share(x.text, "parallel_r1", "42")}, x.text


def test_ratio_and_accuracy_split_by_forking(scorer):
    out = sample_stats(_step(scorer, FORK, FORK, WRONG[FORK], SERIAL, SERIAL, BROKEN), "p")
    assert out["p/ratio"] == pytest.approx(4 / 6)  # the broken text still holds a <Parallel>
    assert out["p/valid"] == pytest.approx(5 / 6)
    assert out["p/valid_parallel"] == pytest.approx(3 / 6)
    assert out["p/acc_parallel"] == pytest.approx(2 / 3)  # the three well-formed forks
    assert out["p/acc_serial"] == pytest.approx(2 / 3)  # two serial + the broken one (its answer, in a path, no)


def test_a_side_without_samples_is_left_out(scorer):
    out = sample_stats(_step(scorer, SERIAL, WRONG[SERIAL]), "p")
    assert out["p/acc_serial"] == 0.5 and "p/acc_parallel" not in out and "p/first_pos" not in out
    assert "p/acc_serial" not in sample_stats(_step(scorer, FORK), "p")


def test_steps_ok_is_the_share_of_units_that_check(scorer):
    bad_branch = FORK.replace("5*6=30", "5*6=31")  # branches 1/2 right, the join 12+30=42 right: 2/3
    out = sample_stats(_step(scorer, FORK, bad_branch, SERIAL, BROKEN), "p")
    assert out["p/steps_ok"] == pytest.approx((1 + 2 / 3 + 1 + 0) / 4)


def test_with_the_runs_tokenizer_the_one_parse_also_counts_its_tokens(tiny_model_path):
    """Held-out evaluation counts the model's tokens (the acc@B budgets): a run's reward actor holds the
    tokenizer's Rust core, and its one parse gives what the format package gives with the tokenizer itself."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    s = RewardScorer("accuracy", {"format": "parallel_r1"}, workers=1, tokenizer=tok.backend_tokenizer)
    try:
        texts = [FORK, SERIAL, BROKEN, ""]
        got = s.score([RewardGroup(texts, "42")]).scores[0]
    finally:
        s.close()
    for t, sc in zip(texts, got):
        want = text_stats(t, "parallel_r1", tok)
        del want["error"]  # where a parse failed, in tokens: the words' place is in structure["error"]
        assert sc.structure["in_tokens"] == want, t
    assert got[0].structure["in_tokens"]["total_tokens"] != got[0].structure["total_tokens"]  # tokens, not words
