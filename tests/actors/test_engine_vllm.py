"""vLLM engine on a GPU: logprobs agree with transformers, grammar holds, weight sync applies."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

vllm = pytest.importorskip("vllm")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    from actors.engine import make_engine

    return make_engine("vllm", model_path=tiny_model_path, dtype="float32", max_batch_size=8,
                       gpu_memory_utilization=0.2)


def test_vllm_logprobs_match_hf_forward(engine, tiny_model_path):
    from transformers import AutoModelForCausalLM

    from orchestrator.batch import SamplingParams

    tok = engine.tokenizer
    prompts = [tok.encode("Q: 3*4+5*6\nA:"), tok.encode("Q: 1+2\nA:")]
    out = engine.generate(prompts, SamplingParams(max_new_tokens=16, temperature=0.7, seed=1))
    hf = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    for p, c in zip(prompts, out):
        ids = torch.tensor([p + c.token_ids])
        with torch.no_grad():
            logp = (hf(ids).logits[0, len(p) - 1:-1].float() / 0.7).log_softmax(-1)
        ref = logp.gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=2e-3)


def test_vllm_structured_outputs_follow_the_format(engine):
    from formats import ebnf, parse
    from orchestrator.batch import SamplingParams

    tok = engine.tokenizer
    out = engine.generate([tok.encode("Q: 1\nA:")] * 4, SamplingParams(max_new_tokens=200, seed=0),
                          grammar=ebnf("parason"))
    for c in out:
        text = tok.decode(c.token_ids, skip_special_tokens=False).removesuffix(tok.eos_token)
        if c.finish_reason == "stop":
            assert parse(text, "parason").ok


def test_vllm_weight_sync_changes_outputs(engine, tiny_model_path):
    from transformers import AutoModelForCausalLM

    from orchestrator.batch import SamplingParams

    tok = engine.tokenizer
    params = SamplingParams(max_new_tokens=8, greedy=True)
    before = engine.generate([tok.encode("Q: 1\nA:")], params)[0].logprobs
    sd = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).state_dict()
    engine.load_weights({k: v * 2.0 if k.endswith("norm.weight") else v for k, v in sd.items()})
    after = engine.generate([tok.encode("Q: 1\nA:")], params)[0].logprobs
    engine.load_weights(sd)
    assert before != after
