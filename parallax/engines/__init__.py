"""Rollout engines: the `Engine` interface, its backends, and the decode and sampling pieces they share.

* `base.py`: the `Engine` Protocol (generate with limits, grammar and stop ids; weight loading;
  the tokenizer) and `ENGINES`, the name -> "module:Class" table `make_engine` resolves;
* `hf.py`: transformers on CPU (or one GPU), a hand-written decode loop; `vllm.py`: vLLM;
* `decode_kv.py`: the copy-free KV-cache decode step both CPU decode loops run;
* `sampling.py`: padding, top-p, the speculative grammar draw; `constrained.py`: the one xgrammar
  masker every decode loop uses.

Nothing here knows the parallel formats' fork/join (that is `parallax/executors/`).
"""

from parallax.engines.base import ENGINES, Engine, engine_class, make_engine

__all__ = ["ENGINES", "Engine", "engine_class", "make_engine"]
