"""bench/gpu_check.sh's stages and resume (issue 50: the device gives 10 minutes a command, 15 in all): each
stage's limits add up to at most 240 s, a call runs the first stage not passed, a rerun skips what passed
and repeats what failed, a step over its limit fails. Run on CPU with a plan of its own cheap steps."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.sh"


def _run(tmp: Path, *args: str, plan: str | None = None, **env: str) -> tuple[int, str]:
    """gpu_check.sh with `plan` (lines "STAGE NAME LIMIT COMMAND"), its state and $OUT under `tmp`."""
    run_env = os.environ | {"OUT": str(tmp / "out"), "GPU_CHECK_STATE": str(tmp / "state"),
                            "GPU_CHECK_WHEELS": str(tmp / "no-wheels"), "FLAG": str(tmp / "flag")} | env
    if plan is not None:
        (tmp / "plan.txt").write_text(plan)
        run_env["GPU_CHECK_PLAN"] = str(tmp / "plan.txt")
    got = subprocess.run(["bash", str(SCRIPT), *args], env=run_env, capture_output=True, text=True, timeout=60,
                         check=False)
    return got.returncode, got.stdout + got.stderr


def _summary(tmp: Path) -> list[str]:
    return (tmp / "out" / "summary.txt").read_text().splitlines()


PLAN = """\
1 a 5 echo step-a
1 b 5 test -f "$FLAG" && echo step-b
2 c 5 echo step-c
3 slow 1 sleep 5
"""


def test_the_real_plan_fits_each_stage_in_four_minutes(tmp_path):
    rc, out = _run(tmp_path, "--list")
    assert rc == 0, out
    stages = {int(line.split()[1].rstrip(":")): int(line.split()[2]) for line in out.splitlines()
              if line.startswith("stage ")}
    assert len(stages) >= 3 and all(0 < s <= 240 for s in stages.values()), stages
    names = {line.split()[1] for line in out.splitlines() if not line.startswith("stage ")}
    assert {"learner_structured", "flex", "pytest_gpu", "learner_memory"} <= names, names


def test_a_stage_over_four_minutes_is_refused_before_anything_runs(tmp_path):
    rc, out = _run(tmp_path, plan="1 a 200 echo ran\n1 b 41 echo ran\n")
    assert rc == 2 and "more than 240 s" in out and "ran" not in out, out


def test_a_rerun_skips_what_passed_and_goes_on_stage_by_stage(tmp_path):
    rc, out = _run(tmp_path, plan=PLAN)  # stage 1: a passes, b fails (no flag yet), c waits for its stage
    assert rc == 1, out
    assert [line.split(" ")[:2] for line in _summary(tmp_path)] == [["a", "rc=0"], ["b", "rc=1"], ["c", "not"],
                                                                    ["slow", "not"]]
    (tmp_path / "flag").touch()
    rc, out = _run(tmp_path, plan=PLAN)  # stage 1 again: a skipped, b rerun and passes
    assert rc == 0 and "step-a" not in out and "step-b" in out, out
    summary = _summary(tmp_path)
    assert summary[0].startswith("a rc=0") and summary[0].endswith("(passed earlier, skipped)"), summary
    assert (tmp_path / "out" / "a.txt").read_text() == "step-a\n"  # its log is in this call's $OUT too
    rc, out = _run(tmp_path, plan=PLAN)  # the next stage not passed: 2
    assert rc == 0 and "step-c" in out and "== stage 3" not in out, out
    rc, out = _run(tmp_path, plan=PLAN)  # stage 3: over its limit, a failure (timeout's 124)
    assert rc == 1 and _summary(tmp_path)[-1].startswith("slow rc=124"), out
    rc, out = _run(tmp_path, "3", plan=PLAN.replace("sleep 5", "true"))  # a named stage
    assert rc == 0, out
    rc, out = _run(tmp_path, plan=PLAN.replace("sleep 5", "true"))
    assert rc == 0 and "all passed" in out and "== stage" not in out, out
    rc, out = _run(tmp_path, plan=PLAN.replace("sleep 5", "true"), FORCE="1")  # everything of stage 1 again
    assert rc == 0 and "step-a" in out and "step-c" not in out, out
