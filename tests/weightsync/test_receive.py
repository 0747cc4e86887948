"""The engine side: received weights checked against the model's names and put in place."""

from __future__ import annotations

import pytest
import torch

from parallax.weightsync.plan import plan_named
from parallax.weightsync.receive import copy_into, load_state, load_state_file, state_file


class Tied(torch.nn.Module):
    """embed -> norm -> lm_head, the head tied to the embedding (as the tiny model and SmolLM2 are)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.lm_head = torch.nn.Linear(4, 10, bias=False)
        self.lm_head.weight = self.embed.weight


def _learner_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {k: v + 1.0 for k, v in Tied().state_dict().items()}  # a sent state: every value moved


def test_copy_into_puts_every_tensor_in_place_and_the_tied_head_follows():
    model, sent = Tied(), _learner_state()
    sent["lm_head.weight"] = sent["embed.weight"]  # tied on the learner too: one tensor, two names
    plan = plan_named(sent.items(), 1 << 20)
    with torch.no_grad():
        copy_into(model.state_dict(), iter(sent.items()), plan)
    assert all(torch.equal(v, sent[k]) for k, v in model.state_dict().items())
    assert model.lm_head.weight is model.embed.weight  # copied into place, the tie kept


def test_copy_into_refuses_an_unknown_name_and_a_missing_one():
    model, sent = Tied(), _learner_state()
    plan = plan_named(sent.items(), 1 << 20)
    with pytest.raises(ValueError, match="sent 'extra.weight', which this model does not have"), torch.no_grad():
        copy_into(model.state_dict(), iter([*sent.items(), ("extra.weight", torch.zeros(1))]), plan)
    with pytest.raises(ValueError, match=r"sent no \['norm.bias'\]"), torch.no_grad():
        copy_into(model.state_dict(), iter((k, v) for k, v in sent.items() if k != "norm.bias"), plan)


def test_load_state_takes_a_state_dict_without_the_tied_head_and_refuses_a_missing_name():
    model, sent = Tied(), _learner_state()
    sent.pop("lm_head.weight")
    assert load_state(model, sent) == sum(v.numel() * v.element_size() for v in sent.values())
    assert torch.equal(model.lm_head.weight, sent["embed.weight"])
    with pytest.raises(ValueError, match="missing=\\['norm.bias'\\]"):
        load_state(model, {k: v for k, v in sent.items() if k != "norm.bias"})


def test_a_state_file_carries_every_name_a_tied_one_as_a_copy():
    sent = _learner_state()
    sent["lm_head.weight"] = sent["embed.weight"]  # shared storage: safetensors refuses it unless copied
    got = {}
    with state_file(sent) as path:
        nbytes = load_state_file(path, "cpu", lambda weights: got.update(weights))
    assert set(got) == set(sent) and all(torch.equal(got[k], v) for k, v in sent.items())
    assert nbytes == sum(v.numel() * v.element_size() for v in sent.values())
