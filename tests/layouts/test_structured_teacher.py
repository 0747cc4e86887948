"""Teacher records equal what the real executor records, and the learner scores executed rows exactly.

The executor (parallax/executors/kv.py) runs a random tiny model whose logits a processor pins to the
teacher's tokens, so each request really samples the teacher text through the real KV cache,
forks, joins and positions. Then:
* `teacher_record` (built from the parsed trace alone) must equal the executor's record;
* the learner's structured logprobs of the row must equal the executor's sampling logprobs
  (executed mode) and the causal ones the sequential mode's, within 1e-4 in fp32.
"""

from __future__ import annotations

import pytest
import torch
from doubles.replay import Replay  # tests/ is on sys.path

from parallax import toyworld
from parallax.contract.batch import SamplingParams, Trajectory, with_advantages
from parallax.layouts import build_train_batch, masks
from parallax.layouts.sft_records import teacher_record, teacher_role_scripts
from parallax.layouts.structured import structured_sft_batch
from parallax.layouts.threadweaver import threadweaver_train_batch


@pytest.fixture(scope="module")
def lm(tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: one thread is fastest and kind to a shared 2-core machine
    yield (
        AutoModelForCausalLM.from_pretrained(tiny_model_path).eval(),
        AutoTokenizer.from_pretrained(tiny_model_path),
    )
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def problems():
    train, _ = toyworld.make_splits(4, 1, seed=3, difficulty=1, family="mixed")
    return train[:2]  # one subtask, one trial problem


_RUNS: dict = {}


def execute(lm, problems, fmt: str, mode: str):
    """(prompts, teacher (ids, record) per problem, executor runs); cached: the executor is the slow part."""
    if (fmt, mode) not in _RUNS:
        _RUNS[fmt, mode] = _execute(lm, problems, fmt, mode)
    return _RUNS[fmt, mode]


def _execute(lm, problems, fmt: str, mode: str):
    from parallax.contract.config import ExecutorConfig
    from parallax.executors.kv import KVExecutor

    model, tok = lm
    prompts = [tok(p.prompt, add_special_tokens=False)["input_ids"] for p in problems]
    teacher = [teacher_record(pr, p.traces[fmt], fmt, tok, mode=mode) for pr, p in zip(prompts, problems)]
    scripts = [
        teacher_role_scripts(pr, p.traces[fmt], fmt, tok, mode=mode) for pr, p in zip(prompts, problems)
    ]
    ex = KVExecutor(
        model, tok, ExecutorConfig(mode=mode), fmt, Replay(scripts, tok.eos_token_id)
    )
    return prompts, teacher, ex.run(prompts, SamplingParams(max_new_tokens=200, temperature=0.9, seed=0))


@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
@pytest.mark.parametrize("mode", ["executed", "sequential"])
def test_teacher_record_equals_executor_record_and_learner_matches_engine(lm, problems, fmt, mode) -> None:
    prompts, teacher, runs = execute(lm, problems, fmt, mode)
    for (ids, rec), run in zip(teacher, runs):
        assert run.token_ids == ids
        got = run.record
        assert (got.position_ids, got.segment_ids, got.segment_visible, got.sampled) == (
            rec.position_ids,
            rec.segment_ids,
            rec.segment_visible,
            rec.sampled,
        )
        assert [r >= 0 for r in got.segment_request] == [r >= 0 for r in rec.segment_request]
    trajs = [
        Trajectory(p.uid, pr, run.token_ids, run.logprobs, run.finish_reason, "", run.record)
        for p, pr, run in zip(problems, prompts, runs)
    ]
    batch = build_train_batch("structured", with_advantages(trajs, [1.0] * len(trajs)), lm[1].pad_token_id)
    with torch.no_grad():
        logp = masks.structured_logprobs(lm[0], batch.input_ids, *batch.structure(), temperature=0.9)
    diff = ((logp - batch.old_logprobs) * batch.response_mask).abs().max()
    assert batch.response_mask.sum() > 0 and diff < 1e-4


def test_threadweaver_rows_cover_every_sampled_token_once(lm, problems) -> None:
    prompts, _, runs = execute(lm, problems, "parason", "executed")
    trajs = [
        Trajectory(p.uid, pr, r.token_ids, r.logprobs, r.finish_reason, "", r.record)
        for p, pr, r in zip(problems, prompts, runs)
    ]
    tw = threadweaver_train_batch(with_advantages(trajs, [0.5, -1.0]), lm[1].pad_token_id)
    st = build_train_batch("structured", with_advantages(trajs, [0.5, -1.0]), lm[1].pad_token_id)
    assert len(tw) == sum(r.requests for r in runs)  # one row per engine request
    assert tw.response_mask.sum() == st.response_mask.sum()
    assert torch.isclose((tw.advantages * tw.response_mask).sum(), (st.advantages * st.response_mask).sum())
    # Branch and main rows are exact under plain causal scoring (join rows are the documented approximation).
    from parallax.layouts.logprobs import token_logprobs

    with torch.no_grad():
        logp = token_logprobs(
            lm[0](input_ids=tw.input_ids, attention_mask=tw.attention_mask).logits, tw.input_ids, 0.9
        )
    # Rows come per trajectory in request order: main, branches..., continuation (the join) last.
    exact = torch.tensor([k < r.requests - 1 for r in runs for k in range(r.requests)])
    err = ((logp - tw.old_logprobs) * tw.response_mask).abs().amax(-1)  # [rows]
    assert err[exact].max() < 1e-4
    assert err[~exact].min() > 1e-4  # a join row read causally is not what the KV-merging engine computed


def test_structured_sft_batch_trains_sampled_tokens_with_the_executed_layout(lm, problems) -> None:
    from parallax.layouts.causal import sft_batch

    tok = lm[1]
    plain = sft_batch(problems, "parason", tok)
    sb = structured_sft_batch(problems, "parason", tok)
    assert torch.equal(sb.input_ids, plain.input_ids) and torch.equal(sb.attention_mask, plain.attention_mask)
    assert (
        sb.loss_mask <= plain.loss_mask
    ).all() and sb.loss_mask.sum() < plain.loss_mask.sum()  # forced tags out
    # Both branches of a block start at the same position (multiverse positions).
    row = sb.input_ids[0].tolist()
    opener = tok.convert_tokens_to_ids("<Thread>")
    starts = [int(sb.position_ids[0, c]) for c, t in enumerate(row) if t == opener]
    assert len(starts) == 2 and starts[0] == starts[1]
    for sp in sb.split(2):
        assert sp.segment_visible is not None and sp.position_ids.shape == sp.input_ids.shape


def test_teacher_trace_with_gaps_between_threads_is_refused(lm) -> None:
    tok = lm[1]
    trace = (
        "<Parallel><Outlines><Subtask>a</Subtask><Subtask>b</Subtask></Outlines> <Thread>1</Thread>"
        "<Thread>2</Thread></Parallel> #### 3"
    )
    with pytest.raises(ValueError, match="strip the block's gaps"):
        teacher_record([5], trace, "parason", tok)
    with pytest.raises(ValueError, match="does not parse"):
        teacher_record([5], "<Parallel><Thread>", "parason", tok)


def test_nested_parason_block_record_equals_executor_record(lm) -> None:
    from parallax.contract.config import ExecutorConfig
    from parallax.executors.kv import KVExecutor
    from parallax.formats import SUBTASK, Block, Branch, Tree, render, with_thread_headers

    model, tok = lm
    inner = Block((Branch(SUBTASK, ("1+1=2",), "a"), Branch(SUBTASK, ("2+2=4",), "b")))
    outer = Block((Branch(SUBTASK, ("go ", inner, " so 6"), "x"), Branch(SUBTASK, ("3*3=9",), "y")))
    trace = render(with_thread_headers(Tree(("Plan. ", outer, "6+9=15 #### 15"))), "parason")
    prompt = tok("Q: nested\nA:", add_special_tokens=False)["input_ids"]
    ids, rec = teacher_record(prompt, trace, "parason", tok)
    scripts = [teacher_role_scripts(prompt, trace, "parason", tok)]
    ex = KVExecutor(
        model,
        tok,
        ExecutorConfig(mode="executed"), "parason",
        Replay(scripts, tok.eos_token_id),
    )
    run = ex.run([prompt], SamplingParams(max_new_tokens=200, seed=0))[0]
    assert run.token_ids == ids and run.requests == 7  # main, 2 branches, 2 nested, 2 continuations
    got = run.record
    assert (got.position_ids, got.segment_ids, got.segment_visible, got.sampled) == (
        rec.position_ids,
        rec.segment_ids,
        rec.segment_visible,
        rec.sampled,
    )
