"""The learner's config schemas (`learner.*`): the DeepSpeed learner actors' optimisation, precision,
placement and batching, and LoRA (`learner.lora.*`). Registered with the rest in parallax/contract/config.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from parallax.contract.errors import _check, _check_resources
from parallax.contract.ranges import check_section


@dataclass
class LoraConfig:
    """`learner.lora.*`: train low-rank adapters (peft) on a frozen base instead of every weight
    (actors/lora.py). Whatever leaves the learner (weight sync, `model/` of a checkpoint) is the merged
    model under the base model's names, so the engines and evaluation never see an adapter."""

    # Adapter rank; 0: off (full fine-tuning).
    r: int = 0
    # peft's lora_alpha: the adapter's update B @ A is scaled by alpha / r.
    alpha: float = 16.0
    dropout: float = 0.0
    # Modules that get adapters, by name: the attention and MLP projections of the Llama / Qwen3 family
    # (SmolLM2, Qwen3), where LoRA on every projection matches full fine-tuning best (the QLoRA paper).
    # Named rather than peft's "all-linear" (also accepted, alone), which would adapt any other Linear a
    # model has, such as a mixture-of-experts router.
    target_modules: list[str] = field(default_factory=lambda: [
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    # Also train the format tags' embedding rows (peft's trainable tokens; the output rows too: tied
    # with them, or trained beside them when untied). The tags are new mean-initialised rows
    # (parallax/models/prepare.py), all alike: frozen, SFT could not teach the model to tell them apart.
    # learner.sft_tag_lr_mult then steps these rows at mult x the SFT LR: they are an optimizer
    # parameter group of their own (RL steps take them at 1 x lr).
    train_tags: bool = True

    def __post_init__(self) -> None:
        check_section(self, "learner.lora")
        names = list(self.target_modules)
        _check(bool(names) and all(isinstance(n, str) and n for n in names), "learner.lora.target_modules",
               f"must be a non-empty list of module names, got {names}")
        _check("all-linear" not in names or names == ["all-linear"], "learner.lora.target_modules",
               f"all-linear stands alone (it names every Linear but the output layer), got {names}")


@dataclass
class LearnerConfig:
    # Data-parallel learner actors (DeepSpeed world size).
    num_actors: int = 1
    zero_stage: int = 1
    lr: float = 1e-4
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    # torch AdamW's kernel: foreach (grouped ops over all tensors; bit-equal to the per-tensor loop torch
    # takes by default on CPU, ~20% faster) | fused (one kernel per tensor, CPU or CUDA: ~4x faster on
    # these cores, 0.09 against 0.34 s for SmolLM2's 135M weights, but rounded differently, so a run's
    # numbers move in their last bits). The real-model experiments and the GPU learner take fused.
    adam_impl: str = "foreach"
    grad_clip: float = 1.0
    micro_batch_size: int = 32
    # GRPO clip range, separate low/high (DAPO/Parason use 0.2 / 0.28).
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    # token-mean | seq-mean-token-sum | seq-mean-token-mean (verl's agg_loss modes).
    loss_agg_mode: str = "token-mean"
    # KL to the initial (reference) policy; 0 disables it and skips the reference model.
    kl_coef: float = 0.0
    kl_type: str = "low_var_kl"
    # Divide the GRPO advantage by the group std (Dr.GRPO sets false).
    norm_adv_by_std: bool = True
    ppo_epochs: int = 1
    # Score the batch with the learner's weights before the update and use that as the PPO ratio's
    # denominator instead of the engine's logprobs (verl's recompute of old_log_prob). The engine's
    # then only feed the logged gap `actor/engine_logprob_gap`. Needed where they differ: vLLM in
    # bf16 against DeepSpeed, and vLLM under structured outputs, whose logprobs are after the grammar
    # mask. On CPU (hf engine, fp32) the two agree to ~1e-6. With one PPO epoch and one mini-batch the
    # batch is scored by the update's own forward (the weights have not moved yet: ratio 1, as verl's
    # on-policy path does); otherwise by one no-grad forward before the update.
    recompute_old_logprobs: bool = False
    # The forward passes under torch.autocast at bf16 (off | bf16 | auto); weights, gradients, the
    # optimizer and the log-softmax stay in model.dtype (fp32 on CPU). auto: bf16 where the device
    # computes it natively (a CUDA GPU with bf16, a CPU with AVX512_BF16 or AMX), off elsewhere: on an
    # AVX2-only CPU a bf16 matmul is ~70x slower than fp32 (bench/bench_learner_speed.py). The engine
    # still samples in model.dtype, so set recompute_old_logprobs=true for a first ratio of exactly 1.
    autocast: str = "off"
    # The attention kernel the learner scores structured rows with (parallax/layouts/masks.py), from the same
    # block structure either way: flex_attention (a FlexAttention BlockMask: only the visible 128x128
    # blocks are computed and stored, the GPU kernel), sdpa (the block-sparse SDPA: query chunks against
    # the key columns they may see, the CPU path), or auto: flex_attention on CUDA, sdpa elsewhere
    # (torch runs FlexAttention's forward on CPU but has no backward there, so a CPU learner refuses
    # flex_attention). The two give the same logprobs within 1e-5 (tests/layouts, on CPU).
    attn_implementation: str = "auto"
    # Off-policy correction of stale or engine-skewed samples (needs recompute_old_logprobs): the loss
    # is weighted by pi_learner / pi_engine per token or per sequence (verl's rollout correction),
    # truncated at rollout_is_cap (TIS) or masked outside [1/cap, cap] (MIS). off: none.
    rollout_is: str = "off"
    rollout_is_mode: str = "truncate"
    rollout_is_cap: float = 2.0
    # Optimizer steps per rollout batch and epoch: the batch in this many mini-batches (PPO).
    ppo_mini_batches: int = 1
    # How the learner lays out a trajectory (parallax/layouts/): causal (one row, causal attention: the Seen
    # variant) | structured (one row; each branch sees the prefix and itself, the join sees all
    # branches, positions as the engine used them: the Unseen variant) | threadweaver (one causal
    # row per engine request, the advantage broadcast; approximate for the KV executor's joins).
    # Which are exact for which executor: parallax.contract.batch.ExecutionRecord.
    layout: str = "causal"
    gradient_checkpointing: bool = False
    num_cpus: float = 0.5
    num_gpus: float = 0.0
    # Custom Ray resources each actor's bundle asks for, to place the role on the nodes that offer
    # them (`ray start --resources='{"rollout_node": 1}'`); empty: any node with the CPUs/GPUs.
    resources: dict[str, float] = field(default_factory=dict)
    torch_threads: int = 2
    # Cold-start SFT optimiser settings (the paper: LR 1e-5, wd 0.01, warm-up 0.1, cosine).
    sft_lr: float = 3e-3
    sft_weight_decay: float = 0.01
    sft_warmup_ratio: float = 0.1
    # The format tags' embedding rows step at this multiple of the SFT LR: a pretrained model's new tag
    # rows barely move at its LR (actors/row_lr.py, docs/real_model.md). ZeRO stage 0-2 only. Under LoRA
    # the tag rows are peft's trainable tokens, an optimizer group at mult x lr in SFT (lora.train_tags).
    sft_tag_lr_mult: float = 1.0
    # SFT packing: each micro-batch's examples (still micro_batch_size of them) are concatenated
    # into as few rows of at most sft_pack_length tokens as first-fit decreasing finds, filled
    # evenly; each example attends only to itself with its own positions (segment masks,
    # parallax/layouts/masks.py: attention sdpa, eager or flex_attention). Same loss, less padding. An
    # example longer than sft_pack_length gets a row of its own (never truncated).
    sft_packing: bool = False
    sft_pack_length: int = 512
    # LoRA adapters instead of full fine-tuning (off by default): see LoraConfig.
    lora: LoraConfig = field(default_factory=LoraConfig)

    def __post_init__(self) -> None:
        check_section(self, "learner")
        _check_resources("learner.resources", self.resources)
        _check(self.loss_agg_mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"),
               "learner.loss_agg_mode", f"unknown mode {self.loss_agg_mode!r}")
        _check(self.rollout_is in ("off", "token", "sequence"), "learner.rollout_is",
               f"must be off, token or sequence, got {self.rollout_is!r}")
        _check(self.rollout_is_mode in ("truncate", "mask"), "learner.rollout_is_mode",
               f"must be truncate or mask, got {self.rollout_is_mode!r}")
        _check(self.rollout_is == "off" or self.recompute_old_logprobs, "learner.rollout_is",
               "needs learner.recompute_old_logprobs=true (the learner's logprobs of the behaviour samples)")
        _check(self.adam_impl in ("foreach", "fused"), "learner.adam_impl",
               f"must be foreach or fused, got {self.adam_impl!r}")
        _check(self.autocast in ("off", "bf16", "auto"), "learner.autocast",
               f"must be off, bf16 or auto, got {self.autocast!r}")
        _check(self.attn_implementation in ("auto", "sdpa", "flex_attention"), "learner.attn_implementation",
               f"must be auto, sdpa or flex_attention, got {self.attn_implementation!r}")
        _check(self.layout in ("causal", "structured", "threadweaver"), "learner.layout",
               f"unknown layout {self.layout!r}; valid: causal, structured, threadweaver")
        _check(0 <= self.sft_warmup_ratio < 1, "learner.sft_warmup_ratio", "must be in [0, 1)")
        _check(self.sft_tag_lr_mult == 1.0 or self.zero_stage < 3, "learner.sft_tag_lr_mult",
               "needs learner.zero_stage 0, 1 or 2 (ZeRO-3 partitions the embedding rows it steps)")
        _check(self.lora.r == 0 or self.zero_stage < 3, "learner.lora.r",
               "LoRA needs learner.zero_stage 0, 1 or 2: the merged export is computed from whole base weights, "
               "which ZeRO-3 partitions (and a frozen base holds no optimizer state for ZeRO-3 to shard)")
        _check(self.lora.r == 0 or self.sft_tag_lr_mult == 1.0 or self.lora.train_tags, "learner.sft_tag_lr_mult",
               "under LoRA it steps the trainable tag rows: needs learner.lora.train_tags=true")
