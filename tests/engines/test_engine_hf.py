"""HF engine: plain batched sampling stays the fast default; the KV executor runs over its model."""

from __future__ import annotations

import pytest
import torch

from parallax.contract.batch import SamplingParams
from parallax.contract.config import ExecutorConfig
from parallax.engines import make_engine
from parallax.executors.kv import KVExecutor
from parallax.formats import parse


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    torch.set_num_threads(1)
    return make_engine("hf", model_path=tiny_model_path, dtype="float32", max_batch_size=4)


def test_generate_is_reproducible_and_reports_logprobs(engine):
    prompts = [engine.tokenizer.encode("Q: 1+2\nA:"), engine.tokenizer.encode("Q: 3*4+5*6\nA:")]
    params = SamplingParams(max_new_tokens=12, seed=3)
    a, b = engine.generate(prompts, params), engine.generate(prompts, params)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    for c in a:
        assert len(c.logprobs) == len(c.token_ids) and all(lp <= 0 for lp in c.logprobs)
        assert c.finish_reason in ("stop", "length")


def test_kv_executor_runs_both_modes_with_grammar_and_sees_weight_updates(engine):
    tok = engine.tokenizer
    prompts = [tok.encode(f"Q: {i}+1\nA:") for i in range(3)]
    params = SamplingParams(max_new_tokens=30, seed=0)
    for mode in ("executed", "sequential"):
        cfg = ExecutorConfig(mode=mode, grammar=True, max_branch_tokens=6)
        out = KVExecutor.from_engine(engine, cfg, "parallel_r1").run(prompts, params)
        assert len(out) == 3
        for e in out:
            assert parse(tok.decode(e.token_ids, skip_special_tokens=False).removesuffix(tok.eos_token),
                         "parallel_r1").ok
            assert len(e.record.sampled) == len(e.record.position_ids) == len(e.token_ids) + len(prompts[0])
    cfg = ExecutorConfig(mode="executed")
    ex = KVExecutor.from_engine(engine, cfg, "parason")
    before = [e.logprobs for e in ex.run(prompts, params)]
    sd = engine.parameters_dict()
    engine.load_weights({k: v * 1.5 if k.endswith("norm.weight") else v for k, v in sd.items()})
    after = [e.logprobs for e in ex.run(prompts, params)]
    engine.load_weights(sd)
    assert before != after  # the executor shares the engine's model
