"""Parallel executor: fork/join structure, records, caps, and executed == sequential on a replayed script.

A random tiny model is driven by `Replay` (`tests/doubles/replay.py`), a logits processor that makes
each request emit the tokens of a known script (the model, KV cache, batching, positions and
record are all real). Scripts are teacher traces from toyworld or hand-built `formats` trees
(with Parason thread headers, which the executor forces), split per request role by `role_scripts`.
"""

from __future__ import annotations

import pytest
import torch
from doubles.replay import Replay, role_scripts  # tests/ is on sys.path

from parallax import toyworld
from parallax.contract.batch import ExecutionRecord, SamplingParams
from parallax.contract.config import ExecutorConfig
from parallax.executors.kv import KVExecutor
from parallax.formats import (
    SUBTASK,
    TRIAL,
    Block,
    Branch,
    Tree,
    parse,
    render,
    thread_header,
    with_thread_headers,
)


def run(model, tok, trees, fmt, mode, prompts=None, max_new_tokens=200, **cfg):
    """Replay `trees` in `mode`; returns (texts, executions)."""
    if mode == "executed":
        scripts = [role_scripts(t, fmt, tok) for t in trees]
    else:
        scripts = [{(): tok.encode(render(t, fmt), add_special_tokens=False)} for t in trees]
    ex = KVExecutor(model, tok, ExecutorConfig(mode=mode, **cfg), fmt, Replay(scripts, tok.eos_token_id))
    prompts = prompts or [tok.encode("Q: 3*4+5*6\nA:")] * len(trees)
    res = ex.run(prompts, SamplingParams(max_new_tokens=max_new_tokens, seed=0))
    return [tok.decode(r.token_ids, skip_special_tokens=False) for r in res], res


@pytest.fixture(scope="module")
def lm(tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_path)


def nested_tree() -> Tree:
    inner = Block((Branch(TRIAL, ("x=2 no",), "x=2"), Branch(TRIAL, ("x=3 yes, a long one",), "x=3")))
    return with_thread_headers(Tree(("Go. ", Block((Branch(SUBTASK, ("a=1 ", inner, " so a=3"), "a"),
                                                         Branch(SUBTASK, ("b=2",), "b"))), " a+b=5 #### 5")))


def reference_logprobs(model, ids: list[int], rec: ExecutionRecord) -> torch.Tensor:
    """[L] logprob of token t given the record's context, by one plain forward with an O(L^2) mask."""
    L = len(ids)
    allowed = torch.zeros(L, L, dtype=torch.bool)
    for i in range(L):
        for j in range(i + 1):
            si, sj = rec.segment_ids[i], rec.segment_ids[j]
            allowed[i, j] = sj == si or sj in rec.segment_visible[si]
    out = model(input_ids=torch.tensor([ids]), attention_mask=allowed[None, None],
                position_ids=torch.tensor([rec.position_ids]))
    logp = out.logits[0].float().log_softmax(-1)  # [L, V]
    ref = torch.zeros(L)
    ref[1:] = logp[:-1].gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
    return ref


@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
def test_executed_and_sequential_write_the_teacher_text(lm, fmt):
    model, tok = lm
    probs = toyworld.generate("mixed", 4, seed=3, difficulty=1)
    trees = [parse(p.traces[fmt], fmt).tree for p in probs]
    prompts = [tok.encode(p.prompt) for p in probs]
    ex_texts, ex = run(model, tok, trees, fmt, "executed", prompts, num_paths=2)
    seq_texts, seq = run(model, tok, trees, fmt, "sequential", prompts)
    for p, a, b, r, s in zip(probs, ex_texts, seq_texts, ex, seq):
        assert a == b == p.traces[fmt] + tok.eos_token
        assert r.finish_reason == s.finish_reason == "stop"
        n = len(parse(p.traces[fmt], fmt).tree.nodes[0].branches)
        assert r.requests == 1 + n + 1 and s.requests == 1  # main, the branches, the continuation
        # executed: every branch starts at the same position; the continuation after prefix + longest branch
        assert max(r.record.position_ids) < max(s.record.position_ids)
        assert not any(r.record.sampled[: len(prompts[0])])


def test_or_join_keeps_every_trial_trace(lm):
    model, tok = lm
    prob = next(p for p in toyworld.generate("trial", 10, seed=1) if p.family == "trial")
    tree = parse(prob.traces["parason"], "parason").tree
    [text], _ = run(model, tok, [tree], "parason", "executed", [tok.encode(prob.prompt)])
    for b in tree.nodes[0].branches:
        assert "<Thread>" + b.body[0] + "</Thread>" in text


def test_nested_fork_structure_and_positions(lm):
    model, tok = lm
    tree = nested_tree()
    [a], [r] = run(model, tok, [tree], "parason", "executed")
    [b], _ = run(model, tok, [tree], "parason", "sequential")
    assert a == b == render(tree, "parason") + tok.eos_token
    assert parse(a.removesuffix(tok.eos_token), "parason").ok
    assert r.requests == 1 + 2 + 2 + 1 + 1  # main, 2 threads, 2 nested trials, nested join, outer join
    rec, P = r.record, len(tok.encode("Q: 3*4+5*6\nA:"))
    ids = tok.encode("Q: 3*4+5*6\nA:") + r.token_ids
    thread = tok.convert_tokens_to_ids("<Thread>")
    starts = [rec.position_ids[i] for i, t in enumerate(ids) if t == thread]
    # outer threads (1st, 4th <Thread>) share a start position, so do the nested ones (2nd, 3rd)
    assert starts[0] == starts[3] == ids.index(thread) and starts[1] == starts[2] > starts[0]
    close = [i for i, t in enumerate(ids) if t == tok.convert_tokens_to_ids("</Parallel>")][-1]
    ends = [i for i, t in enumerate(ids) if t == tok.convert_tokens_to_ids("</Thread>")]
    thread_lens = [rec.position_ids[ends[-2]], rec.position_ids[ends[-1]]]  # outer threads' last tokens
    assert rec.position_ids[close] == max(thread_lens) + 1
    assert not rec.sampled[close]  # the join tag is forced
    assert rec.segment_request[0] == -1 and P == rec.segment_ids.count(0)


@pytest.mark.parametrize("fmt,mode", [("parason", "executed"), ("parallel_r1", "executed"), ("parason", "sequential")])
def test_engine_logprobs_equal_a_forward_pass_over_the_record(lm, fmt, mode):
    model, tok = lm
    if fmt == "parason":
        trees = [nested_tree()]
    else:
        trees = [parse(toyworld.generate("subtask", 1, seed=0)[0].traces[fmt], fmt).tree]
    trees = trees * 2
    scripts = [role_scripts(t, fmt, tok) if mode == "executed" else
               {(): tok.encode(render(t, fmt), add_special_tokens=False)} for t in trees]
    ex = KVExecutor(model, tok, ExecutorConfig(mode=mode), fmt, Replay(scripts, tok.eos_token_id))
    prompts = [tok.encode("Q: 3*4+5*6\nA:"), tok.encode("Q: 1+2\nA:")]  # different lengths: left padding
    res = ex.run(prompts, SamplingParams(max_new_tokens=200, seed=0, temperature=1.0))
    with torch.no_grad():
        for p, r in zip(prompts, res):
            ids = p + r.token_ids
            ref = reference_logprobs(model, ids, r.record)
            got = torch.tensor([0.0] * len(p) + r.logprobs)
            mask = torch.tensor(r.record.sampled)
            assert mask.sum() > 10
            assert torch.allclose(got[mask], ref[mask], atol=1e-4), (got[mask] - ref[mask]).abs().max()
            assert (got[~mask] == 0).all()


def _tok_len(tok, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False))


LONG = with_thread_headers(Tree(("Go. ", Block((Branch(SUBTASK, ("1*2*3*4*5*6*7*8=40320",), "p"),
                                                     Branch(SUBTASK, ("2",), "q"), Branch(TRIAL, ("3",), "r"))),
                                       " done #### 1")))


def test_caps_force_valid_closing_tags_identically_in_both_modes(lm):
    model, tok = lm
    out = {mode: run(model, tok, [LONG], "parason", mode, max_branch_tokens=6, max_branches=2)
           for mode in ("executed", "sequential")}
    (text,), (r,) = out["executed"]
    assert out["sequential"][0] == [text]
    res = parse(text.removesuffix(tok.eos_token), "parason")
    assert res.ok, res.error
    block = res.tree.nodes[1]
    assert [b.outline for b in block.branches] == ["p", "q"]  # </Outlines> forced after max_branches entries
    assert _tok_len(tok, block.branches[0].body[0]) <= 6 < _tok_len(tok, "p\n1*2*3*4*5*6*7*8=40320")
    assert [b.body[0][:2] for b in block.branches] == ["p\n", "q\n"]  # headers of the kept entries
    assert text.endswith(" done #### 1" + tok.eos_token)  # the main chain resumed its script
    forced = [t for t, smp in zip(r.record.segment_ids, r.record.sampled) if not smp and t > 0]
    # </Outlines> (cap), <Thread> + header ('p', '\n' / 'q', '\n') x2, the capped </Thread>, </Parallel>
    assert len(forced) == 5 + 4
@pytest.mark.parametrize("mode", ["executed", "sequential"])
def test_trajectory_cap_closes_every_open_block(lm, mode):
    model, tok = lm
    [text], [r] = run(model, tok, [nested_tree()], "parason", mode, max_new_tokens=20)
    assert r.finish_reason == "length"
    assert parse(text, "parason").ok
    # closing two open levels: entries, empty threads and closing tags (bounded by depth x min_branches)
    assert 20 <= len(r.token_ids) <= 20 + 16


def test_depth_cap_bans_a_deeper_block(lm):
    model, tok = lm
    [text], [r] = run(model, tok, [nested_tree()], "parason", "executed", max_depth=1)
    assert text.count("<Parallel>") == 1 and r.requests == 1 + 2 + 1


def test_eos_inside_a_branch_closes_that_branch(lm):
    model, tok = lm
    eos = tok.eos_token_id
    tree = parse(toyworld.generate("subtask", 1, seed=0)[0].traces["parason"], "parason").tree
    texts = []
    for mode in ("executed", "sequential"):
        scripts = role_scripts(tree, "parason", tok)
        keep = 1 + _tok_len(tok, thread_header(tree.nodes[0].branches[0].outline)) + 2  # <Thread> header a b
        if mode == "executed":
            scripts[(0, 0)] = scripts[(0, 0)][:keep] + [eos]  # ... EOS
        else:
            full = tok.encode(render(tree, "parason"), add_special_tokens=False)
            cut = full.index(tok.convert_tokens_to_ids("<Thread>"))
            scripts = {(): full[:cut + keep] + [eos] + full[cut + keep:]}
        ex = KVExecutor(model, tok, ExecutorConfig(mode=mode), "parason", Replay([scripts], eos))
        [r] = ex.run([tok.encode("Q: 1\nA:")], SamplingParams(max_new_tokens=200))
        texts.append(tok.decode(r.token_ids, skip_special_tokens=False))
        assert r.finish_reason == "stop"
    assert texts[0] == texts[1] and parse(texts[0].removesuffix(tok.eos_token), "parason").ok
    assert texts[0].count(tok.eos_token) == 1


def test_bad_input_is_refused(lm):
    model, tok = lm
    with pytest.raises(ValueError, match="mode"):
        ExecutorConfig(mode="speculative")
    with pytest.raises(ValueError, match="num_paths"):
        ExecutorConfig(mode="executed", num_paths=9, max_branches=8)
    ex = KVExecutor(model, tok, ExecutorConfig(mode="executed"))
    with pytest.raises(ValueError, match="prompt"):
        ex.run([[]], SamplingParams())


def test_tags_must_be_single_tokens(lm):
    from transformers import AutoTokenizer

    model, tok = lm
    plain = AutoTokenizer.from_pretrained(tok.name_or_path)
    plain = type(plain)(tokenizer_object=__import__("tokenizers").Tokenizer.from_str(
        plain.backend_tokenizer.to_str().replace('"<Outlines>"', '"<OutlinesX>"')), eos_token=plain.eos_token,
        pad_token=plain.pad_token)
    with pytest.raises(ValueError, match="one added token"):
        KVExecutor(model, plain, ExecutorConfig(mode="executed"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
def test_executed_mode_on_cuda_writes_what_the_cpu_writes(lm, fmt):
    """The executor is device-agnostic: on CUDA (transformers' decode path) the same replayed
    scripts give the same text and record, and logprobs within float noise of the CPU's."""
    import copy

    model, tok = lm
    if fmt == "parason":
        trees = [nested_tree()] * 2
    else:
        trees = [parse(p.traces[fmt], fmt).tree for p in toyworld.generate("subtask", 2, seed=0)]
    prompts = [tok.encode("Q: 3*4+5*6\nA:"), tok.encode("Q: 1+2\nA:")]
    cpu_texts, cpu_res = run(model, tok, trees, fmt, "executed", prompts=prompts)
    gpu_texts, gpu_res = run(copy.deepcopy(model).to("cuda"), tok, trees, fmt, "executed", prompts=prompts)
    assert gpu_texts == cpu_texts
    for a, b in zip(cpu_res, gpu_res):
        assert a.record == b.record and a.finish_reason == b.finish_reason
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-3


@pytest.mark.parametrize("placement", ["after", "inside"])
@pytest.mark.parametrize("mode", ["executed", "sequential"])
def test_summary_tags_are_forced_where_the_spec_puts_them(lm, placement, mode):
    from dataclasses import replace

    from parallax.formats import get_spec

    model, tok = lm
    spec = get_spec("parallel_r1", summary_placement=placement)
    tree = Tree(("Go. ", Block((Branch("path", ("3*4=12",)), Branch("path", ("5*6=30",))), "12+30=42"), " #### 42"))
    texts, res = run(model, tok, [tree], spec, mode, num_paths=2)
    want = ("Go. <Parallel><Path>3*4=12</Path><Path>5*6=30</Path></Parallel><Summary>12+30=42</Summary> #### 42"
            if placement == "after" else
            "Go. <Parallel><Path>3*4=12</Path><Path>5*6=30</Path><Summary>12+30=42</Summary></Parallel> #### 42")
    assert texts[0] == want + tok.eos_token
    assert parse(want, spec).tree == tree  # the tree records no placement: the spec's own
    ids, sampled = res[0].token_ids, res[0].record.sampled[-len(res[0].token_ids):]
    tag = {t: tok.convert_tokens_to_ids(t) for t in ("<Summary>", "</Summary>", "</Parallel>")}
    forced = {t: [not s for i, s in zip(ids, sampled) if i == tid] for t, tid in tag.items()}
    assert forced["<Summary>"] == [True]  # forced after the last path (after </Parallel> or not)
    assert forced["</Summary>"] == [False]  # the model closes its summary
    # </Parallel>: forced after the last path (after) or after </Summary> (inside) -- never sampled
    assert forced["</Parallel>"] == [True]
    other = replace(spec, summary_placement="inside" if placement == "after" else "after")
    assert parse(want, other).tree.nodes[1].placement == placement  # the other spec reads it and says where
