"""A vLLM logits processor that makes a request write a given script (tests and benchmarks only).

The vLLM counterpart of the tests' `Replay` (tests/doubles/replay.py) on the hf engine: vLLM runs logits
processors in its worker process, so a request carries its script (`SamplingParams.extra_args["parallax_script"]`:
the tokens it must write, the last one its stop) and this processor pins the next one at every step; the
model forward, KV cache, prefix caching and scheduling stay vLLM's own. Loaded by vLLM through
`VLLMEngine(script_processor=True)` (`logits_processors=["engines.script_vllm:ScriptProcessor"]`).
"""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

KEY = "parallax_script"


class ScriptProcessor(AdapterLogitsProcessor):
    """Row i of a scripted request: every logit -inf but its script's token at output position i."""

    def is_argmax_invariant(self) -> bool:
        return False  # it picks the token, greedy requests included

    def new_req_logits_processor(self, params):
        script = (params.extra_args or {}).get(KEY)
        if script is None:
            return None

        def pin(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
            target = script[min(len(output_ids), len(script) - 1)]
            out = torch.full_like(logits, float("-inf"))
            out[target] = 0.0
            return out

        return pin
