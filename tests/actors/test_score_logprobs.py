"""The learner's scoring with `scored` (logits_to_keep): every scored column equals the full forward's,
on causal rows of different prompt lengths and on structured rows whose branches are predicted by the
prefix; columns before the first scored one are 0, and no logits are built for them."""

from __future__ import annotations

import torch

from actors.scoring import score_logprobs
from parallax.contract.batch import ExecutionRecord
from parallax.layouts import masks


def _rows(lengths: list[int], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    L = max(lengths)
    ids = torch.full((len(lengths), L), pad, dtype=torch.long)
    att = torch.zeros(len(lengths), L, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(5, 300, (n,), generator=g)
        att[b, :n] = 1
    return ids, att


def test_causal_rows_score_the_same_with_logits_kept_from_the_first_response_token(lm):
    model, _ = lm
    ids, att = _rows([30, 41, 25])
    scored = torch.zeros(ids.shape)
    for b, (p, n) in enumerate([(12, 30), (20, 41), (9, 25)]):  # prompt lengths 12, 20, 9
        scored[b, p:n] = 1.0
    calls = []
    hook = model.lm_head.register_forward_hook(lambda m, i, o: calls.append(o.shape[1]))
    try:
        full = score_logprobs(model, ids, att, 0.9, None, "cpu")
        kept = score_logprobs(model, ids, att, 0.9, None, "cpu", scored=scored)
    finally:
        hook.remove()
    assert calls == [41, 41 - 9 + 1]  # from the column that predicts the earliest response token
    on = scored.bool()
    assert torch.allclose(kept[on], full[on], atol=1e-6)
    assert kept[:, :9].eq(0).all()


def test_structured_rows_score_the_same_with_logits_kept(lm):
    model, _ = lm
    # prompt (6), two branches that see it (5 each), a join that sees all
    seg = [0] * 6 + [1] * 5 + [2] * 5 + [3] * 4
    rec = ExecutionRecord([*range(6), *range(6, 11), *range(6, 11), *range(11, 15)], seg,
                          [[], [0], [0], [0, 1, 2]], [-1, 0, 1, 2], [False] * 6 + [True] * 14)
    pos, seg_t, vis = masks.pack_records([rec, rec])
    ids, _ = _rows([20, 20])
    scored = torch.tensor([rec.sampled, rec.sampled], dtype=torch.float32)
    scored[1, 6:11] = 0  # row 1 scores from its second branch on: the prefix still predicts it
    full = masks.structured_logprobs(model, ids, pos, seg_t, vis, 0.7)
    kept = masks.structured_logprobs(model, ids, pos, seg_t, vis, 0.7, scored=scored)
    on = scored.bool()
    assert torch.allclose(kept[on], full[on], atol=1e-6)
    # the second branch's first token is predicted by the prompt's last token (column 5): kept
    assert kept[1, 11] != 0 and torch.isclose(kept[1, 11], full[1, 11], atol=1e-6)


def test_entropy_is_that_of_the_distribution_predicting_each_token(lm):
    model, _ = lm
    ids, att = _rows([12, 12])
    scored = torch.zeros(ids.shape)
    scored[:, 5:] = 1.0
    logp, ent = score_logprobs(model, ids, att, 0.8, None, "cpu", scored=scored, entropy=True)
    assert torch.equal(logp, score_logprobs(model, ids, att, 0.8, None, "cpu", scored=scored))
    with torch.no_grad():
        probs = (model(input_ids=ids).logits / 0.8).softmax(-1)  # [2, 12, V]
    by_hand = -(probs * probs.log()).sum(-1)  # entropy at each position; token t is predicted at t-1
    assert torch.allclose(ent[:, 5:], by_hand[:, 4:-1], atol=1e-5) and ent[:, :5].eq(0).all()
    # structured: a branch's first token is predicted by the prompt's last position
    rec = ExecutionRecord([0, 1, 2, 3, 3, 4], [0, 0, 0, 1, 2, 3], [[], [0], [0], [0, 1, 2]], [-1, 0, 1, 2],
                          [False] * 3 + [True] * 3)
    pos, seg, vis = masks.pack_records([rec])
    one = ids[:1, :6]
    _, s_ent = masks.structured_logprobs(model, one, pos, seg, vis, 0.8, scored=torch.tensor([rec.sampled]),
                                         entropy=True)
    assert torch.isclose(s_ent[0, 4], by_hand[0, 2], atol=1e-5)  # branch 2's token: after the prompt only
    assert torch.isclose(s_ent[0, 3], by_hand[0, 2], atol=1e-5)
