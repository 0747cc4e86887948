"""vLLM on a CUDA GPU: the NCCL weight-sync path and sleep / wake for a colocated engine.

The CPU tier (test_engine_vllm.py) runs the same sync code over gloo; here the group is NCCL and the
buffers live on the GPU. Run on the device machine (bench/gpu_check.sh)."""

from __future__ import annotations

import socket
import threading

import pytest
import torch

# marks, not a module-level skip: `-m "vllm and not gpu"` (the CPU tier) then deselects these
pytestmark = [pytest.mark.gpu, pytest.mark.vllm,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    pytest.importorskip("vllm")
    from parallax.engines.base import make_engine

    eng = make_engine("vllm", model_path=tiny_model_path, dtype="float32", max_batch_size=8,
                      gpu_memory_utilization=0.2, enforce_eager=True, enable_sleep_mode=True)
    yield eng
    eng.close()


def test_nccl_sync_equals_a_transformers_forward(engine, tiny_model_path):
    from doubles.plans import plan_for  # tests/ is on sys.path
    from transformers import AutoModelForCausalLM

    from parallax.contract.batch import SamplingParams
    from parallax.weightsync.plan import plan_to_wire
    from parallax.weightsync.sync_group import SyncGroup

    tok = engine.tokenizer
    prompt, params = tok.encode("Q: 1\nA:"), SamplingParams(max_new_tokens=8, greedy=True)
    hf = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).cuda().eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.add_(0.05 * torch.randn_like(p))
    state = hf.state_dict()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    plan, box = plan_for(state, 1 << 18), {}
    opener = threading.Thread(target=lambda: box.update(g=SyncGroup(f"tcp://127.0.0.1:{port}", 0, 2, "nccl", 120)))
    opener.start()
    engine.open_sync(f"tcp://127.0.0.1:{port}", 1, 2, "nccl", 120)
    opener.join()
    sender = threading.Thread(target=lambda: box.update(sent=box["g"].send(plan, state)))
    sender.start()
    assert engine.receive_weights(plan_to_wire(plan)) == plan.nbytes
    sender.join()
    out = engine.generate([prompt], params)[0]
    ids = torch.tensor([prompt + out.token_ids]).cuda()
    with torch.no_grad():
        logp = hf(ids).logits[0, len(prompt) - 1:-1].float().log_softmax(-1)
    ref = logp.gather(-1, torch.tensor(out.token_ids).cuda()[:, None]).squeeze(-1).cpu()
    assert torch.allclose(torch.tensor(out.logprobs), ref, atol=2e-3)


def test_sleep_frees_gpu_memory_and_wake_restores_generation(engine):
    from parallax.contract.batch import SamplingParams

    tok = engine.tokenizer
    params = SamplingParams(max_new_tokens=8, greedy=True)
    before = engine.generate([tok.encode("Q: 3\nA:")], params)[0]
    free0, _ = torch.cuda.mem_get_info()
    engine.sleep(level=1)
    free1, _ = torch.cuda.mem_get_info()
    engine.wake_up()
    after = engine.generate([tok.encode("Q: 3\nA:")], params)[0]
    assert free1 > free0  # the KV cache (and offloaded weights) left the GPU
    assert after.token_ids == before.token_ids
