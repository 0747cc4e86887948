"""RL that improves reasoning, with a complete teacher: ``python -m orchestrator +experiment=reasoning_rl``.

The experiment (conf/experiment/reasoning_rl.yaml): SFT on Parallel-R1 traces from a teacher that never
forgets its answer line, then 100 steps of accuracy-only GRPO (32 prompts x 8, LR 1e-4) on the 30% of the
training problems that SFT never saw (``data.rl_holdout=0.3``). Before, RL's gains were the answer line a
forgetful teacher left out; with a complete one RL lowered accuracy (0.487 -> 0.463), because it trained on
problems SFT had memorised.

Measured over trainer seeds 0-3 (docs/results.md, "Where RL has room"): held-out mean@8 SFT -> RL 0.503 ->
0.567, 0.460 -> 0.520, 0.662 -> 0.667, 0.650 -> 0.645, and the training reward (RL's own problems, new to
the model when the stage starts) by quarter 0.59 -> 0.75, 0.51 -> 0.70, 0.69 -> 0.82, 0.70 -> 0.82; the
answered share moves by at most 0.003. The held-out gain comes in the two seeds whose SFT is weaker and not
in the other two, so this short proof asserts what held in every one: the training reward climbs, the
held-out accuracy does not fall beyond noise, and nothing of it is answering. To fit CI's budget it runs 30 of
the 100 RL steps: the training reward of steps 20-29 exceeded that of steps 0-9 in all seven measured runs (four
seeds of the experiment, three of its serial arm), by 0.025 at the least; by 0.073 in seed 0's, the run here
(the same to the digit from one run to the next on these CPUs). Steps 30-39 exceeded 0-9 by 0.06-0.16 in all
seven, so 40 steps make a stronger proof at ~35 s more. One run, SFT and RL in one process, on the hf engine
(~4.5 min).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow]

RL_STEPS = 30  # of the experiment's 100
REWARD_CLIMB = 0.02  # training reward, steps 20-29 minus steps 0-9 (seven runs: 0.025 at the least; seed 0 0.073)
HELDOUT_DROP = 0.04  # held-out mean@8 may lose at most this (seeds: +0.064, +0.060, +0.005, -0.005; ~2 s.e.)
ANSWERED_MOVE = 0.02  # the answered share may move at most this much either way (seeds: <= 0.003)


@pytest.fixture(scope="module")
def run(tmp_path_factory, attach) -> tuple[list[dict], list[dict]]:
    run_dir = tmp_path_factory.mktemp("reasoning_rl")
    cmd = [sys.executable, "-m", "orchestrator", "+experiment=reasoning_rl", "trainer.seed=0",
           f"curriculum.stages.rl.steps={RL_STEPS}",
           f"hydra.run.dir={run_dir}", "logging.progress_bar=false", "logging.wandb_mode=disabled",
           "trainer.eval_init=false",
           "trainer.eval_greedy=false", attach]  # no assertion reads a greedy figure
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    stages = json.loads((run_dir / "summary.json").read_text())["stages"]
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return stages, [r for r in rows if "reward/correct" in r]


def test_sft_learns_the_format_and_always_answers(run):
    stages, _ = run
    assert [s["stage"] for s in stages] == ["sft", "rl"]
    sft = stages[0]
    assert sft["eval/answered"] >= 0.95 and sft["eval/parallel/ratio"] >= 0.95, sft


def test_rl_raises_the_reward_on_problems_sft_never_saw_and_not_by_answering(run):
    stages, rl = run
    sft, after = stages
    assert len(rl) == RL_STEPS
    first, last = (statistics.mean(r["reward/correct"] for r in part) for part in (rl[:10], rl[-10:]))
    assert last - first >= REWARD_CLIMB, [round(r["reward/correct"], 3) for r in rl]
    assert after["eval/acc"] >= sft["eval/acc"] - HELDOUT_DROP, (sft["eval/acc"], after["eval/acc"])
    assert abs(after["eval/answered"] - sft["eval/answered"]) <= ANSWERED_MOVE
