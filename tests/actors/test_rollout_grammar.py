"""The rollout worker hands `rollout.executor.grammar` to whichever part of the engine applies it."""

from __future__ import annotations

import pytest

from actors.rollout import RolloutWorker
from parallax.contract.batch import Prompt
from parallax.contract.config import ExecutorConfig, RolloutConfig
from parallax.engines import ENGINES
from parallax.engines.hf import HFEngine
from parallax.formats import ebnf

PROBE = "structured_outputs_probe"


class _StructuredProbe(HFEngine):
    """vLLM's boundary (it cannot run here): `generate(..., grammar=EBNF)` for structured outputs.

    Decodes with the real HF engine and records the grammar each call was given; the real vLLM
    path is `tests/engines/test_engine_vllm.py::test_vllm_structured_outputs_follow_the_format` (gpu).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.grammars: list[str | None] = []

    def generate(self, prompts, params, grammar=None):
        self.grammars.append(grammar)
        return super().generate(prompts, params)


ENGINES.setdefault(PROBE, f"{__name__}:_StructuredProbe")  # a test engine, by name like the real ones


def _prompt(tok) -> Prompt:
    text = "Q: 3+4\nA:"
    return Prompt(uid="p0", text=text, token_ids=tok.encode(text), ground_truth="7")


@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
def test_mode_off_sends_the_formats_grammar_to_structured_outputs(tiny_model_path, fmt):
    import xgrammar as xgr

    cfg = RolloutConfig(engine=PROBE, max_new_tokens=6, torch_threads=1, executor=ExecutorConfig(grammar=True))
    worker = RolloutWorker(cfg, tiny_model_path, fmt=fmt)
    out = worker.generate([_prompt(worker.tokenizer)], n=2, seed=0)
    assert len(out) == 2 and worker.engine.grammars == [ebnf(fmt)]
    # the text xgrammar (vLLM's structured-output backend) compiles for this tokenizer
    xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(worker.tokenizer)).compile_grammar(worker.engine.grammars[0])


def test_without_the_option_no_grammar_is_sent(tiny_model_path):
    cfg = RolloutConfig(engine=PROBE, max_new_tokens=6, torch_threads=1)
    worker = RolloutWorker(cfg, tiny_model_path, fmt="parason")
    worker.generate([_prompt(worker.tokenizer)], n=1, seed=0)
    assert worker.engine.grammars == [None]


@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
def test_hf_generate_applies_the_grammar_and_reports_unmasked_logprobs(tiny_model_path, fmt):
    """Mode off on hf: `engine.generate(..., grammar=EBNF)` masks with xgrammar as vLLM's structured
    outputs would; a random model then writes only texts that parse, and every logprob is the model's
    own (unmasked) log p(t) at temperature T, which is what the learner recomputes."""
    import torch

    from parallax.formats import parse
    from parallax.layouts import logprobs as chunked

    torch.set_num_threads(1)
    cfg = RolloutConfig(max_new_tokens=120, torch_threads=1, temperature=0.8, executor=ExecutorConfig(grammar=True))
    worker = RolloutWorker(cfg, tiny_model_path, fmt=fmt)
    tok = worker.tokenizer
    trajs = worker.generate([_prompt(tok)], n=8, seed=0)
    finished = [t for t in trajs if t.finish_reason == "stop"]
    assert finished and all(parse(t.text, fmt).ok for t in finished)
    free = worker.engine.generate([_prompt(tok).token_ids] * 8, worker_params(cfg))
    assert not all(parse(tok.decode(c.token_ids, skip_special_tokens=False).removesuffix(tok.eos_token), fmt).ok
                   for c in free if c.finish_reason == "stop")  # without it the random model breaks the format
    t = trajs[0]
    ids = torch.tensor([t.prompt_ids + t.response_ids])
    with torch.no_grad():
        ref = chunked.token_logprobs(worker.engine.model(input_ids=ids).logits, ids, 0.8)[0, len(t.prompt_ids):]
    assert torch.allclose(torch.tensor(t.logprobs), ref, atol=1e-4)
    with pytest.raises(ValueError, match="one entry per prompt"):
        worker.engine.generate([_prompt(tok).token_ids] * 2, worker_params(cfg), grammar=[ebnf(fmt)])


def worker_params(cfg):
    from parallax.contract.batch import SamplingParams

    return SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=0)
