"""Grammar-constrained decoding: a random model under the xgrammar mask always writes a valid trace."""

from __future__ import annotations

import pytest
import torch

from parallax.contract.batch import SamplingParams
from parallax.contract.config import ExecutorConfig
from parallax.engines.constrained import GrammarMasker
from parallax.executors.kv import KVExecutor
from parallax.formats import parse


@pytest.fixture(scope="module")
def lm(tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_path)


@pytest.mark.parametrize("fmt,mode", [("parason", "executed"), ("parason", "sequential"),
                                      ("parallel_r1", "executed"), ("parallel_r1", "sequential")])
def test_random_model_under_grammar_writes_valid_traces(lm, fmt, mode):
    model, tok = lm
    ex = KVExecutor(model, tok, ExecutorConfig(mode=mode, grammar=True, max_branch_tokens=10), fmt)
    prompts = [tok.encode(f"Q: {i}*7+2\nA:") for i in range(6)]
    res = ex.run(prompts, SamplingParams(max_new_tokens=48, seed=4, temperature=1.0))
    for r in res:
        text = tok.decode(r.token_ids, skip_special_tokens=False).removesuffix(tok.eos_token)
        got = parse(text, fmt)
        assert got.ok, (got.error, text)
        if r.finish_reason == "stop":
            assert r.token_ids[-1] == tok.eos_token_id
    assert ex.grammar.calls > 0 and ex.grammar.seconds > 0


def test_mask_removes_exactly_the_forbidden_tokens(lm):
    model, tok = lm
    masker = GrammarMasker("parason", tok, model.config.vocab_size)
    m = masker.new_state()
    for t in tok.encode("ok <Parallel><Outlines>", add_special_tokens=False):
        assert masker.accept(m, t)
    logits = torch.zeros(1, model.config.vocab_size)  # [1, V]
    masker.mask(logits, [m])
    allowed = {tok.convert_ids_to_tokens(i) for i in torch.isfinite(logits[0]).nonzero().squeeze(-1).tolist()}
    assert {"<Subtask>", "<Trial>"} <= allowed
    assert not allowed & {"<Thread>", "</Outlines>", "<Parallel>", tok.eos_token, "a"}
    assert not masker.accept(m, tok.convert_tokens_to_ids("<Thread>"))


def test_spelled_tags_are_masked(lm):
    model, tok = lm
    masker = GrammarMasker("parason", tok, model.config.vocab_size)
    st = masker.new_state()
    for t in tok.encode("ok <Parallel>", add_special_tokens=False):
        assert masker.accept(st, t)
    lt = tok.convert_tokens_to_ids("<")
    assert masker.accept(st, lt) is False or st.tail == "<"  # the grammar may refuse '<' here anyway
    st = masker.new_state()
    masker.accept(st, tok.encode("x", add_special_tokens=False)[0])
    masker.accept(st, lt)
    assert st.tail == "<"
    logits = torch.zeros(1, model.config.vocab_size)
    masker.mask(logits, [st])
    finite = torch.isfinite(logits[0])
    for piece in ("Outlines>", "/Thread>"):
        first = tok.encode(piece, add_special_tokens=False)[0]
        assert not finite[first], piece  # '<' + 'Out...' would start spelling a tag
    assert finite[tok.encode(" 3", add_special_tokens=False)[0]]  # 'x < 3' stays writable
