"""LoRA end to end (`learner.lora.r > 0`): the CLI trains adapters through Ray and DeepSpeed, and what
reaches the rollout engine and the checkpoints is the plain model with the adapters merged in.

The first RL step's ppo_kl ~ 0 says the engine sampled with exactly the learner's merged weights (sent
over the collective group after SFT); the checkpoints say that only what LoRA trains moved: the adapted
projections and the format tags' rows, never a norm or a non-tag embedding row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_lora_trains_adapters_and_the_engine_samples_the_merged_model(tmp_path, attach):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "orchestrator", "+experiment=smoke", "learner.lora.r=8",
           "curriculum.stages.sft.steps=6", "curriculum.stages.rl.steps=2", "data.n_test=4",
           "trainer.eval_samples=1", "trainer.eval_greedy=false", f"hydra.run.dir={run_dir}",
           "logging.progress_bar=false", "logging.wandb_mode=disabled", attach]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "reward/mean" in r]
    assert len(rl) == 2
    assert abs(rl[0]["actor/ppo_kl"]) < 1e-4, rl[0]["actor/ppo_kl"]  # the engine has the merged weights
    assert all(r["sync/bytes"] > 1e6 for r in rl)  # the whole plain model is sent, not the adapters

    from actors.learner import tag_ids

    ckpts = sorted(p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step_"))
    init, final = _weights(run_dir / "model_init"), _weights(ckpts[-1] / "model")
    assert set(final) == set(init)  # plain names: no adapter, base_layer or token-delta tensor
    moved = {k for k in init if not torch.equal(init[k], final[k])}
    assert any("q_proj" in k for k in moved) and any("down_proj" in k for k in moved), sorted(moved)
    assert not any("norm" in k for k in moved), sorted(moved)  # the base is frozen
    emb = next(k for k in init if k.endswith("embed_tokens.weight"))
    tags = tag_ids(str(run_dir / "model_init"))
    changed = (init[emb] != final[emb]).any(1).nonzero().flatten().tolist()
    assert changed and set(changed) <= set(tags), (changed, tags)  # only the tags' rows train
