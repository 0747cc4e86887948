"""Start (or attach to) the Ray cluster and create the run's actor groups.

Implementations are chosen here, once: the engine backend, the reward, the weight-sync
path. The driver loop then only calls group methods.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors.faults import summary
from actors.files import pack_model
from actors.group import BundleSpec, LearnerGroup, RewardActorGroup, RolloutGroup, reserve
from actors.locks import extensions_dir
from orchestrator.weights import WeightSync, make_weight_sync
from parallax.contract.config import ClusterConfig, ParallaxConfig

REPO_ROOT = str(Path(__file__).resolve().parents[1])


def start_cluster(cfg: ClusterConfig) -> None:
    """Local cluster by default (dashboard on loopback), or attach to `cluster.address`."""
    env = {"TOKENIZERS_PARALLELISM": "false", "WANDB_SILENT": "true", "TRANSFORMERS_VERBOSITY": "error",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)}
    if ray.is_initialized():
        return
    if cfg.address:
        if cfg.loopback and cfg.address.split("://")[-1].rpartition(":")[0] in ("127.0.0.1", "localhost"):
            bind_loopback()  # a cluster on this machine's loopback (ray.cluster_utils): this driver is on it too
        ray.init(address=cfg.address, runtime_env={"env_vars": env}, log_to_driver=True)
    else:
        if cfg.loopback:
            bind_loopback()
        extra = {"_metrics_export_port": cfg.metrics_export_port} if cfg.metrics_export_port else {}
        # address="local": a cluster of this run's own, never one another process left on this machine
        # (Ray otherwise joins the newest `ray start --head` it finds, and refuses num_cpus there)
        ray.init(address="local", num_cpus=cfg.num_cpus, include_dashboard=cfg.include_dashboard,
                 dashboard_host=cfg.dashboard_host, runtime_env={"env_vars": env}, log_to_driver=True,
                 _system_config={"metrics_report_interval_ms": 2000}, **extra)
        print(f"Ray metrics (Prometheus): http://{ray.util.get_node_ip_address()}:{metrics_port()}/metrics", flush=True)


def pipeline_threads_warning(cfg: ParallaxConfig, cores: int) -> str | None:
    """A line to print when the pipeline (`trainer.max_staleness` > 0) overlaps CPU generation and CPU
    updates whose torch threads add up to more than the machine's cores: oversubscribed, both phases
    slow down more than the overlap saves (the default run, 2 + 2 threads on 2 cores: 7.8 s per RL step
    against 2.9 s synchronous; 1 + 1 threads: 1.56x the synchronous loop, bench/bench_peer.py)."""
    if cfg.trainer.max_staleness == 0 or cfg.cluster.address or cfg.rollout.num_gpus or cfg.learner.num_gpus:
        return None
    r, lrn = cfg.rollout, cfg.learner
    want = r.num_actors * r.torch_threads + lrn.num_actors * lrn.torch_threads
    if want <= cores:
        return None
    return (f"trainer.max_staleness={cfg.trainer.max_staleness}: generation and updates run at once, with "
            f"{want} torch threads ({r.num_actors} x rollout.torch_threads={r.torch_threads} + {lrn.num_actors} x "
            f"learner.torch_threads={lrn.torch_threads}) on {cores} cores; oversubscribed, the pipeline is slower "
            "than the synchronous loop. Give each side its share, e.g. rollout.torch_threads=1 learner.torch_threads=1")


def bind_loopback() -> None:
    """Make a local Ray cluster bind 127.0.0.1 only: GCS, raylet, every worker's gRPC port, the
    dashboard and its agents. Ray's own switch for this (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, its
    default on macOS and Windows) makes the node IP the loopback; it is read when Ray is imported, so
    the driver's copy is set here too, and Ray's processes inherit the variable."""
    from ray._private import ray_constants

    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def metrics_port() -> int | None:
    """The port this node's Ray metrics agent serves Prometheus metrics on."""
    node = ray._private.worker._global_node
    return getattr(node, "metrics_export_port", None) if node is not None else None


@ray.remote(num_cpus=0)
def _rendezvous(n: int = 2) -> tuple[str, list[int], str]:
    """Runs on rank 0's node: its IP, `n` distinct free ports and its temp dir (torch.distributed
    stores: the learners' DeepSpeed group, the weight-sync group)."""
    import tempfile

    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("", 0))
        return ray.util.get_node_ip_address(), [s.getsockname()[1] for s in socks], tempfile.gettempdir()
    finally:
        for s in socks:
            s.close()


def one_node(pg) -> bool:
    """Whether every bundle of the placement group sits on one node (then no store needs a socket)."""
    from ray.util.placement_group import placement_group_table

    return len(set(placement_group_table(pg)["bundles_to_node_id"].values())) <= 1


def store_address(local: bool, ip: str, port: int, tmp: str, tag: str) -> str:
    """A torch.distributed store for members on one node (`file://`: no listening socket) or on
    several (`tcp://`: a TCPStore on learner rank 0's node, which torch binds on every interface)."""
    import uuid

    if local:
        return f"file://{Path(tmp) / f'parallax-{tag}-{uuid.uuid4().hex[:12]}.store'}"
    return f"tcp://{ip}:{port}"


@dataclass
class Groups:
    rollout: RolloutGroup
    reward: RewardActorGroup
    learner: LearnerGroup
    sync: WeightSync
    placement_group: object
    # The model's files in the object store (cluster.shared_fs=false): held here, so a restarted
    # actor can build from them again.
    model_files: object = None

    def placement(self, timeout_s: float = 30.0) -> dict[str, dict[str, str]]:
        """Where each actor runs: `rollout_0` -> its node id and IP, the model path it loaded, and the
        directory its code was imported from (a Ray job's working directory, an image's copy). An
        actor that is restarting or lost as the run ends (a kill between the last step and the summary)
        is reported as `{"unavailable": why}`, all within one `timeout_s`: the run's work is done and
        saved, and a summary must not fail it."""
        def where(worker) -> dict[str, str]:
            ctx = ray.get_runtime_context()
            # the package its class came from (a class pickled by value has none: "")
            file = getattr(sys.modules.get(type(worker).__module__), "__file__", None)
            return {"node": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(),
                    "model_path": str(getattr(worker, "model_path", "")),
                    "code": str(Path(file).resolve().parents[1]) if file else ""}

        refs = {f"{g.role}_{i}": a.__ray_call__.remote(where) for g in (self.rollout, self.reward, self.learner)
                for i, a in enumerate(g.actors)}
        if not refs:
            return {}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)  # one deadline
        out = {}
        for name, ref in refs.items():
            try:
                out[name] = (ray.get(ref, timeout=0) if ref in ready
                             else {"unavailable": f"no answer in {timeout_s:.0f} s"})
            except ray.exceptions.RayActorError as e:
                out[name] = {"unavailable": summary(e)}
        return out

    def shutdown(self, timeout_s: float = 60.0) -> None:
        """Free the run's actors and placement group (sweep jobs share one Ray cluster). The engines stop
        first, for at most `timeout_s` (a lost or stuck one is killed as it is): a process of an engine's own
        killed with its actor leaves its shared memory behind."""
        from ray.util import remove_placement_group

        refs = self.rollout.async_call("close")
        ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        for group in (self.rollout, self.reward, self.learner):
            for actor in group.actors:
                ray.kill(actor)
        remove_placement_group(self.placement_group)


def bundle_specs(cfg: ParallaxConfig) -> list[BundleSpec]:
    """The run's bundles, role by role. Colocated engines (`rollout.colocate`) have none of their own:
    engine i sits on learner rank i's bundle, which holds both actors' CPUs and their one GPU."""
    r, w, lcfg = cfg.rollout, cfg.reward, cfg.learner
    rollout = [] if r.colocate else [BundleSpec("rollout", r.num_actors, r.num_cpus, r.num_gpus, r.resources)]
    return rollout + [
        BundleSpec("reward", w.num_actors, w.num_cpus, 0.0, w.resources),
        BundleSpec("learner", lcfg.num_actors, lcfg.num_cpus + (r.num_cpus if r.colocate else 0.0), lcfg.num_gpus,
                   lcfg.resources),
    ]


def build_groups(cfg: ParallaxConfig, model_path: str, run_name: str) -> Groups:
    """Reserve one placement group and create the rollout, reward and learner actors on it; colocated
    engines (`rollout.colocate`) only once every learner is ready on the GPU they share."""
    from actors.learner import LearnerWorker
    from actors.reward_worker import RewardWorker
    from actors.rollout import RolloutWorker
    from parallax.models.tokenizer import load_tokenizer

    r, w, lcfg = cfg.rollout, cfg.reward, cfg.learner
    # the reward's lengths and critical paths (PA-GRPO's T) count the model's tokens, a decode step each:
    # in the format's words a tag is 1 and `17*8=136` is 1, so a fork that saves tokens can look longer.
    # A fast tokenizer goes as its Rust core (`tokenizers.Tokenizer`, the same ids and offsets): a reward
    # actor then never imports transformers and torch (~2.8 s of CPU at every start and restart)
    tokenizer = load_tokenizer(model_path)
    tokenizer = tokenizer.backend_tokenizer if getattr(tokenizer, "is_fast", False) else tokenizer
    pg, off = reserve(bundle_specs(cfg), cfg.cluster.placement_strategy, name=f"parallax/{run_name}",
                      timeout_s=cfg.cluster.placement_timeout_s)
    # colocated: learner rank i and engine i take half of their bundle's GPU each, so Ray gives both its id
    share = 0.5 if r.colocate else 1.0
    off.setdefault("rollout", off["learner"])
    prefix = f"parallax/{run_name}"
    on_rank0 = _rendezvous.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=off["learner"]))
    local = one_node(pg)
    wait_s = cfg.cluster.start_timeout_s

    def rendezvous() -> tuple:  # bounded: a node that never runs the task is named, not waited on forever
        try:
            return ray.get(on_rank0.remote(), timeout=wait_s)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(f"the rendezvous task on learner rank 0's bundle did not run within {wait_s:.0f} s "
                               "(cluster.start_timeout_s): the node that holds it is busy or lost") from None

    addr, (port, _), tmp = rendezvous()

    def sync_store() -> str:  # a fresh store each time the weight-sync group forms (after a lost engine)
        ip, (_, sync_port), tmp = rendezvous()
        return store_address(local, ip, sync_port, tmp, f"{run_name}-sync")

    sync = make_weight_sync(r.weight_sync, sync_store)  # the members decide gloo or NCCL when it forms
    init_method = store_address(local, addr, port, tmp, f"{run_name}-learners")
    # no shared filesystem: the model's files go into the object store once, each node writes its copy
    files = {} if cfg.cluster.shared_fs else {"model_files": ray.put(pack_model(model_path))}
    learner = LearnerGroup(
        "learner", LearnerWorker, lcfg.num_actors, pg, off["learner"], lcfg.num_cpus, lcfg.num_gpus * share,
        lambda i: {"cfg": lcfg, "model_path": model_path, "dtype": cfg.model.dtype, "rank": i,
                       "world_size": lcfg.num_actors, "init_method": init_method, "master_port": port,
                       "seed": cfg.trainer.seed, **files},
        prefix)
    timeout = cfg.cluster.start_timeout_s
    learner_hint = (f"model load, DeepSpeed init; a torch extension build lock left by a killed run waits up to "
                    f"300 s before it is cleared ({extensions_dir()}/*/*/lock)")
    if r.colocate and lcfg.num_gpus:
        # the learners hold their share of each GPU before an engine is built there: vLLM sizes its KV cache
        # from the memory it finds free while it profiles, and DeepSpeed moving a model onto the same GPU
        # meanwhile makes that a moving figure (or fails vLLM's profiling check). CPU-only runs start both at once
        learner.wait_ready(timeout, learner_hint)
    rollout = RolloutGroup(
        "rollout", RolloutWorker, r.num_actors, pg, off["rollout"], r.num_cpus, r.num_gpus * share,
        lambda i: {"cfg": r, "model_path": model_path, "dtype": cfg.model.dtype,
                       "fmt": cfg.data.spec, **files}, prefix, max_restarts=cfg.cluster.max_restarts)
    reward = RewardActorGroup(
        "reward", RewardWorker, w.num_actors, pg, off["reward"], w.num_cpus, 0.0,
        lambda i: {"reward": w.name, "params": dict(w.params), "workers": 1, "timeout_s": w.timeout_s,
                   "tokenizer": tokenizer}, prefix,
        max_restarts=cfg.cluster.max_restarts)
    # every constructor returned, or an error naming the actor: the first call never waits on a dead one
    rollout.wait_ready(timeout, "model load and engine start-up (vLLM: KV cache allocation, warm-up)")
    reward.wait_ready(timeout)
    learner.wait_ready(timeout, learner_hint)
    return Groups(rollout, reward, learner, sync, pg, files.get("model_files"))
