"""GPU placement on this CPU, with Ray's logical GPUs: a cluster of 8 declared GPUs (`ray.init(num_gpus=8)`)
places the real rollout and learner actors as it would on a GPU node, and sets each one's
CUDA_VISIBLE_DEVICES. The run is a process of its own: the session's cluster declares no GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.weights import shared_devices

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# One process, one Ray cluster of 8 logical GPUs; each case builds the run's groups (real workers: they
# see no CUDA here, so the learners run DeepSpeed on CPU over gloo), pushes the weights once, and says
# where everything landed.
PROBE = r"""
import json, sys, dataclasses
import ray, torch
from parallax.contract.config import LearnerConfig, ParallaxConfig, RolloutConfig
from parallax.contract.engine import WeightSyncConfig
from orchestrator.setup import build_groups
from orchestrator.weights import EngineWeights

model, out = sys.argv[1], {}
ray.init(num_cpus=8, num_gpus=8, include_dashboard=False, log_to_driver=False)
cases = {  # name: (learner ranks, GPUs each; engines, GPUs each; sync backend; rollout.colocate)
    # each engine tensor-parallel over 2 GPUs, which its bundle reserves (one case for both: each costs ~12-18 s
    # of actor start-up here)
    "separate": (2, 1.0, 2, 2.0, "auto", False),
    "colocated": (1, 0.5, 1, 0.5, "nccl", False),  # PACKed onto learner rank 0's GPU; NCCL as on a GPU node
    "colocate": (2, 1.0, 2, 1.0, "nccl", True),  # rollout.colocate: engine i on learner i's bundle and GPU
}
for name, (nl, lg, nr, rg, backend, colocate) in cases.items():
    cfg = ParallaxConfig()
    cfg.rollout = RolloutConfig(num_actors=nr, num_cpus=0.25, num_gpus=rg, torch_threads=1, n=2, max_new_tokens=4,
                                weight_sync=WeightSyncConfig(backend=backend), colocate=colocate)
    # the colocated paper layout under ZeRO-3 (learner=deepspeed_gpu): each rank gathers, stages and hands off
    cfg.learner = LearnerConfig(num_actors=nl, num_cpus=0.25, num_gpus=lg, torch_threads=1, micro_batch_size=2,
                                zero_stage=3 if colocate else 1)
    cfg.reward.num_cpus = 0.25
    g = build_groups(cfg, model, name)
    seen = {f"{grp.role}_{i}": ray.get(a.devices.remote(heap=True)) for grp in (g.rollout, g.learner)
            for i, a in enumerate(grp.actors)}
    built = {f"{grp.role}_{i}": ray.get(a.__ray_call__.remote(lambda w: w.constructed))
             for grp in (g.rollout, g.learner) for i, a in enumerate(grp.actors)}
    weights = EngineWeights(g.sync, g.learner, g.rollout, 0, 60, sleep_level=2 if colocate else 0)
    slept = weights.sleep()  # colocated: the engines drop their weights (level 2); the push wakes and refills them
    figures = weights.push()
    learner = ray.get(g.learner.async_state_dict())
    engines = ray.get([a.get_weights.remote() for a in g.rollout.actors])
    out[name] = {"seen": seen, "backend": g.sync.backend, "fallback": g.sync.fallback is not None,
                 "bytes": figures["sync/bytes"],
                 "equal": all(torch.equal(e[k], v) for e in engines for k, v in learner.items()),
                 "slept": sorted(slept), "woke": "timing/wake_and_sync" in figures, "built": built,
                 "trace": weights.wake_trace, "transports": getattr(g.sync, "transports", {}),
                 "handoff": {f"rollout_{i}": f"learner_{r}" for i, r in getattr(g.sync, "handoff", {}).items()},
                 "released": figures.get("memory/learner_cache_released_gib"),
                 "bundles": len(ray.util.placement_group_table(g.placement_group)["bundles"])}
    g.shutdown()
print("PROBE " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def placed(tiny_model_path) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    run = subprocess.run([sys.executable, "-c", PROBE, tiny_model_path], check=False, capture_output=True, text=True,
                         timeout=600, cwd=ROOT, env=env)
    line = next((x for x in run.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert run.returncode == 0 and line, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(line.removeprefix("PROBE "))


def _gpus(case: dict, role: str) -> list[list[str]]:
    return [s["gpus"] for name, s in sorted(case["seen"].items()) if name.startswith(role)]


def test_every_actor_sees_the_gpus_its_bundle_reserved_and_no_other(placed):
    for name, case in placed.items():
        for who, s in case["seen"].items():
            assert s["visible"].split(",") == s["gpus"], (name, who, s)  # Ray's ids are its CUDA_VISIBLE_DEVICES
            assert s["cuda"] is False, (name, who)  # a CPU behind the ids: each actor sees it is one
            assert s["nccl_cumem"] == "0", (name, who)  # learners and engines agree on NCCL's allocator (item 7)
            assert s["refaults"] < 1000, (name, who, s)  # the heap keeps freed memory (12 K faults without ACTOR_ENV)
    sep = placed["separate"]
    # each TP-2 engine holds both of its GPUs
    assert [len(g) for g in _gpus(sep, "learner")] == [1, 1] and [len(g) for g in _gpus(sep, "rollout")] == [2, 2]
    ids = [g for role in ("learner", "rollout") for ids in _gpus(sep, role) for g in ids]
    assert len(set(ids)) == len(ids) == 6, ids  # four actors, six GPUs, none given twice


def test_the_sync_group_never_holds_two_ranks_on_one_gpu(placed):
    """Separate GPUs: the group forms, over gloo because no member sees CUDA (the members decide, not the
    driver, whose config asked for GPUs), the TP-2 engines with both their workers' GPUs in it. A GPU given to
    learner rank 0 and an engine: that engine is handed its weights on the GPU (issue 50, item 2), no
    group, nothing through the object store; they arrive bit for bit."""
    case = placed["separate"]
    members = {k: v for k, v in case["seen"].items() if k.startswith("rollout") or k == "learner_0"}
    assert shared_devices(members) == {}
    assert case["backend"] == "gloo" and not case["fallback"] and case["equal"]
    assert set(case["transports"].values()) == {"collective"} and case["handoff"] == {}
    colo = placed["colocated"]
    assert _gpus(colo, "learner") == _gpus(colo, "rollout"), colo["seen"]  # PACK put both on one GPU
    assert colo["transports"] == {"rollout_0": "handoff"} and colo["handoff"] == {"rollout_0": "learner_0"}
    assert not colo["fallback"] and colo["equal"] and colo["bytes"] > 0


def test_colocated_engines_share_their_learners_gpus_sleep_and_wake_with_the_weights(placed):
    """rollout.colocate: engine i sits on learner rank i's bundle and sees its GPU (two GPUs for four
    actors, three bundles with the reward actor's), and each ZeRO-3 rank hands its own engine the weights
    it gathered, on their GPU (issue 50, item 2: no group, nothing through the object store). The engines
    slept at level 2 (weights dropped), and the push woke them and refilled them: every engine's weights
    equal the learner's, bit for bit."""
    case = placed["colocate"]
    assert _gpus(case, "learner") == _gpus(case, "rollout"), case["seen"]
    assert len({g for ids in _gpus(case, "learner") for g in ids}) == 2 and case["bundles"] == 3
    assert case["handoff"] == {"rollout_0": "learner_0", "rollout_1": "learner_1"}
    assert set(case["transports"].values()) == {"handoff"}
    assert not case["fallback"] and case["equal"] and case["bytes"] > 0
    assert case["slept"] == ["timing/sleep"] and case["woke"]
    assert placed["separate"]["slept"] == [] and not placed["separate"]["woke"]  # not colocated: never asleep


def test_shared_devices_names_each_gpu_given_to_two_members():
    node = "ab" * 28
    members = {"learner_0": {"node": node, "gpus": ["0"]}, "rollout_0": {"node": node, "gpus": ["0", "1"]},
               "rollout_1": {"node": "cd" * 28, "gpus": ["0"]}}  # GPU 0 of another node: not shared
    assert shared_devices(members) == {f"{node[:8]}:0": ["learner_0", "rollout_0"]}
    assert shared_devices({"learner_0": {"node": node, "gpus": []}, "rollout_0": {"node": node, "gpus": []}}) == {}


def test_colocated_engines_start_once_their_learners_hold_the_gpu(placed):
    """Issue 50, item 4: DeepSpeed moving a learner onto the GPU while vLLM profiles its memory there gives
    vLLM a moving figure. Every colocated engine's constructor begins after every learner's returned."""
    built = placed["colocate"]["built"]
    ready = max(end for name, (_, end) in built.items() if name.startswith("learner"))
    starts = [start for name, (start, _) in built.items() if name.startswith("rollout")]
    assert len(starts) == 2 and min(starts) >= ready, built


def test_the_learners_release_their_cached_memory_before_each_wake(placed):
    """Issue 50, item 3, in verl's order: the learners' cached CUDA memory goes back to the GPU before the
    engines wake their weights, and again (the sync's gathered buckets) before their KV cache. On CPU
    there is nothing cached to release (0 GiB); the order is the driver's, every step awaited."""
    case = placed["colocate"]
    assert case["trace"] == ["release_memory", "wake_up:weights", "push", "release_memory", "wake_up:kv_cache"]
    assert case["released"] == 0.0
    assert placed["separate"]["trace"] == [] and placed["separate"]["released"] is None  # never asleep
