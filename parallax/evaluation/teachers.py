"""Teachers: text completers used by the Parallel-GSM8K builder and the annotator.

* :class:`HTTPTeacher` -- an OpenAI-compatible endpoint (``vllm serve``, SGLang, a hosted API)
  through ``urllib`` (no client package): ``/v1/completions`` or ``/v1/chat/completions``.
* :class:`EngineTeacher` -- a local HF checkpoint through the rollout worker (sequential decoding).

Both are picklable specs: the model / connection is opened lazily in the process that first
completes, so a teacher can be shipped to Ray tasks.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["EngineTeacher", "HTTPTeacher", "Teacher"]


class Teacher(Protocol):
    def complete(self, prompts: list[str], n: int, seed: int) -> list[list[str]]:
        """``n`` completions of every prompt, in prompt order."""


@dataclass
class HTTPTeacher:
    """OpenAI-compatible completion endpoint, e.g. ``HTTPTeacher("http://127.0.0.1:8000", "Qwen3-8B")``.

    ``chat=True`` sends each prompt as one user message to ``/v1/chat/completions``; otherwise the
    raw prompt goes to ``/v1/completions``.  Transient errors (connection, HTTP 429/5xx) are retried
    ``retries`` times with exponential back-off; other HTTP errors raise at once with the body.
    """

    base_url: str
    model: str
    chat: bool = False
    temperature: float = 0.6
    max_tokens: int = 2048
    timeout_s: float = 120.0
    retries: int = 3
    api_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def _post(self, route: str, body: dict) -> dict:
        url = self.base_url.rstrip("/") + route
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode()
        for attempt in range(self.retries + 1):
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read().decode())
            except urllib.error.HTTPError as e:
                if e.code not in (429, 500, 502, 503, 504) or attempt == self.retries:
                    raise RuntimeError(f"teacher endpoint {url} answered HTTP {e.code}: {e.read()[:300]!r}") from e
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                if attempt == self.retries:
                    raise RuntimeError(f"teacher endpoint {url} unreachable: {e}") from e
            time.sleep(min(8.0, 0.5 * 2**attempt))
        raise AssertionError("unreachable")

    def _one(self, prompt: str, n: int, seed: int) -> list[str]:
        body = {"model": self.model, "n": n, "temperature": self.temperature, "max_tokens": self.max_tokens,
                "seed": seed, **self.extra}
        if self.chat:
            out = self._post("/v1/chat/completions", {**body, "messages": [{"role": "user", "content": prompt}]})
            texts = [c["message"]["content"] or "" for c in out["choices"]]
        else:
            out = self._post("/v1/completions", {**body, "prompt": prompt})
            texts = [c["text"] for c in sorted(out["choices"], key=lambda c: c.get("index", 0))]
        if len(texts) != n:
            raise RuntimeError(f"teacher returned {len(texts)} choices, asked for {n}")
        return texts

    def complete(self, prompts: list[str], n: int = 1, seed: int = 0) -> list[list[str]]:
        return [self._one(p, n, seed) for p in prompts]


@dataclass
class EngineTeacher:
    """A local HF checkpoint decoded by the rollout worker (``engine`` "hf", or "vllm": GPU or the CPU build).

    ``chat`` (default): each prompt is one user turn through the tokenizer's chat template when it has
    one (an instruct teacher such as SmolLM2-135M-Instruct); a model without a template reads it raw.
    """

    model_path: str
    temperature: float = 1.0
    max_new_tokens: int = 256
    engine: str = "hf"
    batch_size: int = 64
    torch_threads: int = 1
    chat: bool = True
    vllm: dict[str, Any] = field(default_factory=lambda: {"enforce_eager": True})
    _worker: Any = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_worker"] = None  # the loaded model never travels; each process loads its own
        return state

    def complete(self, prompts: list[str], n: int = 1, seed: int = 0) -> list[list[str]]:
        from parallax.contract.batch import Prompt

        if self._worker is None:
            from actors.rollout import RolloutWorker
            from parallax.contract.config import RolloutConfig
            from parallax.contract.engine import VLLMConfig

            cfg = RolloutConfig(engine=self.engine, n=n, temperature=self.temperature,
                                max_new_tokens=self.max_new_tokens, max_batch_size=self.batch_size,
                                torch_threads=self.torch_threads, vllm=VLLMConfig(**self.vllm))
            self._worker = RolloutWorker(cfg, self.model_path)
        from parallax.trainingdata.prompts import render_prompt

        tok = self._worker.tokenizer
        texts = [render_prompt(tok, p) for p in prompts] if self.chat else prompts
        ids = tok(texts, add_special_tokens=False)["input_ids"]
        ps = [Prompt(uid=str(i), text=t, token_ids=x, ground_truth="") for i, (t, x) in enumerate(zip(texts, ids))]
        trajs = self._worker.generate(ps, n=n, seed=seed)
        return [[t.text for t in trajs[i * n:(i + 1) * n]] for i in range(len(prompts))]
