"""Parason thread headers: each executed thread is told which outline entry it serves.

The executor forces, after the k-th `<Thread>` of a block, the tokens of outline entry k and a
newline (`parallax.executors.tracker.thread_header`). Checked here on the real executor and a random
tiny model: the headers are there and distinct, forced (no logprob, out of the loss), identical in
executed and sequential mode, accepted by the grammar, and the learner's structured logprobs still
equal the engine's with them in the context.
"""

from __future__ import annotations

import pytest
import torch
from doubles.replay import Replay, role_scripts, sequential_script  # tests/ is on sys.path

from parallax import toyworld
from parallax.contract.batch import SamplingParams, Trajectory, with_advantages
from parallax.contract.config import ExecutorConfig
from parallax.executors.kv import KVExecutor
from parallax.formats import THREAD_HEADER_SEP, parse, thread_header
from parallax.layouts import masks


@pytest.fixture(scope="module")
def problems():
    return toyworld.generate("mixed", 4, seed=5, difficulty=2)


class MainOnly:
    """Replay the main chain's script; leave every thread to the model (greedy)."""

    commutes_with_mask = True

    def __init__(self, scripts, eos: int):
        self.replay = Replay(scripts, eos)

    def __call__(self, rows, x: torch.Tensor) -> torch.Tensor:
        main = [i for i, r in enumerate(rows) if r.role == ()]
        if main:
            x = x.clone()
            x[main] = self.replay([rows[i] for i in main], x[main])
        return x


def threads_of(tok, ids: list[int]) -> list[list[int]]:
    """Token ids inside each top-level <Thread> .. </Thread> (no nesting: max_depth=1)."""
    open_, close = tok.convert_tokens_to_ids("<Thread>"), tok.convert_tokens_to_ids("</Thread>")
    out, cur = [], None
    for t in ids:
        if t == open_:
            cur = []
        elif t == close:
            out.append(cur)
            cur = None
        elif cur is not None:
            cur.append(t)
    return out


def greedy_threads(lm, prob, headers: bool):
    model, tok = lm
    tree = parse(prob.traces["parason"], "parason").tree
    main = {(): role_scripts(tree, "parason", tok)[()]}
    cfg = ExecutorConfig(mode="executed", max_depth=1, max_branch_tokens=10, thread_headers=headers)
    ex = KVExecutor(model, tok, cfg, "parason", MainOnly([main], tok.eos_token_id))
    [r] = ex.run([tok.encode(prob.prompt)], SamplingParams(max_new_tokens=200, greedy=True))
    return tree.nodes[0].branches, r


def test_executed_threads_start_with_their_own_entry_forced(lm, problems):
    _, tok = lm
    sep = tok.encode(THREAD_HEADER_SEP, add_special_tokens=False)
    for prob in problems:
        branches, r = greedy_threads(lm, prob, headers=True)
        threads = threads_of(tok, r.token_ids)
        assert len(threads) == len(branches) > 1
        for th, br in zip(threads, branches):
            head = tok.encode(br.outline, add_special_tokens=False) + sep
            assert th[: len(head)] == head
            assert tok.decode(th).startswith(thread_header(br.outline))
        # forced: no logprob, not sampled (the first thread's header sits right after its <Thread>)
        start = r.token_ids.index(tok.convert_tokens_to_ids("<Thread>"))
        n_head = len(tok.encode(branches[0].outline, add_special_tokens=False) + sep)
        P = len(r.record.sampled) - len(r.token_ids)
        assert not any(r.record.sampled[P + start: P + start + 1 + n_head])
        assert r.logprobs[start: start + 1 + n_head] == [0.0] * (1 + n_head)
        # distinct entries: distinct threads
        assert len({tuple(t) for t in threads}) == len({br.outline for br in branches})


def test_without_headers_greedy_threads_are_identical(lm, problems):
    _, tok = lm
    branches, r = greedy_threads(lm, problems[0], headers=False)
    threads = threads_of(tok, r.token_ids)
    assert len(threads) == len(branches) and all(t == threads[0] for t in threads)  # the problem headers fix


def run_replay(lm, probs, mode: str, grammar: bool = False):
    model, tok = lm
    trees = [parse(p.traces["parason"], "parason").tree for p in probs]
    scripts = [role_scripts(t, "parason", tok) if mode == "executed" else sequential_script(t, "parason", tok)
               for t in trees]
    ex = KVExecutor(model, tok, ExecutorConfig(mode=mode, grammar=grammar), "parason",
                          Replay(scripts, tok.eos_token_id))
    prompts = [tok.encode(p.prompt) for p in probs]
    return prompts, ex.run(prompts, SamplingParams(max_new_tokens=200, temperature=0.9, seed=0)), ex


def test_both_modes_write_and_force_the_same_headers(lm, problems):
    _, tok = lm
    _, ex_runs, _ = run_replay(lm, problems, "executed")
    _, seq_runs, _ = run_replay(lm, problems, "sequential")
    for p, a, b in zip(problems, ex_runs, seq_runs):
        assert a.token_ids == b.token_ids == \
            tok.encode(p.traces["parason"], add_special_tokens=False) + [tok.eos_token_id]
        n = len(a.token_ids)
        assert a.record.sampled[-n:] == b.record.sampled[-n:]  # the same tokens forced in both modes
        forced = [t for t, s in zip(a.token_ids, a.record.sampled[-n:]) if not s]
        n_threads = len(parse(p.traces["parason"], "parason").tree.nodes[0].branches)
        heads = sum(len(tok.encode(thread_header(o), add_special_tokens=False))
                    for o in (b.outline for b in parse(p.traces["parason"], "parason").tree.nodes[0].branches))
        assert len(forced) == n_threads + heads + 1  # <Thread> x n, the headers, </Parallel>


def test_headers_are_grammar_valid_and_learner_scores_the_engine_exactly(lm, problems):
    from parallax.layouts import build_train_batch

    model, tok = lm
    prompts, runs, ex = run_replay(lm, problems, "executed", grammar=True)
    assert ex.grammar.rejected == 0  # every forced header token was accepted by the grammar
    trajs = [Trajectory(p.uid, pr, r.token_ids, r.logprobs, r.finish_reason, "", r.record)
             for p, pr, r in zip(problems, prompts, runs)]
    batch = build_train_batch("structured", with_advantages(trajs, [1.0] * len(trajs)), tok.pad_token_id)
    for b, r in enumerate(runs):  # headers are out of the loss
        P = len(prompts[b])
        for i, s in enumerate(r.record.sampled[P:]):
            assert float(batch.response_mask[b, P + i]) == float(s)
    with torch.no_grad():
        logp = masks.structured_logprobs(model, batch.input_ids, *batch.structure(), temperature=0.9)
    diff = ((logp - batch.old_logprobs) * batch.response_mask).abs().max()
    assert batch.response_mask.sum() > 0 and diff < 1e-4
