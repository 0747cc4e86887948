"""Start (or attach to) the Ray cluster and create the run's actor groups.

Implementations are chosen here, once: the engine backend, the reward, the weight-sync
path. The driver loop then only calls group methods.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors.group import BundleSpec, LearnerGroup, RewardActorGroup, RolloutGroup, reserve
from actors.locks import extensions_dir
from actors.weight_sync import WeightSync, make_weight_sync
from contract.config import ClusterConfig, ParallaxConfig

REPO_ROOT = str(Path(__file__).resolve().parents[1])


def start_cluster(cfg: ClusterConfig) -> None:
    """Local cluster by default (dashboard on loopback), or attach to `cluster.address`."""
    env = {"TOKENIZERS_PARALLELISM": "false", "WANDB_SILENT": "true", "TRANSFORMERS_VERBOSITY": "error",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)}
    if not _has_cuda():
        env["DS_ACCELERATOR"] = "cpu"  # DeepSpeed would otherwise probe for CUDA and warn
    if ray.is_initialized():
        return
    if cfg.address:
        ray.init(address=cfg.address, runtime_env={"env_vars": env}, log_to_driver=True)
    else:
        ray.init(num_cpus=cfg.num_cpus, include_dashboard=cfg.include_dashboard,
                 dashboard_host=cfg.dashboard_host, runtime_env={"env_vars": env}, log_to_driver=True)


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@ray.remote(num_cpus=0)
def _rendezvous(n: int = 2) -> tuple[str, list[int]]:
    """Runs on rank 0's node: its IP and `n` distinct free ports (torch.distributed, the weight-sync group)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("", 0))
        return ray.util.get_node_ip_address(), [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Groups:
    rollout: RolloutGroup
    reward: RewardActorGroup
    learner: LearnerGroup
    sync: WeightSync
    placement_group: object

    def shutdown(self) -> None:
        """Free the run's actors and placement group (sweep jobs share one Ray cluster)."""
        from ray.util import remove_placement_group

        for group in (self.rollout, self.reward, self.learner):
            for actor in group.actors:
                ray.kill(actor)
        remove_placement_group(self.placement_group)


def build_groups(cfg: ParallaxConfig, model_path: str, run_name: str) -> Groups:
    """Reserve one placement group and create the rollout, reward and learner actors on it."""
    from actors.learner import LearnerWorker
    from actors.reward_worker import RewardWorker
    from actors.rollout import RolloutWorker

    r, w, lcfg = cfg.rollout, cfg.reward, cfg.learner
    pg, off = reserve([
        BundleSpec("rollout", r.num_actors, r.num_cpus, r.num_gpus),
        BundleSpec("reward", w.num_actors, w.num_cpus, 0.0),
        BundleSpec("learner", lcfg.num_actors, lcfg.num_cpus, lcfg.num_gpus),
    ], cfg.cluster.placement_strategy, name=f"parallax/{run_name}")
    prefix = f"parallax/{run_name}"
    on_rank0 = _rendezvous.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=off["learner"]))
    addr, (port, sync_port) = ray.get(on_rank0.remote())
    sync = make_weight_sync(r.weight_sync, addr, sync_port, gpus=bool(r.num_gpus and lcfg.num_gpus))
    learner = LearnerGroup(
        "learner", LearnerWorker, lcfg.num_actors, pg, off["learner"], lcfg.num_cpus, lcfg.num_gpus,
        lambda i: {"cfg": lcfg, "model_path": model_path, "dtype": cfg.model.dtype, "rank": i,
                       "world_size": lcfg.num_actors, "master_addr": addr, "master_port": port, "seed": cfg.trainer.seed},
        prefix)
    rollout = RolloutGroup(
        "rollout", RolloutWorker, r.num_actors, pg, off["rollout"], r.num_cpus, r.num_gpus,
        lambda i: {"cfg": r, "model_path": model_path, "dtype": cfg.model.dtype,
                       "fmt": cfg.data.spec}, prefix)
    reward = RewardActorGroup(
        "reward", RewardWorker, w.num_actors, pg, off["reward"], w.num_cpus, 0.0,
        lambda i: {"reward": w.name, "params": dict(w.params), "workers": 1, "timeout_s": w.timeout_s}, prefix)
    # every constructor returned, or an error naming the actor: the first call never waits on a dead one
    timeout = cfg.cluster.start_timeout_s
    rollout.wait_ready(timeout, "model load and engine start-up (vLLM: KV cache allocation, warm-up)")
    reward.wait_ready(timeout)
    learner.wait_ready(timeout, f"model load, DeepSpeed init; a torch extension build lock left by a killed run "
                       f"waits up to 300 s before it is cleared ({extensions_dir()}/*/*/lock)")
    return Groups(rollout, reward, learner, sync, pg)
