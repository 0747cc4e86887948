"""End to end: the real CLI, a few SFT and RL steps through Ray, DeepSpeed, verl and W&B."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from leftovers import shm_files  # tests/e2e is on sys.path

ROOT = Path(__file__).resolve().parents[2]
# one worker for both modules that read the shared smoke run (tests/e2e/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("smoke_run")]


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


# Executed branches over whole engine requests (vLLM's path, the hf engine
# standing in) scored with the structured layout's copies: the first RL step's ppo_kl ~ 0 below is
# then the end-to-end check that the learner reproduces the request executor's logprobs exactly.
# The vllm run: the same executed branches on a real vLLM engine (the CPU build) in the rollout actor,
# weights reaching it over the collective group after every update.
RUNS = {
    # the suite's shared smoke run (tests/e2e/conftest.py: these overrides and the visible run's), not a
    # run of its own; the default causal path runs end to end in tests/e2e/test_rl_beats_sft.py
    # (+experiment=reasoning_rl)
    "requests": None,
    # held out: 4 problems x 1 sample (no assertion reads the figures; each evaluation is a vLLM generate)
    "vllm": ["rollout=vllm_cpu", "rollout.executor.mode=executed", "learner.layout=structured",
             "data.n_test=4", "trainer.eval_samples=1"],
}


@pytest.fixture(scope="module", params=[pytest.param(k, marks=[pytest.mark.vllm] if k == "vllm" else [])
                                        for k in sorted(RUNS)])
def run(tmp_path_factory, request, attach):
    if request.param == "vllm":
        pytest.importorskip("vllm")  # a failure instead under PARALLAX_TIER=vllm (tests/conftest.py)
    if RUNS[request.param] is None:
        smoke = request.getfixturevalue("smoke_run")
        assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]
        return smoke.run_dir, smoke.stdout + smoke.stderr, smoke.shm_left
    run_dir = tmp_path_factory.mktemp(f"e2e_{request.param}")
    cmd = [sys.executable, "-m", "orchestrator", "+experiment=smoke", f"hydra.run.dir={run_dir}",
           "logging.progress_bar=false", attach, *RUNS[request.param]]
    before = shm_files()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir, out.stdout + out.stderr, shm_files() - before


def test_the_run_leaves_nothing_in_shared_memory(run):
    """The weight hand-off's buffers (the smoke run's colocated engines) and vLLM's message queues (the vllm
    run) are gone when the run ends: names left in /dev/shm hold its memory until the machine restarts
    (13 GB of them once failed a whole CI on memory)."""
    assert run[2] == set(), sorted(run[2])


def test_metrics_are_logged_and_finite(run):
    run_dir, *_ = run
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sft = [r for r in rows if "sft/loss" in r]
    rl = [r for r in rows if "reward/mean" in r]
    assert len(sft) >= 1 and len(rl) >= 1
    assert all(math.isfinite(r["sft/loss"]) for r in sft)
    assert all(math.isfinite(r["actor/pg_loss"]) for r in rl)
    for key in ("timing/generate", "timing/reward", "timing/update", "timing/sync", "parallel/ratio"):
        assert key in rl[0], key
    # The engine sampled with the learner's weights (synced after SFT): before the update the
    # learner's logprobs equal the engine's, so the first RL step's ratio is 1 (ppo_kl ~ 0).
    assert abs(rl[0]["actor/ppo_kl"]) < 1e-4, rl[0]["actor/ppo_kl"]
    assert rl[0]["parallel/ratio"] > 0.2, rl[0]["parallel/ratio"]  # the check covered forked trajectories
    # the collective sync after each update: the tiny model's weights, its tied lm_head sent once
    assert all(r["sync/bytes"] > 1e6 and r["sync/buckets"] >= 1 for r in rl), [r.get("sync/bytes") for r in rl]


def test_sft_then_rl_updates_change_parameters(run):
    run_dir, *_ = run
    ckpts = sorted(p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step_"))
    assert len(ckpts) == 2  # one at the end of each stage
    init, after_sft, final = (_weights(run_dir / "model_init"), _weights(ckpts[0] / "model"),
                              _weights(ckpts[1] / "model"))
    assert any(not torch.equal(init[k], after_sft[k]) for k in init), "SFT changed nothing"
    assert any(not torch.equal(after_sft[k], final[k]) for k in init), "RL changed nothing"


def test_run_leaves_wandb_offline_run_summary_and_checkpoint(run):
    run_dir, output, _ = run
    assert list((run_dir / "wandb").glob("offline-run-*"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [s["stage"] for s in summary["stages"]] == ["init", "sft", "rl"]
    state = json.loads((run_dir / "checkpoints" / "latest").read_text() and
                       (run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip()
                        / "trainer_state.json").read_text())
    assert state["curriculum"]["global_step"] == summary["steps"]
    # The per-stage table is printed on lines of its own, after the progress bar.
    assert any(line.startswith("stage ") and "| acc " in line for line in output.splitlines())


def test_stages_on_a_trajectories_file_report_their_bad_rows(tmp_path, attach):
    """A cold start on real Parallel-GSM8K rows (verl's parquet schema, here as JSONL) with one bad row,
    then RL on the same file's prompts and answers: the run trains, and the bad row is reported by its
    line, not dropped silently. (The tiny model's context is raised to hold the real rows.)"""
    import pyarrow.parquet as pq

    sample = ROOT.parent / "shared/data/parallel_r1/gsm8k_parallel_sft_sample.parquet"
    if not sample.is_file():
        pytest.skip("the shared real sample is not on this machine")
    rows = [r for r in pq.read_table(sample).to_pylist()[:12] if "</Parallel>\n<Summary>" in r["output"]][:8]
    rows.insert(3, {**rows[0], "index": "bad-row", "output": "no block and no final answer"})
    data = tmp_path / "cold_start.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "orchestrator", "+experiment=smoke", f"hydra.run.dir={run_dir}",
           "logging.progress_bar=false", f"curriculum.stages.sft.data={data}", "curriculum.stages.sft.steps=2",
           f"curriculum.stages.rl.data={data}", "curriculum.stages.rl.steps=1", "trainer.sft_batch_size=4",
           "trainer.prompts_per_step=4", "trainer.eval_after_stage=false",  # no assertion reads a held-out figure
           "model.tiny.max_position_embeddings=4096", "logging.wandb_mode=disabled", attach]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads((run_dir / "data_sft.json").read_text())
    assert (report["rows"], report["kept"]) == (9, 8)
    assert report["bad_rows"] == [{"line": 4, "code": "no_final_answer",
                                   "message": "no final answer after the last block"}]
    assert "line 4: no_final_answer" in out.stderr
    rl = json.loads((run_dir / "data_rl.json").read_text())
    assert (rl["rows"], rl["kept"], rl["bad"]) == (9, 9, 0)  # an RL prompt needs no trajectory
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [m["sft/loss"] for m in metrics if "sft/loss" in m]
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses)
    assert any("reward/mean" in m for m in metrics)  # the RL step scored the file's prompts


def test_rows_past_the_models_context_are_bad_rows(tmp_path):
    """The same file with the tiny model's own 1,024-token context: every real row is too long, and the
    run stops at setup naming the file and the reason instead of training past the context."""

    sample = ROOT.parent / "shared/data/parallel_r1/gsm8k_parallel_sft_sample.parquet"
    if not sample.is_file():
        pytest.skip("the shared real sample is not on this machine")
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "orchestrator", "+experiment=smoke", f"hydra.run.dir={run_dir}",
           "logging.progress_bar=false", f"curriculum.stages.sft.data={sample}", "curriculum.stages.sft.steps=2"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode != 0
    assert "no usable row" in out.stderr and "too_long" in out.stderr
    report = json.loads((run_dir / "data_sft.json").read_text())
    assert report["kept"] == 0 and report["by_code"] == {"too_long": 170, "malformed": 1}


REFUSALS = [
    # a path that is not a directory is refused with the config, before anything is loaded
    ("model.path=/nonexistent/model", "config error: model.path: no such directory: /nonexistent/model"),
    ("curriculum.stages.rl.data=/nonexistent/prompts.jsonl",
     "setup error: curriculum.stages.rl.data='/nonexistent/prompts.jsonl'"),
    ("curriculum.stages.rl.data=gsm9k", "setup error: curriculum.stages.rl.data='gsm9k': unknown benchmark 'gsm9k'"),
    ("trainer.eval_data=[gsm8k,amc24]", "setup error: trainer.eval_data: 'amc24': unknown benchmark"),
]


@pytest.mark.parametrize("override,message", REFUSALS)
def test_a_missing_model_or_dataset_is_a_setup_error_before_ray(refused, override, message):
    err = refused("+experiment=smoke", override)
    assert "parallax: " + message in err, err[-2000:]


def test_a_setup_error_is_exit_2_and_one_line_in_a_real_process(tmp_path):
    """One setup error as the user meets it (the rest run in-process above; a config error's process:
    tests/contract/test_config.py): exit code 2, no Ray, no traceback."""
    override, message = REFUSALS[2]
    cmd = [sys.executable, "-m", "orchestrator", "+experiment=smoke", f"hydra.run.dir={tmp_path}", override]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "parallax: " + message in out.stderr, out.stderr[-2000:]
    assert "Started a local Ray instance" not in out.stdout + out.stderr and "Traceback" not in out.stderr


def test_an_unwritable_run_directory_is_a_setup_error(refused, tmp_path):
    """It was Hydra's traceback (rc 1, "Unable to configure handler 'file'")."""
    err = refused("+experiment=smoke", "hydra.run.dir=/proc/parallax_run")
    assert "parallax: setup error: hydra.run.dir=/proc/parallax_run: cannot write in /proc/parallax_run" in err, err
    locked = tmp_path / "locked"
    locked.mkdir()
    if subprocess.run(["chattr", "+i", str(locked)], capture_output=True, check=False).returncode != 0:
        return  # no chattr here (or a filesystem without the flag): the /proc case stands alone
    try:
        err = refused("+experiment=smoke", f"hydra.run.dir={locked}/run")
        assert f"setup error: hydra.run.dir={locked}/run: cannot write in {locked}/run" in err, err
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=False)
