"""Colocated engines (`rollout.colocate`) sleep through the learners' update and wake in the weight sync:
the hf engine frees its parameters' storage, refuses to generate until it is awake with the policy's
weights, and then samples exactly what it sampled before it slept."""

from __future__ import annotations

import pytest
import torch

from actors.rollout import RolloutWorker
from parallax.contract.batch import Prompt
from parallax.contract.config import ExecutorConfig, RolloutConfig


def _prompts(tok) -> list[Prompt]:
    return [Prompt(uid=f"p{i}", text=t, token_ids=tok.encode(t), ground_truth="7")
            for i, t in enumerate(["Q: 3+4\nA:", "Q: 10-3\nA:"])]


def _sampled(worker) -> list[tuple[list[int], list[float]]]:
    return [(t.response_ids, t.logprobs) for t in worker.generate(_prompts(worker.tokenizer), n=2, seed=5)]


@pytest.fixture(scope="module")
def worker(tiny_model_path):
    return RolloutWorker(RolloutConfig(colocate=True, max_new_tokens=8, torch_threads=1,
                                       executor=ExecutorConfig(mode="off")), tiny_model_path)


def test_level_2_drops_the_weights_and_the_sync_brings_them_back(worker):
    before, weights = _sampled(worker), worker.get_weights()
    held = sum(p.numel() for p in worker.engine.model.parameters())
    worker.sleep(2)
    assert sum(p.numel() for p in worker.engine.model.parameters()) == 0 < held  # the storage is given back
    with pytest.raises(RuntimeError, match="asked to generate while asleep"):
        worker.generate(_prompts(worker.tokenizer), n=1, seed=0)
    worker.wake_up(["weights"])  # memory of the right shapes, but not the policy's values yet
    assert sum(p.numel() for p in worker.engine.model.parameters()) == held
    with pytest.raises(RuntimeError, match="woken without weights"):
        worker.generate(_prompts(worker.tokenizer), n=1, seed=0)
    worker.load_weights(weights, version=1)  # the object-store path; the collective one clears it alike
    with pytest.raises(RuntimeError, match="asleep"):  # the KV cache is still asleep
        worker.generate(_prompts(worker.tokenizer), n=1, seed=0)
    worker.wake_up(["kv_cache"])
    assert _sampled(worker) == before and worker.version == 1


def test_level_1_keeps_the_weights_in_host_memory(worker):
    before, weights = _sampled(worker), worker.get_weights()
    worker.sleep(1)
    worker.sleep(1)  # asleep already: nothing more to free
    worker.wake_up(["weights"])
    assert all(torch.equal(worker.get_weights()[k], v) for k, v in weights.items())  # restored, no sync needed
    worker.wake_up(["kv_cache"])
    assert _sampled(worker) == before


def test_an_awake_actor_has_nothing_to_wake(worker):
    """A rollout actor restarted while the others slept comes back awake: the driver's wake is a no-op."""
    before = _sampled(worker)
    worker.wake_up(["weights"])
    worker.wake_up(["kv_cache"])
    assert _sampled(worker) == before


def test_vllms_cpu_build_has_no_sleep_mode(tiny_model_path):
    if torch.cuda.is_available():
        pytest.skip("CPU only: on CUDA vLLM sleeps")
    with pytest.raises(ValueError, match="rollout.colocate with rollout.engine=vllm needs CUDA"):
        RolloutWorker(RolloutConfig(engine="vllm", colocate=True, torch_threads=1), tiny_model_path)
