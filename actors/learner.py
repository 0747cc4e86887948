"""Learner worker: a DeepSpeed ZeRO engine that scores trajectories and applies GRPO / SFT updates.

One worker per data-parallel rank. On CPU the process group is gloo; on GPU, NCCL. Each
rank takes an interleaved shard of the batch; losses are normalised by global token counts
(see actors/algo.py), so the update does not depend on the world size or on the
micro-batch split. Gradient accumulation is driven explicitly: every micro-batch calls
`backward`, the last one marks the accumulation boundary and `step()` applies the update.
SFT micro-batches may be packed (`learner.sft_packing`): several examples per row, each attending
only to itself (`parallax.layouts.packing.pack_sft_batch`); the token-sum loss is the same.
With `learner.lora.r > 0` the model trains LoRA adapters and the tag rows (actors/lora.py); every
export (state_dict, save_pretrained, the weight sync) is still the plain model, merged.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from contextlib import contextmanager
from typing import Any

import torch

from actors import algo, lora
from actors.devices import native_bf16
from actors.export import WeightExport
from actors.files import download_tree, tree_pieces, upload_tree, write_tree
from actors.scoring import score_logprobs, sft_loss, sft_micro_batches
from parallax.contract.batch import SFTBatch, TrainBatch
from parallax.contract.learner_config import LearnerConfig


def ds_config(cfg: LearnerConfig, dtype: str) -> dict[str, Any]:
    """The DeepSpeed config for a learner config (accumulation is managed by the worker)."""
    return {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": cfg.grad_clip,
        "zero_optimization": {"stage": cfg.zero_stage},
        "zero_allow_untested_optimizer": True,  # a plain torch AdamW: no fused-kernel build on CPU
        "bf16": {"enabled": dtype == "bfloat16"},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def attention_kernel(choice: str, cuda: bool) -> str:
    """`learner.attn_implementation` as transformers names it: auto is FlexAttention on CUDA (where this
    torch has it) and the block-sparse SDPA elsewhere (parallax/layouts/masks.py builds the mask either takes).
    FlexAttention on a CPU learner is refused: torch runs its forward there, but not its backward."""
    if choice == "flex_attention" and not cuda:
        raise ValueError("learner.attn_implementation=flex_attention needs a CUDA learner: FlexAttention has no "
                         "backward on CPU; use auto or sdpa (the block-sparse SDPA, equal within 1e-5)")
    if choice != "auto":
        return choice
    from importlib.util import find_spec

    return "flex_attention" if cuda and find_spec("torch.nn.attention.flex_attention") else "sdpa"


def tag_ids(model_path: str) -> list[int]:
    """The ids of the format tags that `model_path`'s tokenizer holds as one token each."""
    from transformers import AutoTokenizer

    from parallax.formats import ALL_SPECIAL_TOKENS
    from parallax.models.prepare import tag_ids as ids_of

    return ids_of(AutoTokenizer.from_pretrained(model_path), ALL_SPECIAL_TOKENS)


class LearnerWorker(WeightExport):
    """Plain class; `actors/group.py` applies ray.remote. Rank 0 serves weights and checkpoints."""

    def __init__(self, cfg: LearnerConfig, model_path: str, dtype: str, rank: int, world_size: int,
                 init_method: str, master_port: int, seed: int = 0, model_files: dict | None = None):
        import time

        from parallax.weightsync.sync_group import loopback_only

        started = time.time()
        # init_method: file:// when every rank is on one node (no store socket; gloo on loopback),
        # tcp://ip:port across nodes. MASTER_* also name DeepSpeed's shared-memory segments.
        local = loopback_only(init_method)
        master = "127.0.0.1" if local else init_method.removeprefix("tcp://").rpartition(":")[0]
        os.environ.update(MASTER_ADDR=master, MASTER_PORT=str(master_port), RANK=str(rank),
                          LOCAL_RANK="0", WORLD_SIZE=str(world_size))
        if local:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        torch.set_num_threads(cfg.torch_threads)
        torch.manual_seed(seed)
        from actors.locks import clear_stale_build_locks

        clear_stale_build_locks()  # else a build killed earlier makes DeepSpeed's op build wait forever
        if model_files is not None:  # no shared filesystem: this node's copy of the model (actors/files.py)
            from actors.files import local_model

            model_path = local_model(model_files)
        self.model_path = model_path
        # DeepSpeed's accelerator from what this actor sees (its CUDA_VISIBLE_DEVICES), never from the
        # driver: a CPU-only head node made every GPU learner build its engine on the CPU
        os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
        import deepspeed
        from transformers import AutoModelForCausalLM

        backend = "nccl" if torch.cuda.is_available() else "gloo"
        deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False, init_method=init_method,
                                   rank=rank, world_size=world_size)
        self.cfg, self.rank, self.world = cfg, rank, world_size
        attn = attention_kernel(cfg.attn_implementation, torch.cuda.is_available())
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype), attn_implementation=attn)
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        params = model.parameters()
        if cfg.lora.r > 0:  # adapters and the tag rows train, the base is frozen (actors/lora.py)
            if cfg.gradient_checkpointing:  # the frozen embedding's output must carry a gradient into the blocks
                model.enable_input_require_grads()
            model = lora.wrap(model, cfg.lora, tag_ids(model_path))
            params = lora.param_groups(model)
        self.ref_model = None  # under LoRA the reference is the base itself, its adapters switched off
        if cfg.kl_coef > 0 and cfg.lora.r == 0:
            self.ref_model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype),
                                                                  attn_implementation=attn).eval()
        kernel = {"fused": True} if cfg.adam_impl == "fused" else {"foreach": True}
        opt = torch.optim.AdamW(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.adam_eps,
                                weight_decay=cfg.weight_decay, **kernel)
        self.engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=ds_config(cfg, dtype))
        if world_size == 1 and cfg.zero_stage == 0:
            # one rank, nothing partitioned: DeepSpeed's all-reduce would copy every gradient into a flat
            # buffer and back for nothing (0.18 s of a 2.4 s SmolLM2 GRPO step); the gradients are the same
            self.engine.enable_backward_allreduce = False
        self.device = self.engine.device
        # under LoRA, what every export reads: the merged weights (of the module as it is on its device)
        self.lora = lora.MergedWeights(self.engine.module) if cfg.lora.r > 0 else None
        if self.ref_model is not None:  # scored beside the policy (kl_coef > 0): on its device
            self.ref_model.to(self.device)
        self.tag_rows = None  # the format tags' embedding rows, stepped at sft_tag_lr_mult x lr in SFT
        if cfg.sft_tag_lr_mult != 1.0 and cfg.lora.r == 0:  # LoRA: the rows' own param group (_set_lr)
            from actors.row_lr import RowLR

            mats = [model.get_input_embeddings().weight]
            if model.get_output_embeddings() is not None:
                mats.append(model.get_output_embeddings().weight)
            self.tag_rows = RowLR(mats, tag_ids(model_path), cfg.sft_tag_lr_mult)
        # when this constructor began and returned, the model on its device (wall clock): the start-up order
        self.constructed = (started, time.time())

    # ---- scoring ----------------------------------------------------------------
    def _autocast(self):
        """The forward's precision (`learner.autocast`): bf16 autocast, or model.dtype throughout."""
        device = torch.device(self.device).type
        on = self.cfg.autocast == "bf16" or (self.cfg.autocast == "auto" and native_bf16(device))
        return torch.autocast(device, dtype=torch.bfloat16, enabled=on)

    def _logprobs(self, model, mb: TrainBatch, temperature: float, entropy: bool = False):
        """[b, L] logprobs of a micro-batch's rows, logits built only where its response is (0 before);
        with `entropy`, (logprobs, entropy)."""
        with self._autocast():
            return score_logprobs(model, mb.input_ids, mb.attention_mask, temperature, mb.structure(), self.device,
                                  scored=mb.response_mask, entropy=entropy)

    @torch.no_grad()
    def _ref_logprobs(self, mb: TrainBatch, temperature: float) -> torch.Tensor:
        """[b, L] logprobs under the reference (initial) policy: the separate copy, or under LoRA the base
        model with its adapters and trained tag rows switched off."""
        if self.ref_model is not None:
            return self._logprobs(self.ref_model, mb, temperature)
        with self.engine.module.disable_adapter():
            return self._logprobs(self.engine.module, mb, temperature)

    @torch.no_grad()
    def compute_logprobs(self, batch: TrainBatch, temperature: float = 1.0) -> torch.Tensor:
        """Per-token logprobs of this rank's rows under the current policy: [B, L] (0 off-response)."""
        self.engine.eval()
        out = [self._logprobs(self.engine, mb, temperature).cpu()
               for mb in batch.split(self.cfg.micro_batch_size)]
        return torch.cat(out) * batch.response_mask

    # ---- updates ----------------------------------------------------------------
    def _backward_step(self, loss: torch.Tensor, boundary: bool, rows=None) -> float:
        """Backward one micro-batch; at the accumulation boundary apply the update (`rows`, a RowLR: its
        rows stepped at its multiple of lr). Returns the global gradient norm before clipping at the
        boundary (nan elsewhere)."""
        self.engine.set_gradient_accumulation_boundary(boundary)
        self.engine.backward(loss, scale_wrt_gas=False)
        own = self._grad_norm() if boundary and self.cfg.zero_stage == 0 else None
        rows = rows if boundary else None
        if rows is not None:
            rows.before()
        self.engine.step()
        if rows is not None:
            rows.after()
        if not boundary:
            return float("nan")
        ds = self.engine.get_global_grad_norm()  # the ZeRO optimizers' norm; None at stage 0
        norm = ds if ds is not None else own
        return float("nan") if norm is None else float(norm)

    def _grad_norm(self) -> float:
        """L2 norm of the (already all-reduced) gradients, which DeepSpeed does not report at ZeRO-0."""
        grads = [p.grad.detach().float().norm() for p in self.engine.module.parameters() if p.grad is not None]
        return float(torch.linalg.vector_norm(torch.stack(grads))) if grads else 0.0

    def _set_lr(self, lr: float, weight_decay: float, tag_mult: float = 1.0) -> None:
        """Every param group's lr and decay; LoRA's tag-row group (actors/lora.py) at `tag_mult` x lr."""
        for group in self.engine.optimizer.param_groups:
            group["lr"] = lr * (tag_mult if group.get(lora.TAG_ROWS) else 1.0)
            group["weight_decay"] = weight_decay

    def grpo_step(self, batch: TrainBatch, global_tokens: int, global_seqs: int, lr: float,
                  temperature: float = 1.0, weight_decay: float | None = None) -> dict[str, float]:
        """One GRPO update on this rank's shard (all ranks call it together). `timing/learner_update`: its own
        seconds, in this process (the driver's `timing/update` adds the call, the batch's trip and the wait)."""
        import time

        started = time.perf_counter()
        cfg = self.cfg
        self.engine.train()
        self._set_lr(lr, cfg.weight_decay if weight_decay is None else weight_decay)
        norm = {"global_tokens": global_tokens, "global_seqs": global_seqs, "dp_size": self.world}
        stats: dict[str, float] = {}
        # The behaviour policy as the learner scores it, before any update (recompute_old_logprobs): with one
        # epoch of one mini-batch the update's own forward is that score (`on_policy`), else a pass of its own.
        on_policy = cfg.recompute_old_logprobs and cfg.ppo_epochs == 1 and cfg.ppo_mini_batches == 1
        if cfg.recompute_old_logprobs and not on_policy:
            engine = batch.old_logprobs
            old = self.compute_logprobs(batch, temperature)  # [B, L], 0 off-response
            weights, sums = self._behaviour(old, engine, batch)
            stats |= _token_means(sums)
            batch = dataclasses.replace(batch, old_logprobs=old, is_weights=weights)
            self.engine.train()
        # PPO mini-batches: each piece is one optimizer step, normalised by its own global counts
        pieces = batch.pieces(cfg.ppo_mini_batches)
        updates = cfg.ppo_epochs * len(pieces)
        for _ in range(cfg.ppo_epochs):
            for piece in pieces:
                piece_norm = norm if len(pieces) == 1 else self._piece_norm(piece)
                grad_norm = self._update(piece, piece_norm, temperature, stats, updates, on_policy)
        stats["actor/grad_norm"] = grad_norm
        stats["actor/lr"] = lr
        stats["timing/learner_update"] = time.perf_counter() - started
        return stats

    def _behaviour(self, learner: torch.Tensor, engine: torch.Tensor, batch: TrainBatch
                   ) -> tuple[torch.Tensor | None, dict[str, float]]:
        """The learner's score of the behaviour samples against the engine's (CPU tensors): the TIS / MIS
        weights (`learner.rollout_is`; None when off), and sums over `batch`'s response tokens of |engine -
        learner| and, under rollout_is, the raw IS ratio and the tokens its cap changed, with `tokens` counting
        them (`_token_means` divides)."""
        cfg, mask = self.cfg, batch.response_mask.bool()
        tokens = float(mask.sum())
        sums = {"actor/engine_logprob_gap": float((learner[mask] - engine[mask]).abs().sum()), "tokens": tokens}
        if cfg.rollout_is == "off":
            return None, sums
        weights, m = algo.rollout_is_weights(learner, engine, batch.response_mask, level=cfg.rollout_is,
                                             mode=cfg.rollout_is_mode, cap=cfg.rollout_is_cap)
        return weights, sums | {k: v * tokens for k, v in m.items()}  # token means -> sums

    def _update(self, batch: TrainBatch, norm: dict, temperature: float, stats: dict, updates: int,
                on_policy: bool = False) -> float:
        """One optimizer step over `batch` (its micro-batches accumulated); adds the stats, averaged over
        the `updates` of this GRPO step; returns the gradient norm. `on_policy`: the micro-batches' own
        forward is the behaviour policy's score (old logprobs = these logprobs, detached: the ratio is 1)."""
        cfg = self.cfg
        micro = batch.split(cfg.micro_batch_size)
        behaviour: dict[str, float] = {}
        for i, mb in enumerate(micro):
            mask = mb.response_mask.to(self.device)
            logp, ent = self._logprobs(self.engine, mb, temperature, entropy=True)
            old, is_weights = mb.old_logprobs.to(self.device), mb.is_weights
            if on_policy:  # the behaviour policy's score is this forward's, before the step
                old = logp.detach() * mask
                is_weights, sums = self._behaviour(old.cpu(), mb.old_logprobs, mb)
                for k, v in sums.items():
                    behaviour[k] = behaviour.get(k, 0.0) + v
            # the policy's entropy over the response tokens (verl's actor/entropy), token mean of this micro-batch
            stats["actor/entropy"] = stats.get("actor/entropy", 0.0) + float(
                (ent * mask).sum() / mask.sum().clamp(min=1)) / len(micro) / updates
            loss, m = algo.policy_loss(
                logp, old, mb.advantages.to(self.device), mask,
                clip_low=cfg.clip_ratio_low, clip_high=cfg.clip_ratio_high, agg=cfg.loss_agg_mode, **norm,
                is_weights=None if is_weights is None else is_weights.to(self.device))
            if cfg.kl_coef > 0:
                ref = self._ref_logprobs(mb, temperature)
                kl = algo.kl_loss(logp, ref, mask, kind=cfg.kl_type, agg=cfg.loss_agg_mode, **norm)
                loss = loss + cfg.kl_coef * kl
                stats["actor/kl"] = stats.get("actor/kl", 0.0) + float(kl) / updates
            grad_norm = self._backward_step(loss, boundary=i == len(micro) - 1)
            stats["actor/pg_loss"] = stats.get("actor/pg_loss", 0.0) + float(loss.detach()) / updates
            for k, v in m.items():
                stats[k] = stats.get(k, 0.0) + float(v) / len(micro) / updates
        if behaviour:
            stats |= _token_means(behaviour)
        return grad_norm

    def _piece_norm(self, piece: TrainBatch) -> dict:
        """A mini-batch's global token and sequence counts (summed over the learner ranks)."""
        # on the group's device: NCCL refuses a CPU tensor (gloo takes either)
        counts = torch.tensor([float(piece.response_mask.sum()), float(len(piece))], device=self.device)
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(counts)
        return {"global_tokens": int(counts[0]), "global_seqs": int(counts[1]), "dp_size": self.world}

    def sft_step(self, batch: SFTBatch, global_tokens: int, lr: float,
                 weight_decay: float | None = None) -> dict[str, float]:
        """One teacher-forced update: token-mean cross-entropy over completion tokens."""
        self.engine.train()
        self._set_lr(lr, self.cfg.sft_weight_decay if weight_decay is None else weight_decay,
                     tag_mult=self.cfg.sft_tag_lr_mult)
        total, cells, real = 0.0, 0, 0
        micro = sft_micro_batches(batch, self.cfg)
        for i, mb in enumerate(micro):
            with self._autocast():
                loss = sft_loss(self.engine, mb, global_tokens, self.world, self.device)
            grad_norm = self._backward_step(loss, boundary=i == len(micro) - 1, rows=self.tag_rows)
            total += float(loss.detach()) / self.world
            cells, real = cells + mb.attention_mask.numel(), real + int(mb.attention_mask.sum())
        return {"sft/loss": total, "sft/lr": lr, "sft/grad_norm": grad_norm,
                "sft/pad_frac": 1.0 - real / max(1, cells)}  # share of scored cells that are padding

    def reset_optimizer(self) -> None:
        """Forget Adam moments (at a stage switch: SFT momentum must not leak into RL updates)."""
        opt = self.engine.optimizer
        while not isinstance(opt, torch.optim.Optimizer) and hasattr(opt, "optimizer"):
            opt = opt.optimizer  # unwrap DeepSpeed's ZeRO wrappers down to the torch AdamW
        opt.state.clear()

    def devices(self, heap: bool = False) -> dict:
        """The devices Ray gave this actor, as it sees them (`actors.devices.seen`)."""
        from actors.devices import seen

        return seen(heap)

    def release_memory(self) -> dict[str, float]:
        """This rank's cached CUDA memory back to its GPU, before a colocated engine wakes there."""
        from actors.devices import release_cached_memory

        return release_cached_memory()

    def pid(self) -> int:
        return os.getpid()

    def save_pretrained(self, path: str) -> None:
        """Hugging Face checkpoint (rank 0 writes; every rank must call it under ZeRO-3)."""
        sd = self.state_dict()
        if self.rank == 0:  # under LoRA the plain model peft wraps, given the merged weights
            module = self.engine.module
            (module.get_base_model() if self.lora is not None else module).save_pretrained(path, state_dict=sd)

    def save_training_state(self, path: str) -> None:
        """DeepSpeed checkpoint (optimizer + scheduler + model shards); collective."""
        self.engine.save_checkpoint(path, tag="state")

    @contextmanager
    def _saved_here(self):
        """This rank's share of a checkpoint in a temporary directory on its node (collective): rank 0's `model/`,
        every rank's `training_state/`."""
        with tempfile.TemporaryDirectory(prefix="parallax-ckpt-") as d:
            self.save_pretrained(f"{d}/model")
            self.save_training_state(f"{d}/training_state")
            yield d

    def save_pieces(self, piece_bytes: int):
        """This rank's share streamed to the driver (`cluster.shared_fs=false`) as `actors.files.tree_pieces`
        pieces (a Ray streaming generator: the driver stores one piece at a time)."""
        with self._saved_here() as d:
            yield from tree_pieces(d, piece_bytes)

    def save_to(self, uri: str) -> dict[str, dict]:
        """This rank's share uploaded by the rank itself to the fsspec URI `uri` (`trainer.checkpoint_dir` a URI):
        sizes and sha256 for the manifest the driver writes; nothing passes through the driver."""
        with self._saved_here() as d:
            return upload_tree(d, uri)

    def load_training_state_files(self, files: dict[str, bytes]) -> None:
        """`load_training_state` from files the driver read out of its checkpoint."""
        with tempfile.TemporaryDirectory(prefix="parallax-ckpt-") as d:
            write_tree(d, files)
            self.load_training_state(f"{d}/training_state")

    def load_training_state_from(self, uri: str, files: dict[str, dict]) -> None:
        """`load_training_state` from a checkpoint at an fsspec URI: this rank fetches the manifest's
        `training_state/` files (`files`) itself, each checked against its sha256."""
        with tempfile.TemporaryDirectory(prefix="parallax-ckpt-") as d:
            download_tree(uri, files, d)
            self.load_training_state(f"{d}/training_state")

    def load_training_state(self, path: str) -> None:
        """Restore weights and optimizer written by `save_training_state`; collective."""
        load_path, _ = self.engine.load_checkpoint(path, tag="state", load_optimizer_states=True)
        if load_path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint under {path}")


def _token_means(sums: dict[str, float]) -> dict[str, float]:
    """`LearnerWorker._behaviour`'s sums over response tokens as means (the IS ratio's mean is 1 over none)."""
    tokens = sums.pop("tokens")
    if not tokens:
        return {k: 1.0 if k == "actor/is_ratio" else 0.0 for k in sums}
    return {k: v / tokens for k, v in sums.items()}
