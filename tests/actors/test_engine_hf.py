"""HF engine: plain batched sampling stays the fast default; `execute` runs the parallel executor."""

from __future__ import annotations

import pytest
import torch

from actors.engine import make_engine
from actors.executor import ExecutorConfig
from formats import parse
from orchestrator.batch import SamplingParams


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


def test_execute_runs_both_modes_with_grammar_and_sees_weight_updates(engine):
    tok = engine.tokenizer
    prompts = [tok.encode(f"Q: {i}+1\nA:") for i in range(3)]
    params = SamplingParams(max_new_tokens=30, seed=0)
    for mode in ("executed", "sequential"):
        cfg = ExecutorConfig(format="parallel_r1", mode=mode, grammar=True, max_branch_tokens=6)
        out = engine.execute(prompts, params, cfg)
        assert len(out) == 3
        for e in out:
            assert parse(tok.decode(e.token_ids, skip_special_tokens=False).removesuffix(tok.eos_token),
                         "parallel_r1").ok
            assert len(e.record.sampled) == len(e.record.position_ids) == len(e.token_ids) + len(prompts[0])
    cfg = ExecutorConfig(format="parason", mode="executed")
    before = [e.logprobs for e in engine.execute(prompts, params, cfg)]
    sd = engine.parameters_dict()
    engine.load_weights({k: v * 1.5 if k.endswith("norm.weight") else v for k, v in sd.items()})
    after = [e.logprobs for e in engine.execute(prompts, params, cfg)]
    engine.load_weights(sd)
    assert before != after  # the cached executor shares the engine's model
