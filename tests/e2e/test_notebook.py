"""The analysis notebook runs top to bottom on a run's metrics and writes its figure."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _fake_run(run_dir: Path) -> None:
    rows = []
    for step in range(12):
        stage = 0 if step < 4 else 1
        row = {"step": step, "curriculum/stage": stage, "curriculum/reward": None if stage == 0 else "accuracy"}
        if stage:
            row |= {"reward/acc": 0.1 * step, "parallel/ratio": 1 - 0.05 * step, "parallel/first_pos": 0.02 * step}
        rows.append(row)
    rows.append({"step": 12, "eval/acc": 0.5, "eval/parallel/ratio": 0.4, "eval/parallel/first_pos": 0.3})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _fake_study(study_dir: Path) -> None:
    study_dir.mkdir()
    curves = {arm: {str(seed): {"parallel/first_pos": [[s, shift + 0.01 * s * seed] for s in range(5)],
                                "eval/acc": [[0, 0.5], [5, 0.5 + shift]]} for seed in (0, 1)}
              for arm, shift in (("accuracy", 0.1), ("parallel_acc", 0.0))}
    (study_dir / "results.json").write_text(json.dumps({"study": "drift", "question": "q?", "rl_steps": 5,
                                                        "curves": curves}))


def test_notebook_executes_and_plots(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    _fake_run(tmp_path)
    _fake_study(tmp_path / "drift")
    nb = nbformat.read(ROOT / "notebooks" / "training_dynamics.ipynb", as_version=4)
    os.environ["PARALLAX_RUN_DIR"] = str(tmp_path)
    os.environ["PARALLAX_STUDY_DIRS"] = str(tmp_path / "drift")
    try:
        nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    finally:
        del os.environ["PARALLAX_RUN_DIR"], os.environ["PARALLAX_STUDY_DIRS"]
    assert (tmp_path / "dynamics.png").stat().st_size > 10_000
    assert (tmp_path / "drift" / "notebook.png").stat().st_size > 10_000
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "13 logged steps" in text and "step    4: stage 1 reward accuracy" in text
    assert "drift: 2 arms x 2 seeds, 5 RL steps" in text


def test_plot_run_writes_summary_png(tmp_path):
    from orchestrator.plots import plot_run

    _fake_run(tmp_path)
    out = plot_run(tmp_path)
    assert out.name == "summary.png" and out.stat().st_size > 10_000
