"""Request executor (parallax/executors/requests.py): the parallel formats over whole engine requests.

The real hf engine stands in at vLLM's boundary (`Engine.generate` with per-request limits and
stop tokens); `Replay`, passed down as an engine-level processor, makes each request write a
known script, so the request executor can be compared with the KV executor token for token. The
learner check scores the records with the threadweaver layout and a plain causal forward.
"""

from __future__ import annotations

import pytest
import torch
from doubles.replay import Replay, role_scripts, sequential_script  # tests/ is on sys.path
from test_executor import LONG, nested_tree

from actors.rollout import RolloutWorker
from parallax import toyworld
from parallax.contract.batch import Completion, Prompt, SamplingParams, Trajectory, with_advantages
from parallax.contract.config import ExecutorConfig, RolloutConfig
from parallax.engines import ENGINES
from parallax.engines.hf import HFEngine
from parallax.executors.kv import KVExecutor
from parallax.executors.requests import MAX_REDRAWS, RequestExecutor
from parallax.formats import parse, render
from parallax.layouts import build_train_batch
from parallax.layouts import logprobs as chunked


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    from parallax.engines.hf import HFEngine

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield HFEngine(tiny_model_path)
    torch.set_num_threads(threads)


def scripts_for(trees, fmt, mode, tok):
    return [role_scripts(t, fmt, tok) if mode == "executed" else sequential_script(t, fmt, tok) for t in trees]


def both(engine, trees, fmt, mode, prompts, max_new_tokens=200, **cfg):
    """(request executor, its results, KV executor results) for the same replayed scripts."""
    tok = engine.tokenizer
    config = ExecutorConfig(mode=mode, **cfg)
    params = SamplingParams(max_new_tokens=max_new_tokens, seed=0)
    rx = RequestExecutor(engine, tok, config, fmt, Replay(scripts_for(trees, fmt, mode, tok), tok.eos_token_id))
    kv = KVExecutor(engine.model, tok, config, fmt, Replay(scripts_for(trees, fmt, mode, tok), tok.eos_token_id))
    return rx, rx.run(prompts, params), kv.run(prompts, params)


def text(tok, r) -> str:
    return tok.decode(r.token_ids, skip_special_tokens=False)


@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
@pytest.mark.parametrize("mode", ["executed", "sequential"])
def test_requests_write_the_kv_executors_text_and_record_tokens(engine, fmt, mode):
    tok = engine.tokenizer
    probs = toyworld.generate("mixed", 4, seed=3, difficulty=1)
    trees = [parse(p.traces[fmt], fmt).tree for p in probs]
    prompts = [tok.encode(p.prompt) for p in probs]
    rx, req, kv = both(engine, trees, fmt, mode, prompts, num_paths=2)
    for p, prompt, a, b in zip(probs, prompts, req, kv):
        assert text(tok, a) == text(tok, b) == p.traces[fmt] + tok.eos_token
        assert a.finish_reason == b.finish_reason == "stop"
        assert a.record.sampled == b.record.sampled  # the same tokens forced, the same sampled
        assert a.record.reprefill and not b.record.reprefill
        n_branches = len(parse(p.traces[fmt], fmt).tree.nodes[0].branches)
        ids = prompt + a.token_ids
        if mode == "sequential":  # one request, re-read causally: positions are the text index
            assert a.record.position_ids == list(range(len(ids)))
            assert len({r for r in a.record.segment_request if r >= 0}) == 1
            continue
        # main chain (one request id throughout: its join re-reads its context causally) + one per branch
        assert len({r for r in a.record.segment_request if r >= 0}) == 1 + n_branches
        opening = tok.convert_tokens_to_ids("<Thread>" if fmt == "parason" else "<Path>")
        starts = [t for t, x in enumerate(ids) if x == opening]
        # every branch starts where the prefix ends; the join's tokens sit at their text index
        assert {a.record.position_ids[t] for t in starts} == {starts[0]}
        assert a.record.position_ids[-1] == len(ids) - 1
    assert rx.rounds >= 3


def test_nested_blocks_and_or_join_over_requests(engine):
    tok = engine.tokenizer
    tree = nested_tree()
    prompts = [tok.encode("Q: 3*4+5*6\nA:")]
    _, [a], [b] = both(engine, [tree], "parason", "executed", prompts)
    assert text(tok, a) == text(tok, b) == render(tree, "parason") + tok.eos_token
    # main, 2 threads, 2 nested trials: the nested join continues thread 0's request, the outer the main's
    assert len({r for r in a.record.segment_request if r >= 0}) == 5
    assert a.requests > 5  # every tag ends an engine request


def reprefill_rows(engine, trees, fmt, prompts):
    tok = engine.tokenizer
    rx = RequestExecutor(engine, tok, ExecutorConfig(mode="executed"), fmt,
                         Replay(scripts_for(trees, fmt, "executed", tok), tok.eos_token_id))
    res = rx.run(prompts, SamplingParams(max_new_tokens=200, seed=0, temperature=1.0))
    return [Trajectory(str(i), p, r.token_ids, r.logprobs, r.finish_reason, text(tok, r), r.record)
            for i, (p, r) in enumerate(zip(prompts, res))]


def learner_logprobs(model, batch) -> torch.Tensor:
    """[R, L] logprobs the learner computes for a batch (its `score_logprobs`: masks when the batch has a layout)."""
    from actors.scoring import score_logprobs

    with torch.no_grad():
        return score_logprobs(model, batch.input_ids, batch.attention_mask, 1.0, batch.structure(), "cpu")


@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
def test_request_records_reproduce_the_engine_logprobs_in_both_exact_layouts(engine, fmt):
    """The learner issue's check, for the request executor. threadweaver: one causal row per engine
    request. structured: one row per trajectory, the text causally plus copies of the requests that
    saw less than the text before them (parallax/layouts/reprefill.py), scored through the masked path."""
    tok = engine.tokenizer
    if fmt == "parason":
        trees = [nested_tree(), nested_tree()]
    else:
        trees = [parse(p.traces[fmt], fmt).tree for p in toyworld.generate("subtask", 2, seed=0)]
    prompts = [tok.encode("Q: 3*4+5*6\nA:"), tok.encode("Q: 1+2\nA:")]  # different lengths
    trajs = reprefill_rows(engine, trees, fmt, prompts)
    n_sampled = sum(sum(t.record.sampled) for t in trajs)
    tokens = {}
    for layout in ("threadweaver", "structured"):
        batch = build_train_batch(layout, with_advantages(trajs, [1.0, -1.0]), tok.pad_token_id)
        got, mask = learner_logprobs(engine.model, batch), batch.response_mask.bool()
        assert int(mask.sum()) == n_sampled > 40, layout  # every sampled token in the loss exactly once
        err = (got[mask] - batch.old_logprobs[mask]).abs().max()
        assert err < 1e-4, (layout, err)
        assert set(batch.advantages[mask].tolist()) == {1.0, -1.0}
        tokens[layout] = int(batch.attention_mask.sum())
    text_tokens = sum(len(t.prompt_ids) + len(t.response_ids) for t in trajs)
    assert text_tokens < tokens["structured"] < tokens["threadweaver"]  # copies only of what the text cannot hold
    with pytest.raises(ValueError, match="structured"):  # one causal row cannot hold a later branch
        build_train_batch("causal", with_advantages(trajs, [1.0, -1.0]), tok.pad_token_id)


def test_a_later_branch_is_scored_in_its_own_context_not_the_joins(engine):
    """Why the layout matters: the second path's tokens scored in the join's causal row (after the first
    path) are not the logprobs the engine sampled them with; in their own row they are."""
    tok = engine.tokenizer
    tree = parse(toyworld.generate("subtask", 1, seed=0)[0].traces["parallel_r1"], "parallel_r1").tree
    [t] = reprefill_rows(engine, [tree], "parallel_r1", [tok.encode("Q: 1+2\nA:")])
    rec, ids = t.record, t.prompt_ids + t.response_ids
    second = max(r for r in rec.segment_request if r >= 0)  # the last path's request
    cols = [i for i, s in enumerate(rec.segment_ids) if rec.segment_request[s] == second and rec.sampled[i]]
    with torch.no_grad():
        flat = chunked.token_logprobs(engine.model(input_ids=torch.tensor([ids])).logits, torch.tensor([ids]), 1.0)[0]
    engine_lp = torch.tensor([([0.0] * len(t.prompt_ids) + t.logprobs)[c] for c in cols])
    assert (flat[cols] - engine_lp).abs().max() > 1e-3


def test_caps_and_eos_close_blocks_as_the_kv_executor_does(engine):
    tok = engine.tokenizer
    prompts = [tok.encode("Q: 3*4+5*6\nA:")]
    _, [a], [b] = both(engine, [LONG], "parason", "executed", prompts, max_branch_tokens=6, max_branches=2)
    assert text(tok, a) == text(tok, b)
    res = parse(text(tok, a).removesuffix(tok.eos_token), "parason")
    assert res.ok and [br.outline for br in res.tree.nodes[1].branches] == ["p", "q"]
    for mode in ("executed", "sequential"):  # trajectory cap: every open block closed, finish "length"
        _, [a], _ = both(engine, [nested_tree()], "parason", mode, prompts, max_new_tokens=20)
        assert a.finish_reason == "length" and parse(text(tok, a), "parason").ok
        assert 20 <= len(a.token_ids) <= 20 + 16


def test_eos_inside_a_branch_closes_only_that_branch(engine):
    tok, eos = engine.tokenizer, engine.tokenizer.eos_token_id
    tree = parse(toyworld.generate("subtask", 1, seed=0)[0].traces["parason"], "parason").tree
    scripts = role_scripts(tree, "parason", tok)
    scripts[(0, 0)] = scripts[(0, 0)][:5] + [eos]
    cfg = ExecutorConfig(mode="executed")
    prompts, params = [tok.encode("Q: 1\nA:")], SamplingParams(max_new_tokens=200)
    [a] = RequestExecutor(engine, tok, cfg, "parason", Replay([dict(scripts)], eos)).run(prompts, params)
    [b] = KVExecutor(engine.model, tok, cfg, "parason", Replay([dict(scripts)], eos)).run(prompts, params)
    assert text(tok, a) == text(tok, b) and text(tok, a).count(tok.eos_token) == 1
    assert a.finish_reason == "stop" and parse(text(tok, a).removesuffix(tok.eos_token), "parason").ok


def test_a_banned_tag_is_redrawn_then_its_branch_closed(engine):
    """Past the depth cap a nested <Parallel> is banned. The engine cannot mask it, so the executor drops
    the draw and resamples (rejection: the banned-token distribution); the replayed script insists, so
    after MAX_REDRAWS redraws the branch is closed, as EOS in a block would close it."""
    tok = engine.tokenizer
    rx, [a], _ = both(engine, [nested_tree()], "parason", "executed", [tok.encode("Q: 1\nA:")], max_depth=1)
    t = text(tok, a)
    assert t.count("<Parallel>") == 1 and parse(t.removesuffix(tok.eos_token), "parason").ok
    assert rx.redraws == MAX_REDRAWS + 1


class DropsStopTokens:
    """An engine that strips the stop token (as vLLM would with a stop *string*): must be refused loudly."""

    def __init__(self, inner):
        self.inner = inner

    def generate(self, prompts, params, limits=None, processor=None):
        outs = self.inner.generate(prompts, params, limits=limits, processor=processor)
        return [Completion(c.token_ids[:-1], c.logprobs[:-1], c.finish_reason) if c.finish_reason == "stop" else c
                for c in outs]


@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
@pytest.mark.parametrize("mode", ["executed", "sequential"])
def test_each_request_gets_the_grammar_of_what_it_writes(engine, fmt, mode):
    """grammar on: every engine request is constrained by its part of the format (the response, a
    thread / path body, a summary), and the teacher's text passes through every one of them."""
    tok = engine.tokenizer
    probs = toyworld.generate("mixed", 3, seed=3, difficulty=1)
    trees = [parse(p.traces[fmt], fmt).tree for p in probs]
    seen: list = []

    class Recording:  # instrumentation around the real engine: what grammar each request carried
        def generate(self, prompts, params, **kw):
            seen.extend(kw["grammar"])
            return engine.generate(prompts, params, **kw)

    rx = RequestExecutor(Recording(), tok, ExecutorConfig(mode=mode, grammar=True, num_paths=2), fmt,
                         Replay(scripts_for(trees, fmt, mode, tok), tok.eos_token_id))
    res = rx.run([tok.encode(p.prompt) for p in probs], SamplingParams(max_new_tokens=200, seed=0))
    assert [text(tok, r) for r in res] == [p.traces[fmt] + tok.eos_token for p in probs]
    from parallax.formats import ebnf

    spec = rx.spec
    body = ebnf(spec, "thread_1") if fmt == "parason" else ebnf(spec, "path")
    assert rx.free == 0 and None not in seen and ebnf(spec, "main") in seen and body in seen
    if fmt == "parallel_r1":
        assert ebnf(spec, "summary") in seen


@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
def test_free_sampling_under_request_grammars_parses_and_scores_exactly(engine, fmt):
    """The random model sampling freely (no script; tag logits raised so that it forks): every trajectory
    parses, capped ones too, and the structured layout still reproduces the engine's logprobs (the
    grammar and the bias shape the draw, the reported logprob is the model's). The random model also
    spells tags in pieces (`<`, `Outlin`, `es>`), which the engine's string grammar lets through: those
    draws are cut and redrawn, and requests resumed inside an outline get the outline's grammar."""
    tok = engine.tokenizer
    cfg = ExecutorConfig(mode="executed", grammar=True, max_branch_tokens=24, max_depth=2)
    tags = torch.tensor(sorted(RequestExecutor(engine, tok, cfg, fmt).tags.ids.values()))

    def fork_often(views, x):
        x = x.clone()
        x[:, tags] += 3.0
        return x

    rx = RequestExecutor(engine, tok, cfg, fmt, fork_often)
    prompts = [tok.encode("Q: 3*4+5*6\nA:")] * 12
    res = rx.run(prompts, SamplingParams(max_new_tokens=160, seed=5, temperature=1.0))
    assert all(parse(text(tok, r).removesuffix(tok.eos_token), fmt).ok for r in res)
    assert sum(len({q for q in r.record.segment_request if q >= 0}) > 1 for r in res) >= 3  # forked ones
    assert rx.free == 0 and (rx.redraws > 0 or fmt == "parallel_r1")  # Parason's outline draws spell tags
    trajs = [Trajectory(str(i), p, r.token_ids, r.logprobs, r.finish_reason, text(tok, r), r.record)
             for i, (p, r) in enumerate(zip(prompts, res))]
    batch = build_train_batch("structured", with_advantages(trajs, [1.0] * len(trajs)), tok.pad_token_id)
    got, mask = learner_logprobs(engine.model, batch), batch.response_mask.bool()
    assert (got[mask] - batch.old_logprobs[mask]).abs().max() < 1e-4


def test_a_tag_spelled_in_pieces_is_cut_where_the_spelling_starts(engine):
    from parallax.executors.base import Traj

    tok = engine.tokenizer
    rx = RequestExecutor(engine, tok, ExecutorConfig(mode="executed", grammar=True), "parason")
    rx._params, rx._next_request, rx._reqs = SamplingParams(), 0, []
    head, pieces = tok.encode("ab cd", add_special_tokens=False), tok.encode(" <Outl", add_special_tokens=False)
    rest = tok.encode("ines> x", add_special_tokens=False)
    assert not set(head + pieces + rest) & set(rx.tags.ids.values())  # no tag token: the tag is spelled
    ids = head + pieces + rest
    req = rx._main(Traj(0), [1, 2])
    cut = rx._unspelled(req, Completion(ids, [-1.0] * len(ids), "stop"))
    first = next(i for i, t in enumerate(ids) if "<" in tok.decode([t]))
    assert cut.token_ids == ids[:first] and req.refused == 1  # resampled from just before the '<'
    whole = tok.encode("ab x < 3 and y > 2", add_special_tokens=False)  # '<' in text is fine
    assert rx._unspelled(req, Completion(whole, [0.0] * len(whole), "stop")).token_ids == whole


def test_bad_engines_and_configs_are_refused(engine):
    tok = engine.tokenizer
    rx = RequestExecutor(DropsStopTokens(engine), tok, ExecutorConfig(mode="executed"), "parason",
                         Replay([role_scripts(nested_tree(), "parason", tok)], tok.eos_token_id))
    with pytest.raises(RuntimeError, match="stop token"):
        rx.run([tok.encode("Q: 1\nA:")], SamplingParams(max_new_tokens=50))
    with pytest.raises(ValueError, match="prompt"):
        RequestExecutor(engine, tok, ExecutorConfig(mode="executed")).run([[]], SamplingParams())


def test_hf_engine_per_request_limits(engine):
    tok = engine.tokenizer
    prompts = [tok.encode("Q: 1\nA:"), tok.encode("Q: 2+2\nA:"), tok.encode("Q: 3\nA:")]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=12, seed=1), limits=[3, 12, 1])
    assert [len(c.token_ids) <= n for c, n in zip(outs, [3, 12, 1])] == [True] * 3
    assert len(outs[2].token_ids) == 1
    for c, n in zip(outs, [3, 12, 1]):
        stopped = c.token_ids[-1] == tok.eos_token_id
        assert c.finish_reason == ("stop" if stopped else "length") and (stopped or len(c.token_ids) == n)
    # the limits do not change what is sampled: each row's tokens are a prefix of its unlimited run
    full = engine.generate(prompts, SamplingParams(max_new_tokens=12, seed=1))
    assert all(f.token_ids[: len(c.token_ids)] == c.token_ids for f, c in zip(full, outs))
    with pytest.raises(ValueError, match="limits"):
        engine.generate(prompts, SamplingParams(), limits=[1])


class _WholeRequests(HFEngine):
    """vLLM's boundary (it cannot run here): an engine that only takes whole requests. Decodes with the
    real hf engine, records what each call asked for, and is not the hf engine (no KV executor)."""


    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[int, tuple[int, ...], list[int]]] = []

    def generate(self, prompts, params, limits=None, processor=None):
        self.calls.append((len(prompts), params.stop_token_ids, list(limits)))
        return super().generate(prompts, params, limits=limits, processor=processor)


ENGINES.setdefault("whole_requests_probe", f"{__name__}:_WholeRequests")  # a test engine, by name like the real ones


def test_rollout_worker_runs_executed_mode_on_an_engine_without_kv_control(tiny_model_path):
    """`rollout.executor.dispatch=auto` on a non-hf engine (vLLM's case): the worker drives the engine
    through the request executor, and its trajectories build the threadweaver batch."""
    cfg = RolloutConfig(engine="whole_requests_probe", max_new_tokens=24, torch_threads=1,
                        executor=ExecutorConfig(mode="executed", max_branch_tokens=8))
    worker = RolloutWorker(cfg, tiny_model_path, fmt="parallel_r1")
    tok = worker.tokenizer
    prompt = Prompt(uid="p0", text="Q: 3+4\nA:", token_ids=tok.encode("Q: 3+4\nA:"), ground_truth="7")
    trajs = worker.generate([prompt], n=3, seed=0)
    assert len(trajs) == 3 and all(t.record is not None and t.record.reprefill for t in trajs)
    assert all(t.text == tok.decode(t.response_ids, skip_special_tokens=False).removesuffix(tok.eos_token)
               for t in trajs)
    n, stops, limits = worker.engine.calls[0]
    acts = {tok.convert_tokens_to_ids(t) for t in ("<Parallel>", "</Path>", "</Summary>")}  # fork, join, force
    inert = {tok.convert_tokens_to_ids(t) for t in ("<Path>", "<Summary>", "</Parallel>")}
    assert n == 3 and acts <= set(stops) and not inert & set(stops) and limits == [24] * 3
    assert all(len(t.response_ids) <= 24 + 8 for t in trajs)  # the cap, plus at most the forced closing tags
    batch = build_train_batch("threadweaver", with_advantages(trajs, [0.5, -0.5, 0.0]), tok.pad_token_id)
    assert int(batch.response_mask.sum()) == sum(sum(t.record.sampled) for t in trajs) > 0


@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
def test_sft_on_teacher_traces_trains_the_layout_the_request_executor_runs(engine, fmt):
    """Cold-start SFT with dispatch requests (`structured_sft_batch(..., reprefill=True)`) builds, from the
    teacher trace alone, the very rows, positions, visibility and loss the learner builds from the request
    executor's own records when it samples that trace."""
    from parallax.layouts.structured import structured_sft_batch

    tok = engine.tokenizer
    train, _ = toyworld.make_splits(4, 1, seed=3, difficulty=1, family="mixed")
    probs = train[:2]
    trees = [parse(p.traces[fmt], fmt).tree for p in probs]
    prompts = [tok(p.prompt, add_special_tokens=False)["input_ids"] for p in probs]
    rx = RequestExecutor(engine, tok, ExecutorConfig(mode="executed"), fmt,
                         Replay(scripts_for(trees, fmt, "executed", tok), tok.eos_token_id))
    res = rx.run(prompts, SamplingParams(max_new_tokens=300, seed=0))
    trajs = [Trajectory(str(i), p, r.token_ids, r.logprobs, r.finish_reason, text(tok, r), r.record)
             for i, (p, r) in enumerate(zip(prompts, res))]
    assert [t.text for t in trajs] == [p.traces[fmt] + tok.eos_token for p in probs]
    rl = build_train_batch("structured", with_advantages(trajs, [1.0, 1.0]), tok.pad_token_id)
    sft = structured_sft_batch(probs, fmt, tok, mode="executed", reprefill=True)
    assert sft.input_ids.shape[1] > max(len(p) + len(r.token_ids) for p, r in zip(prompts, res))  # copies
    assert torch.equal(sft.input_ids, rl.input_ids) and torch.equal(sft.loss_mask, rl.response_mask)
    assert torch.equal(sft.position_ids, rl.position_ids) and torch.equal(sft.segment_ids, rl.segment_ids)
    assert torch.equal(sft.segment_visible, rl.segment_visible)


def test_every_trajectory_cap_finishes_cleanly_when_eos_and_a_banned_tag_meet_it(engine):
    """Thread 0 samples EOS (closing it), thread 1 draws a banned nested block (cut, redrawn): whatever
    the trajectory cap, every request is settled and the trajectory ends with a parsable text."""
    from parallax.formats import SUBTASK, Block, Branch, Tree

    tok, eos = engine.tokenizer, engine.tokenizer.eos_token_id
    tree = Tree(("Go. ", Block((Branch(SUBTASK, ("x",), "x"), Branch(SUBTASK, ("y",), "y"))), " done"))
    scripts = role_scripts(tree, "parason", tok)
    scripts[(0, 0)] = scripts[(0, 0)][:3] + [eos]  # <Thread> x \n EOS
    scripts[(0, 1)] = scripts[(0, 1)][:3] + tok.encode(" aaa", add_special_tokens=False) + \
        [tok.convert_tokens_to_ids("<Parallel>")] + scripts[(0, 1)][3:]
    for cap in range(8, 40):
        rx = RequestExecutor(engine, tok, ExecutorConfig(mode="executed", max_depth=1), "parason",
                             Replay([dict(scripts)], eos))
        [r] = rx.run([tok.encode("Q: 1\nA:")], SamplingParams(max_new_tokens=cap, seed=0))
        assert parse(text(tok, r).removesuffix(tok.eos_token), "parason").ok, cap


def test_greedy_spelled_tag_keeps_the_tokens_before_it(engine):
    tok = engine.tokenizer
    head = tok.encode("aaa", add_special_tokens=False) + [tok.convert_tokens_to_ids("<Parallel>")]
    spelled = tok.encode(" <Outl", add_special_tokens=False) + tok.encode("ines>", add_special_tokens=False)
    rx = RequestExecutor(engine, tok, ExecutorConfig(mode="executed", grammar=True), "parason",
                         Replay([{(): head + spelled}], tok.eos_token_id))
    [r] = rx.run([tok.encode("Q: 1\nA:")], SamplingParams(max_new_tokens=40, greedy=True))
    assert r.token_ids[: len(head)] == head and rx.redraws == 1  # cut at ' <Outl', the rest closed by the executor
    assert parse(text(tok, r).removesuffix(tok.eos_token), "parason").ok


def test_hf_generate_applies_top_p_after_the_grammar(engine):
    """A grammar whose tokens all lie outside the unmasked top-p set: top-p runs over what the grammar
    allows (as the KV executor draws), and the reported logprob stays the model's own."""
    tok = engine.tokenizer
    out = engine.generate([tok.encode("Q: 1\nA:")] * 2, SamplingParams(max_new_tokens=5, top_p=0.01, seed=0),
                          grammar='root ::= "zq" [a-z]*')
    for c in out:
        assert tok.decode(c.token_ids).startswith("zq") and all(-50 < lp < 0 for lp in c.logprobs)


class _StopsShort:
    """vLLM at its max_model_len: returns fewer tokens than asked, finish "length" (it cannot run here)."""

    def __init__(self, inner):
        self.inner, self.stop_ids = inner, inner.stop_ids

    def generate(self, prompts, params, limits=None, processor=None):
        outs = self.inner.generate(prompts, params, limits=limits, processor=processor)
        return [Completion(c.token_ids[:2], c.logprobs[:2], "length") if len(c.token_ids) > 2 else c for c in outs]


class _ExtraEos:
    """vLLM stopping on its generation config's second EOS id (Qwen3: <|endoftext|>) besides the tokenizer's."""

    def __init__(self, inner, extra: int):
        self.inner, self.extra, self.stop_ids = inner, extra, inner.stop_ids | {extra}

    def generate(self, prompts, params, limits=None, processor=None):
        import dataclasses

        params = dataclasses.replace(params, stop_token_ids=(*params.stop_token_ids, self.extra))
        return self.inner.generate(prompts, params, limits=limits, processor=processor)


def test_an_engine_that_stops_short_or_on_its_own_eos_ids_ends_trajectories_cleanly(engine):
    tok = engine.tokenizer
    tree = nested_tree()
    short = RequestExecutor(_StopsShort(engine), tok, ExecutorConfig(mode="executed"), "parason",
                            Replay([role_scripts(tree, "parason", tok)], tok.eos_token_id))
    [r] = short.run([tok.encode("Q: 1\nA:")], SamplingParams(max_new_tokens=200))
    assert r.finish_reason == "length" and parse(text(tok, r), "parason").ok  # closed as a cap, no endless retry
    done = tok.encode(" done", add_special_tokens=False)[-1]
    script = tok.encode("Go. ok", add_special_tokens=False) + [done] + tok.encode(" more", add_special_tokens=False)
    rx = RequestExecutor(_ExtraEos(engine, done), tok, ExecutorConfig(mode="executed"), "parason",
                         Replay([{(): script}], -1))
    [r] = rx.run([tok.encode("Q: 1\nA:")], SamplingParams(max_new_tokens=50))
    assert r.finish_reason == "stop" and r.token_ids[-1] == done  # the engine's own EOS id ends the trajectory
