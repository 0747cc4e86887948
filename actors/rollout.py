"""Rollout worker: prompts in, trajectories out, through whichever engine the config names."""

from __future__ import annotations

from typing import Any

from parallax.contract.batch import Prompt, SamplingParams, Trajectory
from parallax.contract.config import RolloutConfig
from parallax.engines import make_engine


class RolloutWorker:
    """Plain class (Ray wraps it in actors/group.py); one engine per worker.

    Picked once here, by config: plain `engine.generate` (mode off; the format's grammar as structured
    outputs when asked), or an executor for sequential / executed modes -- the KV executor over the hf
    engine's model (dispatch kv) or the request executor over any engine's `generate` (requests).
    """

    def __init__(self, cfg: RolloutConfig, model_path: str, dtype: str = "float32", fmt: str = "parallel_r1",
                 model_files: dict | None = None):
        import time

        import torch

        started = time.time()
        if model_files is not None:  # no shared filesystem: this node's copy of the model (actors/files.py)
            from actors.files import local_model

            model_path = local_model(model_files)
        self.model_path = model_path

        from actors.devices import engine_dtype

        torch.set_num_threads(cfg.torch_threads)
        self.cfg = cfg
        extra = cfg.vllm.engine_kwargs() if cfg.engine == "vllm" else {"pack": cfg.pack_weights}
        if cfg.colocate and cfg.engine == "vllm":
            if not torch.cuda.is_available():
                raise ValueError("rollout.colocate with rollout.engine=vllm needs CUDA: vLLM's CPU build has no sleep "
                                 "mode (rollout.engine=hf sleeps on CPU too)")
            extra["enable_sleep_mode"] = True
        # `dtype` is the model's (the learner's master weights); the engine's own is decided here, on this
        # actor's device (`rollout.dtype`)
        self.dtype = engine_dtype(cfg.dtype, dtype, "cuda" if torch.cuda.is_available() else "cpu")
        self.engine = make_engine(cfg.engine, model_path=model_path, dtype=self.dtype,
                                  max_batch_size=cfg.max_batch_size, **extra)
        self.tokenizer = self.engine.tokenizer
        # The policy version its weights are, as the driver handed it (`orchestrator.weights.EngineWeights`
        # counts; this actor only records): 0 is the model it loaded. A restarted actor is back at 0, and
        # refuses a generate that expects later weights.
        self.version = 0
        # `rollout.colocate`: the level it sleeps at while the learners update (0: awake), and whether the
        # weights it woke with are not the policy's yet (after level 2: until the weight sync fills them)
        self.asleep, self.blank = 0, False
        self.executor = None  # KVExecutor | RequestExecutor; both share the engine's weights
        self.grammar = None  # mode off: the format's EBNF for the engine's structured outputs
        if cfg.executor.mode != "off" and cfg.dispatch == "requests":
            from parallax.executors.requests import RequestExecutor

            self.executor = RequestExecutor(self.engine, self.tokenizer, cfg.executor, fmt)
        elif cfg.executor.mode != "off":
            from parallax.executors.kv import KVExecutor

            self.executor = KVExecutor.from_engine(self.engine, cfg.executor, fmt)
        elif cfg.executor.grammar:
            from parallax.formats import ebnf

            self.grammar = ebnf(fmt)
        # when this constructor began and returned (wall clock): the start-up order (orchestrator/setup.py)
        self.constructed = (started, time.time())

    def generate(self, prompts: list[Prompt], n: int, seed: int, greedy: bool = False,
                 max_new_tokens: int | None = None, version: int | None = None) -> list[Trajectory]:
        """`n` samples of every prompt, grouped by prompt (prompt-major order). With `version`, only
        from weights of that version or later (`StaleWeights` otherwise: it restarted since the last sync)."""
        if version is not None and self.version < version:
            from actors.faults import StaleWeights

            raise StaleWeights(f"asked for samples of policy version {version}, this actor holds version "
                               f"{self.version} (restarted since the last weight sync)")
        if self.asleep or self.blank:
            raise RuntimeError(f"asked to generate while {'woken without weights' if self.blank else 'asleep'}: "
                               "a colocated engine sleeps through the update and wakes in the weight sync "
                               "(orchestrator.weights.EngineWeights.push) before it generates")
        params = SamplingParams(
            max_new_tokens=max_new_tokens or self.cfg.max_new_tokens,
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            greedy=greedy,
            seed=seed,
            sampler=self.cfg.sampler,
        )
        flat = [p for p in prompts for _ in range(n)]
        ids = [p.token_ids for p in flat]
        # An executor run returns completions with an ExecutionRecord; plain generate returns none.
        if self.executor:
            outs = self.executor.run(ids, params)
        elif self.grammar:
            outs = self.engine.generate(ids, params, grammar=self.grammar)
        else:
            outs = self.engine.generate(ids, params)
        texts = self.tokenizer.batch_decode([c.token_ids for c in outs], skip_special_tokens=False)
        eos = self.tokenizer.eos_token
        return [
            Trajectory(
                uid=p.uid,
                prompt_ids=p.token_ids,
                response_ids=c.token_ids,
                logprobs=c.logprobs,
                finish_reason=c.finish_reason,
                text=t.removesuffix(eos) if c.finish_reason == "stop" else t,
                record=getattr(c, "record", None),
                policy_version=self.version,
            )
            for p, c, t in zip(flat, outs, texts)
        ]

    def load_weights(self, state_dict: dict[str, Any], version: int) -> int:
        """The object-store path (`orchestrator.weights`): `state_dict` into the engine, as policy `version`."""
        got = self.engine.load_weights(state_dict)
        self.version, self.blank = version, False
        return got

    def sleep(self, level: int) -> None:
        """Free the device while the colocated learners update (`rollout.colocate`); generation is refused
        until `wake_up(["kv_cache"])`."""
        if not self.asleep:
            self.engine.sleep(level)
            self.asleep = level

    def wake_up(self, tags: list[str]) -> int:
        """"weights": memory for them (after level 2 empty, until the sync fills it); "kv_cache": awake. An
        actor that is awake (restarted meanwhile) has nothing to do. Returns the policy version it holds (the
        driver tells a restarted actor by it: one killed after the sync comes back with the weights it loaded)."""
        if not self.asleep:
            return self.version
        self.engine.wake_up(tags)
        if "weights" in tags and self.asleep == 2:
            self.blank = True
        if "kv_cache" in tags:
            self.asleep = 0
        return self.version

    def sync_ranks(self) -> int:
        return self.engine.sync_ranks

    def weights_dtype(self) -> str:
        """The dtype the engine holds its weights in (`rollout.dtype`, as this actor resolved it)."""
        return self.dtype

    def open_sync(self, address: str, rank: int, world_size: int, backend: str, timeout_s: float) -> None:
        from actors.faults import abandonable

        # the rendezvous waits for every member: the driver cancels this task when one dies meanwhile
        abandonable(lambda: self.engine.open_sync(address, rank, world_size, backend, timeout_s),
                    "weight-sync rendezvous")
        self._in_group = True

    def close_sync(self) -> None:
        self._in_group = False
        self.engine.close_sync()

    def close(self) -> None:
        """Stop the engine (`Engine.close`) before the actor is killed (`orchestrator.setup.Groups.shutdown`)."""
        self._in_group = False
        self.engine.close()

    def devices(self, heap: bool = False) -> dict:
        """The devices Ray gave this actor, as it sees them (`actors.devices.seen`)."""
        from actors.devices import seen

        return seen(heap)

    def pid(self) -> int:
        """This actor's process id (fault-injection tests kill it; the dashboard shows it too)."""
        import os

        return os.getpid()

    def receive_weights(self, plan: dict, version: int) -> int:
        """The collective path (`orchestrator.weights`): one broadcast into the engine, as policy `version`."""
        if not self.in_sync_group:
            from actors.faults import StaleWeights

            raise StaleWeights("not in the weight-sync group (restarted since it formed)")
        got = self.engine.receive_weights(plan)
        self.version, self.blank = version, False
        return got

    def receive_shared(self, handles: list[bytes], plan: dict, version: int) -> int:
        """The same-device hand-off (`parallax.weightsync.handoff`): the buffers the learner rank on this actor's
        device staged, into the engine, as policy `version`."""
        got = self.engine.receive_shared(handles, plan)
        self.version, self.blank = version, False
        return got

    @property
    def in_sync_group(self) -> bool:
        return getattr(self, "_in_group", False)

    def get_weights(self) -> dict[str, Any]:
        """The engine's current parameters (tests check sync against the learner's)."""
        return self.engine.parameters_dict()
