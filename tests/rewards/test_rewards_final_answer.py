"""Accuracy comes from the final answer alone, whatever the format; format-aware rewards keep their gates.

The answer is read after the last block, outside any tag left open (`parallax.formats.answer_text`): a
correct `Final Answer:` after a malformed block counts, an answer inside a path never does.
"""

from __future__ import annotations

import pytest

from parallax.formats import answer_text
from rewards.analysis import AnalysisOptions, analyze_group
from rewards.api import score_samples
from rewards.registry import make_params
from rewards.types import RewardContext

GOOD = "<Parallel><Path>6*7=42</Path><Path>7*6=42</Path><Summary>both 42</Summary></Parallel>"
CASES = [
    # (text, answer read, format valid)
    (f"{GOOD} Final Answer: 42", " Final Answer: 42", True),
    ("<Parallel><Path>6*7=42</Path></Parallel> Final Answer: 42", " Final Answer: 42", False),  # one path
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel> #### 42", " #### 42", False),  # no summary
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel><Summary>s</Summary> #### 42", " #### 42", True),  # after: valid
    ("<Parallel><Path>a</Path><Path>b</Path></Parallel><Summary>#### 41</Summary> #### 42", " #### 42", True),
    ("<Parallel><Path>a</Path><Path>#### 42", "", False),  # inside an unclosed path: never the answer
    ("<Parallel><Path>#### 42</Path><Path>b</Path>", "", False),  # inside an unclosed block
    ("So </Path> it is #### 42", "So  it is #### 42", False),  # a stray closer is skipped
    (f"{GOOD} #### 41 <Parallel><Path>#### 42", " #### 41 ", False),  # a later block left open
]


@pytest.mark.parametrize("text,region,valid", CASES)
def test_where_the_answer_is_read(text, region, valid):
    assert answer_text(text, "parallel_r1") == region
    [s] = analyze_group([text], "42", AnalysisOptions("parallel_r1"))
    assert s.format_valid is valid
    assert s.correct is ("42" in region)


def _rewards(name, texts, step=0):
    samples = analyze_group(texts, "42", AnalysisOptions("parallel_r1"))
    return score_samples(name, samples, RewardContext(step=step, ground_truth="42"), make_params(name, {})).rewards


def test_accuracy_only_rewards_score_the_final_answer_of_malformed_text():
    malformed = "<Parallel><Path>6*7=42</Path></Parallel> Final Answer: 42"
    inside = "<Parallel><Path>a</Path><Path>#### 42"
    assert _rewards("accuracy", [malformed, inside]) == [1.0, -1.0]
    assert _rewards("s1", [malformed, inside]) == [1.0, -1.0]
    assert _rewards("s2", [malformed, inside], step=0) == [1.0, -1.0]  # S2's accuracy phase (steps 0-7 of 10)


def test_format_aware_rewards_keep_their_gates():
    malformed_serial = "I think. Final Answer: 42"  # correct, no parallel unit
    one_path = "<Parallel><Path>6*7=42</Path></Parallel> Final Answer: 42"  # correct, no well-formed unit
    good = f"{GOOD} Final Answer: 42"
    assert _rewards("parallel_acc", [malformed_serial, one_path, good]) == [0.0, 0.0, 1.0]
    assert _rewards("tiered", [malformed_serial, one_path, good]) == [1.0, 1.0, 1.2]
    assert _rewards("s2", [one_path, good], step=8) == [1.0, 1.2]  # S2's tiered phase
    assert _rewards("format", [one_path, good]) == [0.0, 1.0]
