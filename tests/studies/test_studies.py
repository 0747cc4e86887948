"""Studies (#25): the commands each arm runs, the report's numbers by hand, one tiny study for real."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from parallax.studies import STUDIES
from parallax.studies.report import summarise, to_markdown, write_report
from parallax.studies.run import arm_command, sft_command

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_every_arm_command_is_filled_and_keeps_hydra_literals(name, tmp_path):
    study = STUDIES[name]
    sft = sft_command(study, tmp_path)
    assert f"curriculum.stages.sft.steps={study.sft_steps}" in sft and all(o in sft for o in study.shared)
    for arm in study.arms:
        cmd = arm_command(study, arm, tmp_path, tmp_path / "m", [0, 3])
        text = " ".join(cmd)
        assert "{model}" not in text and "{steps}" not in text and "{switch}" not in text, text
        assert f"model.path={tmp_path / 'm'}" in cmd and "trainer.seed=0,3" in cmd and "-m" in cmd
        assert f"hydra.sweep.dir={tmp_path / arm.name}" in cmd
        assert all(o in cmd for o in study.shared)
    if name == "scaffold":
        by_arm = {a.name: " ".join(arm_command(study, a, tmp_path, tmp_path, [0])) for a in study.arms}
        assert "schedule=[{cycle:[{reward:accuracy}]}]" in by_arm["S1"]
        assert f"schedule.0.steps={study.rl_steps}" in by_arm["S2"]
        assert f"schedule.0.steps={study.switch}" in by_arm["scaffold"]


def _job(path: Path, init: dict, rows: list[dict]) -> None:
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({"stages": [{"stage": "init", **init}]}))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_report_takes_start_peak_final_and_edge_means_by_hand(tmp_path):
    study = STUDIES["drift"]
    # arm accuracy: seed 0 held-out acc 0.5 -> 0.7 -> 0.6, seed 1 0.5 -> 0.4 -> 0.8; first_pos per step
    for seed, evals, pos in ((0, [0.7, 0.6], [0.0] * 5 + [0.2] * 5), (1, [0.4, 0.8], [0.1] * 10)):
        rows = [{"step": i, "parallel/first_pos": p, "parallel/ratio": 1.0, "reward/acc": 0.5}
                for i, p in enumerate(pos)]
        rows.insert(5, {"step": 5, "eval/acc": evals[0], "eval/parallel/ratio": 1.0})
        rows.append({"step": 10, "eval/acc": evals[1], "eval/parallel/ratio": 1.0, "eval/parallel/first_pos": 0.3})
        _job(tmp_path / "accuracy" / f"seed_{seed}", {"eval/acc": 0.5, "eval/parallel/first_pos": 0.1}, rows)
    _job(tmp_path / "parallel_acc" / "seed_0", {"eval/acc": 0.5}, [{"step": 0, "parallel/ratio": 1.0}])
    results = write_report(tmp_path, study)
    row = results["table"][0]
    assert row["arm"] == "accuracy" and row["seeds"] == [0, 1]
    assert row["eval/acc:start"]["mean"] == pytest.approx(0.5)
    assert row["eval/acc:peak"]["per_seed"] == {0: pytest.approx(0.7), 1: pytest.approx(0.8)}
    assert row["eval/acc:final"]["mean"] == pytest.approx(0.7)
    assert row["eval/parallel/first_pos:final"]["mean"] == pytest.approx(0.3)
    assert row["parallel/first_pos:first5"]["per_seed"] == {0: pytest.approx(0.0), 1: pytest.approx(0.1)}
    assert row["parallel/first_pos:last5"]["mean"] == pytest.approx((0.2 + 0.1) / 2)
    assert results["table"][1]["parallel/first_pos:last5"]["mean"] is None  # no forking sample: no position
    md = to_markdown(summarise({"accuracy": {int(k): v for k, v in results["curves"]["accuracy"].items()}}, study),
                     study)
    # eval/acc: start 0.5 -> final (0.6 + 0.8) / 2, peak (0.7 + 0.8) / 2, each seed's final
    assert "| accuracy (seeds 0, 1) | 0.500 -> **0.700** (0.750) [0.60/0.80] |" in md, md
    assert (tmp_path / "summary.png").stat().st_size > 10_000 and (tmp_path / "results.md").exists()


def test_a_missing_arm_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="accuracy"):
        write_report(tmp_path, STUDIES["drift"])


@pytest.mark.slow
def test_a_tiny_scaffold_study_runs_end_to_end(tmp_path):
    """The real command at a tiny size: SFT, the three arms at once on one shared cluster (one seed), the report."""
    cmd = [sys.executable, "-m", "parallax.studies", "scaffold", "--out", str(tmp_path), "--sft-steps", "4",
           "--rl-steps", "3", "--switch", "2", "--seeds", "1", "--eval-every", "2", "--parallel", "3", "--",
           "data.n_test=4", "data.n_train=128",
           "trainer.sft_batch_size=8", "trainer.prompts_per_step=2", "rollout.n=2", "rollout.max_new_tokens=24",
           "trainer.eval_samples=1", "logging.ray_metrics=false"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = json.loads((tmp_path / "scaffold" / "results.json").read_text())
    assert [r["arm"] for r in results["table"]] == ["S1", "S2", "scaffold"]
    for arm in ("S1", "S2", "scaffold"):
        curves = results["curves"][arm]["1"]
        assert [s for s, _ in curves["parallel/ratio"]] == [0, 1, 2]  # every RL step, this seed
        assert [s for s, _ in curves["eval/acc"]] == [0, 2, 3]  # before, every 2 steps, after the last
        config = yaml.safe_load((tmp_path / "scaffold" / arm / "seed_1" / ".hydra" / "config.yaml").read_text())
        schedule = config["curriculum"]["stages"]["dapo"]["schedule"]
        assert config["trainer"]["seed"] == 1 and config["curriculum"]["stages"]["dapo"]["steps"] == 3
        first = schedule[0]
        assert ([c["reward"] for c in first["cycle"]] == ["accuracy"]) if arm == "S1" else \
            (first["steps"] == {"S2": 3, "scaffold": 2}[arm]
             and [c["reward"] for c in first["cycle"]] == ["accuracy", "tiered"])
    assert "| S1 (seeds 1) |" in out.stdout and (tmp_path / "scaffold" / "summary.png").exists()


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_every_job_of_every_study_is_a_valid_config(name, tmp_path):
    """The SFT job's and each arm's overrides compose and pass the config check (one seed each)."""
    from hydra import compose, initialize_config_dir

    from parallax.contract.config import register_configs, validate

    study = STUDIES[name]
    register_configs()
    jobs = {"sft": sft_command(study, tmp_path)[3:]}
    for arm in study.arms:
        cmd = arm_command(study, arm, tmp_path, tmp_path, [0])
        jobs[arm.name] = [o for o in cmd[4:] if not o.startswith("hydra.")]
    model = tmp_path  # a directory: model.path is checked to exist
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        for job, overrides in jobs.items():
            typed = validate(compose("config", overrides=[*overrides, f"run_dir={tmp_path / job}"]))
            assert typed.trainer.eval_init is False, job
            if job != "sft":
                assert str(typed.model.path) == str(model) and typed.trainer.prompts_per_step == 8, job
                rl = [s for s in typed.curriculum.stages.values() if s.kind == "rl" and s.steps]
                assert [s.steps for s in rl] == [study.rl_steps], job
