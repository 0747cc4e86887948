"""The token draw (`parallax.engines.sampling.draw`): both samplers draw each token with its probability,
never one of probability 0, and the same tokens again from the same seed; the hf engine takes the one its
request names."""

from __future__ import annotations

import pytest
import torch

from parallax.engines.sampling import draw


@pytest.mark.parametrize("sampler", ["multinomial", "inverse_cdf"])
def test_each_sampler_draws_each_token_with_its_probability(sampler):
    # 2 rows x 5,000 draws; unnormalised rows, zeros inside and at both ends
    p = torch.tensor([[0.0, 0.5, 0.0, 0.2, 0.3, 0.0], [0.0, 0.0, 3.0, 0.0, 1.0, 0.0]])
    g = torch.Generator().manual_seed(0)
    n = 5000
    tokens = torch.stack([draw(p, g, sampler) for _ in range(n)])  # [n, 2]
    for row in range(2):
        want = p[row] / p[row].sum()
        got = torch.bincount(tokens[:, row], minlength=6).double() / n
        assert got[want == 0].sum() == 0  # never a token of probability 0
        sd = (want * (1 - want) / n).sqrt()
        assert ((got - want).abs() <= 4 * sd + 1e-12).all(), (row, got, want)


def test_a_seed_draws_the_same_tokens_again_and_the_two_samplers_draw_others():
    p = torch.rand(16, 1000, generator=torch.Generator().manual_seed(1))

    def tokens(sampler):
        g = torch.Generator().manual_seed(7)
        return torch.stack([draw(p, g, sampler) for _ in range(4)])

    assert torch.equal(tokens("inverse_cdf"), tokens("inverse_cdf"))
    assert not torch.equal(tokens("inverse_cdf"), tokens("multinomial"))
    with pytest.raises(ValueError, match="unknown sampler"):
        draw(p, torch.Generator(), "top_k")


def test_the_hf_engine_samples_with_the_requests_sampler(tiny_model_path):
    from parallax.contract.batch import SamplingParams
    from parallax.engines.hf import HFEngine

    engine = HFEngine(tiny_model_path)
    prompts = [engine.tokenizer("Q: 1+2\nA:")["input_ids"]] * 8

    def run(sampler):
        out = engine.generate(prompts, SamplingParams(max_new_tokens=12, seed=3, sampler=sampler))
        return [c.token_ids for c in out], [c.logprobs for c in out]

    (a, lp_a), (b, _), (c, lp_c) = run("inverse_cdf"), run("inverse_cdf"), run("multinomial")
    assert a == b and a != c
    # the reported logprobs are the model's at the drawn tokens, whichever drew them
    assert all(x <= 0 for row in lp_a + lp_c for x in row)
