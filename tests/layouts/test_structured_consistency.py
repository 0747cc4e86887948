"""The learner's structured scoring equals an engine-style reference that runs every request on its own.

Reference (what a branch-executing engine computes): each segment is a separate forward with
plain causal attention over its own tokens, whose past is the KV cache of exactly the segments it
sees (the shared prefix for a branch; prefix + every branch for the join), at the record's
positions. The learner instead scores the whole row in one forward with the structured 4-D
mask. Both must give the same per-token logprobs within 1e-4 in fp32.
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from parallax.contract.batch import ExecutionRecord
from parallax.layouts import masks

VOCAB = 64


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def model(request):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=1,
        pad_token_id=0,
    )
    cfg._attn_implementation = request.param
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: one thread is fastest and kind to a shared 2-core machine
    yield Qwen3ForCausalLM(cfg).eval()
    torch.set_num_threads(threads)


def engine_reference(model, ids: list[int], rec: ExecutionRecord, temperature: float) -> torch.Tensor:
    """[L] logprobs computed request by request with KV caches (no structured mask anywhere)."""
    from transformers import DynamicCache

    seg = torch.tensor(rec.segment_ids)
    kv: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    logits = torch.zeros(len(ids), VOCAB)
    for s, visible in enumerate(rec.segment_visible):
        cols = (seg == s).nonzero().squeeze(-1)
        cache, ctx = None, sum(int((seg == v).sum()) for v in visible)
        if visible:
            cache = DynamicCache()
            for layer in range(model.config.num_hidden_layers):
                cache.update(
                    torch.cat([kv[v][layer][0] for v in visible], -2),
                    torch.cat([kv[v][layer][1] for v in visible], -2),
                    layer,
                )
        out = model(
            input_ids=torch.tensor(ids)[cols][None],
            position_ids=torch.tensor(rec.position_ids)[cols][None],
            attention_mask=torch.ones(1, ctx + len(cols), dtype=torch.long),  # explicit: no packing guess
            past_key_values=cache,
            use_cache=True,
        )
        kv[s] = [(lay.keys[..., ctx:, :], lay.values[..., ctx:, :]) for lay in out.past_key_values.layers]
        logits[cols] = out.logits[0]
    _, seg_t, vis_t = masks.pack_records([rec])
    pred = masks.predictor_index(seg_t, vis_t)
    return masks.structured_token_logprobs(logits[None], torch.tensor(ids)[None], pred, temperature)[0]


def parallel_record(prefix: int, branches: list[int], join: int) -> ExecutionRecord:
    """prompt | (forced open tag + branch) x n | join seeing all: the executor's block layout."""
    seg, pos, vis, sampled = [0] * prefix, list(range(prefix)), [[]], [False] * prefix
    for n in branches:
        tag, body = len(vis), len(vis) + 1
        seg += [tag] + [body] * n
        pos += list(range(prefix, prefix + n + 1))
        vis += [[0], [0, tag]]
        sampled += [False] + [True] * n
    end = prefix + 1 + max(branches)
    seg += [len(vis)] * join
    pos += list(range(end, end + join))
    vis.append(list(range(len(vis))))
    sampled += [True] * join
    return ExecutionRecord(pos, seg, vis, list(range(-1, len(vis) - 1)), sampled)


def learner_logprobs(
    model, rows: list[list[int]], recs: list[ExecutionRecord], temperature: float
) -> torch.Tensor:
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, : len(r)] = torch.tensor(r)
    pos, seg, vis = masks.pack_records(recs, width=width)
    with torch.no_grad():
        return masks.structured_logprobs(model, ids, pos, seg, vis, temperature)


def random_ids(n: int, seed: int) -> list[int]:
    return torch.randint(2, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_padded_batch_of_executed_and_sequential_rows_matches_engine(model) -> None:
    recs = [
        parallel_record(5, [4, 7, 2], 6),
        parallel_record(3, [6, 6], 3),
        ExecutionRecord(list(range(9)), [0] * 4 + [1] * 5, [[], [0]], [-1, 0], [False] * 4 + [True] * 5),
    ]
    rows = [random_ids(len(r.segment_ids), i) for i, r in enumerate(recs)]
    got = learner_logprobs(model, rows, recs, temperature=0.8)
    with torch.no_grad():
        for b, (row, rec) in enumerate(zip(rows, recs)):
            want = engine_reference(model, row, rec, 0.8)
            assert (got[b, : len(row)] - want).abs().max() < 1e-4


def _padded_batch(recs: list[ExecutionRecord], device: str) -> list[torch.Tensor]:
    """(input_ids, position_ids, segment_ids, segment_visible) of random rows laid out as `recs`, right-padded."""
    rows = [random_ids(len(r.segment_ids), i) for i, r in enumerate(recs)]
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, : len(r)] = torch.tensor(r)
    return [t.to(device) for t in (ids, *masks.pack_records(recs, width=width))]


def _flex_against_block_sdpa(model, device: str, grad: bool) -> tuple[float, float]:
    """(max |logprob gap|, max |gradient gap|) between learner.attn_implementation=flex_attention and the
    block-sparse SDPA on the same padded batch of executed and sequential rows (3 records, GQA heads)."""
    recs = [
        parallel_record(5, [4, 7, 2], 6),
        parallel_record(3, [6, 6], 3),
        ExecutionRecord(list(range(9)), [0] * 4 + [1] * 5, [[], [0]], [-1, 0], [False] * 4 + [True] * 5),
    ]
    tensors = _padded_batch(recs, device)
    model = copy.deepcopy(model).to(device)  # the module's fixture stays as it was (on CPU, sdpa, no grads)
    out = {}
    for impl in ("sdpa", "flex_attention"):  # sdpa: structured_logprobs swaps in the block-sparse SDPA
        model.config._attn_implementation = impl
        model.zero_grad()
        with torch.set_grad_enabled(grad):
            logp = masks.structured_logprobs(model, *tensors, temperature=0.8)
        if grad:
            logp.sum().backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()]) if grad else torch.zeros(1)
        out[impl] = (logp.detach(), grads)
    (lp_s, g_s), (lp_f, g_f) = out["sdpa"], out["flex_attention"]
    assert lp_s.abs().max() > 0.1  # real logprobs, not zeros compared with zeros
    return float((lp_s - lp_f).abs().max()), float((g_s - g_f).abs().max())


def test_flex_attention_scores_like_the_block_sparse_sdpa_on_cpu(model) -> None:
    """learner.attn_implementation=flex_attention (the GPU kernel, built from the same block structure)
    gives the block-sparse SDPA's logprobs within 1e-5. CPU runs FlexAttention's forward only (no
    backward there, so a CPU learner refuses it: tests/actors/test_learner_direction.py)."""
    if model.config._attn_implementation != "sdpa":
        pytest.skip("one comparison: the sdpa-built model")
    assert _flex_against_block_sdpa(model, "cpu", grad=False)[0] < 1e-5


@pytest.mark.gpu
def test_flex_attention_trains_like_the_block_sparse_sdpa_on_gpu(model) -> None:
    if not torch.cuda.is_available() or model.config._attn_implementation != "sdpa":
        pytest.skip("needs a CUDA GPU; one comparison")
    gap, grad_gap = _flex_against_block_sdpa(model, "cuda", grad=True)
    assert gap < 1e-4 and grad_gap < 1e-3, (gap, grad_gap)


def _grads_with_and_without_checkpointing(model, device: str, impl: str) -> tuple[float, float]:
    """(max |logprob gap|, max |gradient gap|) of structured scoring with gradient checkpointing on against
    off (learner.gradient_checkpointing: each layer runs again in backward, after the forward returned)."""
    recs = [parallel_record(5, [4, 7, 2], 6), parallel_record(3, [6, 6], 3)]
    tensors = _padded_batch(recs, device)
    out = []
    for checkpointing in (False, True):
        m = copy.deepcopy(model).to(device).train()  # checkpointing applies in training mode only
        m.config._attn_implementation = impl
        if checkpointing:
            m.gradient_checkpointing_enable()
        logp = masks.structured_logprobs(m, *tensors, temperature=0.8)
        logp.sum().backward()
        out.append((logp.detach(), torch.cat([p.grad.flatten() for p in m.parameters()])))
    (lp, g), (lp_c, g_c) = out
    assert g.abs().max() > 0  # real gradients, not zeros compared with zeros
    return float((lp - lp_c).abs().max()), float((g - g_c).abs().max())


def test_gradient_checkpointing_recomputes_the_structured_forward(model) -> None:
    """The block-sparse SDPA (sdpa) or the dense mask (eager) in backward's recompute as in the forward: a
    kernel chosen by a setting restored when the forward returned sent the recompute through another path
    (repeat_kv's shapes: a CheckpointError)."""
    gap, grad_gap = _grads_with_and_without_checkpointing(model, "cpu", model.config._attn_implementation)
    assert gap == 0 and grad_gap < 1e-6, (gap, grad_gap)


@pytest.mark.gpu
def test_flex_attention_under_gradient_checkpointing_on_gpu(model) -> None:
    if not torch.cuda.is_available() or model.config._attn_implementation != "sdpa":
        pytest.skip("needs a CUDA GPU; one comparison")
    gap, grad_gap = _grads_with_and_without_checkpointing(model, "cuda", "flex_attention")
    assert gap < 1e-6 and grad_gap < 1e-5, (gap, grad_gap)


def test_branch_equals_prefix_plus_branch_run_as_one_causal_sequence(model) -> None:
    rec = parallel_record(6, [5, 8], 4)
    row = random_ids(len(rec.segment_ids), 7)
    got = learner_logprobs(model, [row], [rec], 1.0)[0]
    # Second branch: its forced tag sits at columns 12.., after the first branch's 6 tokens.
    cols = [c for c, s in enumerate(rec.segment_ids) if s in (3, 4)]
    flat = row[:6] + [row[c] for c in cols]
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor([flat]), attention_mask=torch.ones(1, len(flat), dtype=torch.long)
        ).logits
    from parallax.layouts.logprobs import token_logprobs

    want = token_logprobs(logits, torch.tensor([flat]))[0, 6:]
    assert (got[cols] - want).abs().max() < 1e-4
    # And the structure matters: plain causal scoring of the row disagrees on that branch.
    with torch.no_grad():
        causal = token_logprobs(model(input_ids=torch.tensor([row])).logits, torch.tensor([row]))[0]
    assert (causal[cols] - want).abs().max() > 1e-3


@settings(max_examples=8, deadline=None)
@given(
    st.integers(1, 6),
    st.lists(st.integers(1, 6), min_size=2, max_size=4),
    st.integers(1, 5),
    st.integers(0, 99),
)
def test_random_block_layouts_match_engine(prefix: int, branches: list[int], join: int, seed: int) -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(1)
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=1,
        pad_token_id=0,
    )
    net = Qwen3ForCausalLM(cfg).eval()
    rec = parallel_record(prefix, branches, join)
    row = random_ids(len(rec.segment_ids), seed)
    got = learner_logprobs(net, [row], [rec], 1.0)[0]
    with torch.no_grad():
        assert (got - engine_reference(net, row, rec, 1.0)).abs().max() < 1e-4
