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
    from engines.base import make_engine

    return make_engine("vllm", model_path=tiny_model_path, dtype="float32", max_batch_size=8,
                       gpu_memory_utilization=0.2)


def test_vllm_logprobs_match_hf_forward(engine, tiny_model_path):
    from transformers import AutoModelForCausalLM

    from contract.batch import SamplingParams

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
    from contract.batch import SamplingParams
    from formats import ebnf, parse

    tok = engine.tokenizer
    out = engine.generate([tok.encode("Q: 1\nA:")] * 4, SamplingParams(max_new_tokens=200, seed=0),
                          grammar=ebnf("parason"))
    for c in out:
        text = tok.decode(c.token_ids, skip_special_tokens=False).removesuffix(tok.eos_token)
        if c.finish_reason == "stop":
            assert parse(text, "parason").ok


def test_vllm_weight_sync_changes_outputs(engine, tiny_model_path):
    from transformers import AutoModelForCausalLM

    from contract.batch import SamplingParams

    tok = engine.tokenizer
    params = SamplingParams(max_new_tokens=8, greedy=True)
    before = engine.generate([tok.encode("Q: 1\nA:")], params)[0].logprobs
    sd = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).state_dict()
    engine.load_weights({k: v * 2.0 if k.endswith("norm.weight") else v for k, v in sd.items()})
    after = engine.generate([tok.encode("Q: 1\nA:")], params)[0].logprobs
    engine.load_weights(sd)
    assert before != after


@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
def test_vllm_executed_mode_rows_reproduce_its_logprobs(engine, tiny_model_path, fmt):
    """Executed mode on vLLM (the request executor): the threadweaver rows of its records, scored by a
    transformers forward, give every sampled token the logprob vLLM reported."""
    from transformers import AutoModelForCausalLM

    from contract import algo
    from contract.batch import SamplingParams, Trajectory
    from contract.config import ExecutorConfig
    from layouts import build_train_batch
    from parallel.requests import RequestExecutor

    tok = engine.tokenizer
    rx = RequestExecutor(engine, tok, ExecutorConfig(mode="executed", max_branch_tokens=32), fmt)
    prompts = [tok.encode("Q: 3*4+5*6\nA:")] * 8
    res = rx.run(prompts, SamplingParams(max_new_tokens=96, temperature=1.0, seed=3))
    trajs = [Trajectory(str(i), p, r.token_ids, r.logprobs, r.finish_reason, "", r.record)
             for i, (p, r) in enumerate(zip(prompts, res))]
    batch = build_train_batch("threadweaver", trajs, [1.0] * len(trajs), tok.pad_token_id)
    hf = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        got = algo.token_logprobs(hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits,
                                  batch.input_ids, 1.0)
    mask = batch.response_mask.bool()
    assert int(mask.sum()) == sum(sum(t.record.sampled) for t in trajs)
    assert torch.allclose(got[mask], batch.old_logprobs[mask], atol=2e-3)


@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
def test_vllm_executed_mode_under_request_grammars(engine, tiny_model_path, fmt):
    """Executed mode + grammar on vLLM: each request carries the grammar of what it writes (structured
    outputs per request), every trajectory parses, and the learner's structured rows reproduce vLLM's
    logprobs. If vLLM reported logprobs after the grammar mask (renormalised), the last check fails:
    our convention is the model's unmasked log p(t) (engines/grammar.py)."""
    from transformers import AutoModelForCausalLM

    from actors.learner import score_logprobs
    from contract.batch import SamplingParams, Trajectory
    from contract.config import ExecutorConfig
    from formats import parse
    from layouts import build_train_batch
    from parallel.requests import RequestExecutor

    tok = engine.tokenizer
    rx = RequestExecutor(engine, tok, ExecutorConfig(mode="executed", grammar=True, max_branch_tokens=32), fmt)
    prompts = [tok.encode("Q: 3*4+5*6\nA:")] * 8
    res = rx.run(prompts, SamplingParams(max_new_tokens=128, temperature=1.0, seed=4))
    texts = [tok.decode(r.token_ids, skip_special_tokens=False).removesuffix(tok.eos_token) for r in res]
    assert all(parse(t, fmt).ok for t in texts) and rx.free == 0
    trajs = [Trajectory(str(i), p, r.token_ids, r.logprobs, r.finish_reason, t, r.record)
             for i, (p, r, t) in enumerate(zip(prompts, res, texts))]
    batch = build_train_batch("structured", trajs, [1.0] * len(trajs), tok.pad_token_id)
    hf = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        got = score_logprobs(hf, batch.input_ids, batch.attention_mask, 1.0, batch.structure(), "cpu")
    mask = batch.response_mask.bool()
    gap = (got[mask] - batch.old_logprobs[mask]).abs().max()
    assert gap < 2e-3, (f"vLLM's logprobs under structured outputs differ from the model's by {gap}: masked "
                        "(renormalised) ones? learner.recompute_old_logprobs=true (the GPU learner config) covers it")
