"""A vLLM logits processor that makes a request write a given script (a test double, for tests and benches).

The vLLM counterpart of `Replay` (replay.py) on the hf engine: vLLM runs logits processors in its worker
processes, so a request carries its script (`SamplingParams.extra_args[SCRIPT_KEY]`: the tokens it must
write, the last one its stop, from `Replay.request_args`) and this processor pins the next one at every
step; the model forward, KV cache, prefix caching and scheduling stay vLLM's own. vLLM loads it by name:
`VLLMEngine(logits_processors=[SCRIPT_PROCESSOR])`, with tests/ on sys.path.
"""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from doubles.replay import SCRIPT_KEY


class ScriptProcessor(AdapterLogitsProcessor):
    """Row i of a scripted request: every logit -inf but its script's token at output position i."""

    def is_argmax_invariant(self) -> bool:
        return False  # it picks the token, greedy requests included

    def new_req_logits_processor(self, params):
        script = (params.extra_args or {}).get(SCRIPT_KEY)
        if script is None:
            return None

        def pin(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
            target = script[min(len(output_ids), len(script) - 1)]
            out = torch.full_like(logits, float("-inf"))
            out[target] = 0.0
            return out

        return pin
