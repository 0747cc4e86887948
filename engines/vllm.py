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
  structured-output backend (xgrammar) using the EBNF from `formats.ebnf`;
* weight sync: a worker extension method receives the learner's state dict and calls the model's
  own `load_weights`, on every worker (`collective_rpc`).

Parallel formats (rollout.executor.mode sequential / executed) run through the request executor
(`parallel.requests`; `rollout.executor.dispatch` auto -> requests): the tags where it acts are stop
tokens (vLLM keeps stop_token_ids in `token_ids`, which the executor relies on and checks), `limits`
gives each request its own token budget, and each request re-reads its context from the prefix
cache (what the learner then scores: `contract.batch.ExecutionRecord`, "Reprefill"). With
`rollout.executor.grammar` each request gets the grammar of what it writes
(`formats.ebnf(spec, start)`) as its own structured output. Token-level test processors stay on
the hf engine.
"""

from __future__ import annotations

from typing import Any

from contract.batch import Completion, SamplingParams


class WeightSyncExtension:
    """Mixed into vLLM's GPU worker (`worker_extension_cls`): receive weights from the learner."""

    def parallax_load_weights(self, state_dict: dict[str, Any]) -> int:
        model = self.model_runner.model  # vLLM worker attribute
        loaded = model.load_weights(weights=((k, v.to(self.device)) for k, v in state_dict.items()))
        return len(loaded) if loaded is not None else len(state_dict)


def _generation_eos(model_path: str) -> list[int]:
    """EOS ids of the model's generation config, which vLLM stops on besides the tokenizer's
    (Qwen3: <|im_end|> and <|endoftext|>); none if it has no generation config."""
    from transformers import GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(model_path).eos_token_id
    except OSError:
        return []
    return [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))


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
                 max_model_len: int | None = None, **_: Any):
        from transformers import AutoTokenizer
        from vllm import LLM

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.llm = LLM(model=model_path, dtype=dtype, seed=seed, enable_prefix_caching=True,
                       gpu_memory_utilization=gpu_memory_utilization, tensor_parallel_size=tensor_parallel_size,
                       max_num_seqs=max_batch_size, max_model_len=max_model_len,
                       logprobs_mode="processed_logprobs",
                       worker_extension_cls="engines.vllm.WeightSyncExtension")
        self.eos_id = self.tokenizer.eos_token_id
        self.stop_ids = frozenset({self.eos_id, *_generation_eos(model_path)})  # what vLLM itself stops on

    def generate(self, prompts: list[list[int]], params: SamplingParams, limits: list[int] | None = None,
                 grammar: str | list[str | None] | None = None, processor=None) -> list[Completion]:
        """One completion per prompt, in order; `grammar` (EBNF) constrains every request, or one per
        request (None: free); `limits` gives each prompt its own max new tokens (the request executor's caps)."""
        from vllm import SamplingParams as VSP
        from vllm.inputs import TokensPrompt

        if processor is not None:
            raise NotImplementedError("test processors run on the hf engine; vLLM samples on its own")
        grammars = grammar if isinstance(grammar, list) else [grammar] * len(prompts)
        base = {"n": 1, "temperature": 0.0 if params.greedy else params.temperature, "top_p": params.top_p,
                "stop_token_ids": list(params.stop_token_ids), "logprobs": 0,
                "skip_special_tokens": False, "detokenize": False}
        limits = limits if limits is not None else [params.max_new_tokens] * len(prompts)
        # one seed per request: reproducible, and the n samples of a prompt still differ
        sps = [VSP(seed=params.seed + i, max_tokens=m, **base, **(_structured(g) if g else {}))
               for i, (m, g) in enumerate(zip(limits, grammars))]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sps, use_tqdm=False)
        results = []
        for out in outs:
            o = out.outputs[0]
            ids = list(o.token_ids)
            logprobs = [step[t].logprob for t, step in zip(ids, o.logprobs or [])]
            if len(logprobs) != len(ids):
                raise RuntimeError("vLLM returned no logprob for some sampled tokens")
            results.append(Completion(ids, logprobs, "length" if o.finish_reason == "length" else "stop"))
        return results

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        """Load the learner's weights on every worker, then drop the now stale prefix cache."""
        self.llm.collective_rpc("parallax_load_weights", args=(state_dict,))
        self.llm.reset_prefix_cache()

    def parameters_dict(self) -> dict[str, Any]:
        raise NotImplementedError("reading weights back from vLLM workers is not supported; test sync on HF")
