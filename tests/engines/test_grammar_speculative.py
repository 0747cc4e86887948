"""Speculative grammar masking is exact: draw unmasked, check, mask and redraw only when refused.

* `GrammarMasker.check` is sound against the full mask (never keeps a token the mask forbids),
  and `release` puts the matcher back as it found it;
* with fixed logits that put most mass on grammar-invalid tokens, the executor's draws follow the
  masked distribution p(t) / Z exactly — speculative and full-mask alike (a seeded chi-square
  test), and never an invalid token; greedy picks the best valid token;
* a random model sampling freely under the grammar only ever emits tokens the mask allows.
"""

from __future__ import annotations

import math

import pytest
import torch

from parallax.contract.batch import SamplingParams
from parallax.contract.config import ExecutorConfig
from parallax.engines.constrained import GrammarMasker
from parallax.executors.kv import KVExecutor


@pytest.fixture(scope="module")
def masker(lm):
    model, tok = lm
    return GrammarMasker("parason", tok, model.config.vocab_size)


def test_check_is_sound_and_release_undoes_it(lm, masker):
    _, tok = lm
    text = ("ok x<3 <Parallel><Outlines><Subtask>4*8</Subtask><Trial>x=2</Trial></Outlines>"
            "<Thread>4*8\n<Parallel><Outlines><Trial>a</Trial><Trial>b</Trial></Outlines><Thread>a\n1"
            "</Thread><Thread>b\n2</Thread></Parallel> 32</Thread><Thread>x=2\nno</Thread></Parallel> #### 32")
    st = masker.new_state()
    ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    unsure = 0
    for t in ids:
        before = masker.allowed([st])[0]  # [V] bool
        said = []
        for c in range(masker.vocab_size):
            said.append(masker.check(st, c))
            masker.release(st)
        said = torch.tensor(said)
        assert torch.equal(masker.allowed([st])[0], before)  # nothing was advanced
        assert not (said & ~before).any()  # sound: never keeps a forbidden token
        unsure += int((before & ~said).sum())
        assert before[t]
        if masker.check(st, t):  # provisionally accepted: `accept` commits it
            assert st.ahead == t
        assert masker.accept(st, t) and st.ahead is None
    assert unsure < len(ids) * 8  # incomplete only on the few tokens that start spelling a tag


class FixedLogits:
    """Processor: replace the model's logits by `logits` where the row is not already -inf
    (so it commutes with the grammar mask, as the executor's speculative path requires)."""

    commutes_with_mask = True

    def __init__(self, logits: torch.Tensor):
        self.logits = logits  # [V]

    def __call__(self, rows, x: torch.Tensor) -> torch.Tensor:
        return torch.where(torch.isfinite(x), self.logits.expand_as(x), x)


def first_tokens(lm, logits: torch.Tensor, n: int, speculative: bool, greedy: bool = False):
    """The first response token of `n` trajectories drawn under the grammar, and the executor."""
    model, tok = lm
    ex = KVExecutor(model, tok, ExecutorConfig(mode="sequential", grammar=True), "parason",
                          FixedLogits(logits))
    ex.speculative_grammar = speculative
    res = ex.run([tok.encode("A:")] * n, SamplingParams(max_new_tokens=1, seed=7, greedy=greedy))
    return torch.tensor([r.token_ids[0] for r in res]), ex


@pytest.mark.parametrize("speculative", [True, False])
def test_draws_follow_the_masked_distribution_exactly(lm, speculative):
    model, tok = lm
    V = model.config.vocab_size
    valid = [tok.convert_tokens_to_ids(t) for t in ("a", "b", "c")]
    invalid = [tok.convert_tokens_to_ids(t) for t in ("</Thread>", "</Parallel>", "<Thread>")]
    logits = torch.full((V,), float("-inf"))
    logits[valid] = torch.tensor([0.0, 1.0, 2.0])
    logits[invalid] = torch.tensor([3.0, 3.0, 2.5])  # ~80% of the unmasked mass is invalid here
    n = 2000
    got, ex = first_tokens(lm, logits, n, speculative)
    assert not torch.isin(got, torch.tensor(invalid)).any()
    counts = torch.tensor([(got == v).sum() for v in valid], dtype=torch.float64)
    assert counts.sum() == n
    want = logits[valid].double().softmax(-1) * n  # p(t) / Z over the valid tokens
    chi2 = float(((counts - want) ** 2 / want).sum())
    assert math.exp(-chi2 / 2) > 1e-4, (counts, want)  # chi-square, 2 dof: p-value = exp(-chi2 / 2)
    if speculative:  # most draws were refused and redrawn masked; only those rows were masked
        assert ex.grammar.checks == n and 0.6 * n < ex.grammar.calls < 0.95 * n
    else:
        assert ex.grammar.checks == 0 and ex.grammar.calls == n


def test_greedy_takes_the_best_valid_token(lm):
    model, tok = lm
    logits = torch.full((model.config.vocab_size,), float("-inf"))
    logits[tok.convert_tokens_to_ids("</Thread>")] = 5.0
    logits[tok.convert_tokens_to_ids("b")] = 1.0
    logits[tok.convert_tokens_to_ids("c")] = 2.0
    got, _ = first_tokens(lm, logits, 4, speculative=True, greedy=True)
    assert (got == tok.convert_tokens_to_ids("c")).all()


def test_sampled_tokens_of_a_random_model_are_all_allowed_by_the_mask(lm, masker):
    model, tok = lm
    ex = KVExecutor(model, tok, ExecutorConfig(mode="sequential", grammar=True, max_branch_tokens=12), "parason")
    res = ex.run([tok.encode(f"Q: {i}+3\nA:") for i in range(8)], SamplingParams(max_new_tokens=60, seed=11))
    assert ex.grammar.checks > 0 and ex.grammar.calls > 0  # both paths ran
    n_sampled = 0
    for r in res:
        st = masker.new_state()
        prompt_len = len(r.record.sampled) - len(r.token_ids)
        for t, sampled in zip(r.token_ids, r.record.sampled[prompt_len:]):
            if sampled:
                assert masker.allowed([st])[0, t], tok.decode(r.token_ids)
                n_sampled += 1
            assert masker.accept(st, t)
    assert n_sampled > 100
