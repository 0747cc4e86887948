"""`learner.lora.*`: the learner trains peft LoRA adapters and the format tags' rows on a frozen base, and
whatever leaves it (state_dict, save_pretrained, the sync plan) is the plain model, merged (actors/lora.py)."""

from __future__ import annotations

import copy
import socket

import pytest
import torch

pytestmark = pytest.mark.slow

ON = {"r": 8, "alpha": 16.0}


def _learner(model_path: str, zero_stage: int = 1, mult: float = 1.0, kl_coef: float = 0.0, **lora):
    from actors.learner import LearnerWorker
    from parallax.contract.config import LearnerConfig, LoraConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = LearnerConfig(micro_batch_size=4, torch_threads=1, zero_stage=zero_stage, sft_tag_lr_mult=mult,
                        kl_coef=kl_coef, lora=LoraConfig(**(ON | lora)))
    return LearnerWorker(cfg, model_path, "float32", 0, 1, f"tcp://127.0.0.1:{port}", port, seed=0)


def _sft_batch(model_path: str, n: int = 8):
    from transformers import AutoTokenizer

    from parallax import toyworld
    from parallax.layouts.causal import sft_batch

    tok = AutoTokenizer.from_pretrained(model_path)
    return sft_batch(toyworld.generate("mixed", n, seed=3), "parallel_r1", tok)


def _params(learner) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in learner.engine.module.named_parameters()}


def _plain(model_path: str):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()


# ---- config ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,key", [
    ({"r": -1}, "learner.lora.r"), ({"alpha": 0.0}, "learner.lora.alpha"),
    ({"alpha": float("nan")}, "learner.lora.alpha"),
    ({"dropout": 1.0}, "learner.lora.dropout"), ({"dropout": -0.1}, "learner.lora.dropout"),
    ({"target_modules": []}, "learner.lora.target_modules"), ({"target_modules": [""]}, "learner.lora.target_modules"),
    ({"target_modules": ["all-linear", "q_proj"]}, "learner.lora.target_modules"),
])
def test_bad_lora_values_name_their_key(kwargs, key):
    from parallax.contract.config import ConfigError, LoraConfig

    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        LoraConfig(**kwargs)


def test_unsupported_combinations_are_refused_at_config_time():
    from parallax.contract.config import ConfigError, LearnerConfig, LoraConfig

    with pytest.raises(ConfigError, match=r"learner\.lora\.r: LoRA needs learner\.zero_stage 0, 1 or 2"):
        LearnerConfig(zero_stage=3, lora=LoraConfig(r=8))
    with pytest.raises(ConfigError, match=r"learner\.sft_tag_lr_mult: .*learner\.lora\.train_tags=true"):
        LearnerConfig(sft_tag_lr_mult=10.0, lora=LoraConfig(r=8, train_tags=False))
    LearnerConfig(zero_stage=3)  # LoRA off: ZeRO-3 as before
    LearnerConfig(zero_stage=2, sft_tag_lr_mult=10.0, lora=LoraConfig(r=8, target_modules=["all-linear"]))


def test_lora_keys_compose_from_the_command_line():
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    from parallax.contract.config import ConfigError, register_configs, validate

    register_configs()
    conf = str(Path(__file__).resolve().parents[2] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = validate(compose("config", overrides=["learner.lora.r=4", "learner.lora.target_modules=[q_proj,v_proj]",
                                                    "run_dir=/tmp/x"]))
        assert (cfg.learner.lora.r, cfg.learner.lora.target_modules) == (4, ["q_proj", "v_proj"])
        assert validate(compose("config", overrides=["run_dir=/tmp/x"])).learner.lora.r == 0  # off by default
        with pytest.raises(ConfigError, match=r"learner\.lora\.r"):
            validate(compose("config", overrides=["learner.lora.r=4", "learner.zero_stage=3", "run_dir=/tmp/x"]))


# ---- training -------------------------------------------------------------------------------------
def test_one_sft_step_moves_only_adapters_and_tag_rows_and_exports_the_merged_plain_model(tiny_model_path):
    from actors.learner import tag_ids

    learner = _learner(tiny_model_path)
    before = _params(learner)
    trainable = {n for n, p in learner.engine.module.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or "trainable_tokens_delta" in n for n in trainable), trainable
    batch = _sft_batch(tiny_model_path)
    stats = learner.sft_step(batch, int(batch.loss_mask.sum()), lr=1e-3, weight_decay=0.0)
    assert torch.isfinite(torch.tensor(stats["sft/loss"])) and stats["sft/grad_norm"] > 0
    after = _params(learner)
    for n in before:
        if n not in trainable:
            assert torch.equal(before[n], after[n]), f"base weight {n} changed"
    assert any(not torch.equal(before[n], after[n]) for n in trainable if "lora_B" in n)  # B starts at 0
    rows = next(n for n in trainable if "trainable_tokens_delta" in n)
    assert not torch.equal(before[rows], after[rows])

    sd = learner.state_dict()
    plain = _plain(tiny_model_path)
    assert list(sd) == list(plain.state_dict())  # the plain model's names, in its order
    ref = copy.deepcopy(learner.engine.module).merge_and_unload().state_dict()  # peft's own merge
    assert list(ref) == list(sd)
    for name in sd:
        torch.testing.assert_close(sd[name], ref[name], rtol=0, atol=1e-6, msg=name)
    emb, base = sd["model.embed_tokens.weight"], plain.state_dict()["model.embed_tokens.weight"]
    tags = tag_ids(tiny_model_path)
    rest = torch.ones(len(emb), dtype=torch.bool)
    rest[tags] = False
    assert torch.equal(emb[rest], base[rest])  # a non-tag row as the base has it
    assert not torch.equal(emb[tags], base[tags])  # the tag rows learned
    assert sd["lm_head.weight"] is sd["model.embed_tokens.weight"]  # tied: one tensor, as before LoRA
    plan = learner._plan(1 << 20)
    assert ("lm_head.weight", "model.embed_tokens.weight") in plan.aliases
    assert sorted(m.name for b in plan.buckets for m in b.tensors) == sorted(set(sd) - {"lm_head.weight"})


def test_tag_rows_step_at_sft_tag_lr_mult_under_lora_and_the_adapters_as_before(tiny_model_path):
    from actors.learner import tag_ids

    batch = _sft_batch(tiny_model_path)
    out = {}
    for mult in (1.0, 10.0):
        learner = _learner(tiny_model_path, mult=mult)
        w0 = learner.state_dict()["model.embed_tokens.weight"]
        learner.sft_step(batch, int(batch.loss_mask.sum()), lr=1e-3, weight_decay=0.1)
        adapters = {n: p.detach().clone() for n, p in learner.engine.module.named_parameters() if "lora_" in n}
        out[mult] = (w0, learner.state_dict()["model.embed_tokens.weight"], adapters)
        # an RL step after SFT takes the rows at 1 x lr again
        learner._set_lr(1e-4, 0.0)
        assert {g["lr"] for g in learner.engine.optimizer.param_groups} == {1e-4}
    (w0, plain, a1), (w0b, fast, a10) = out[1.0], out[10.0]
    assert torch.equal(w0, w0b)
    ids = tag_ids(tiny_model_path)
    step, big = plain[ids] - w0[ids], fast[ids] - w0[ids]
    assert step.abs().max() > 1e-4
    torch.testing.assert_close(big, 10.0 * step, rtol=1e-4, atol=1e-6)  # AdamW at 10 x lr, decay included
    for n in a1:
        assert torch.equal(a1[n], a10[n]), n  # the adapters' group keeps 1 x lr


def test_a_few_lora_sft_steps_lower_the_loss(tiny_model_path):
    learner = _learner(tiny_model_path, zero_stage=0)
    batch = _sft_batch(tiny_model_path, n=4)
    losses = [learner.sft_step(batch, int(batch.loss_mask.sum()), lr=5e-3, weight_decay=0.0)["sft/loss"]
              for _ in range(8)]
    assert losses[-1] < 0.85 * losses[0], losses  # measured: 5.85 -> 4.46


def test_grpo_step_with_lora_scores_as_the_exported_model_does(tiny_model_path, tmp_path, grpo_batch):
    """The KL reference is the base with the adapters off; after the update, the learner's logprobs are
    those of the plain HF model its save_pretrained wrote (what an engine loads after a sync)."""
    from actors.scoring import score_logprobs

    batch, _ = grpo_batch(tiny_model_path, 12)
    learner = _learner(tiny_model_path, kl_coef=0.1)
    sft = _sft_batch(tiny_model_path, n=4)
    learner.sft_step(sft, int(sft.loss_mask.sum()), lr=1e-3)  # the adapters and tag rows away from the base
    plain = _plain(tiny_model_path)
    with torch.no_grad():
        base = score_logprobs(plain, batch.input_ids, batch.attention_mask, 1.0, None, "cpu",
                              scored=batch.response_mask)
    torch.testing.assert_close(learner._ref_logprobs(batch, 1.0) * batch.response_mask, base * batch.response_mask)
    stats = learner.grpo_step(batch, int(batch.response_mask.sum()), len(batch), lr=1e-3)
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values()), stats
    assert stats["actor/grad_norm"] > 0 and stats["actor/kl"] > 0  # the policy is not the base any more

    learner.save_pretrained(str(tmp_path / "model"))
    exported = _plain(str(tmp_path / "model"))
    assert not any("lora" in k or "base_layer" in k for k in exported.state_dict())
    with torch.no_grad():
        theirs = score_logprobs(exported, batch.input_ids, batch.attention_mask, 1.0, None, "cpu",
                                scored=batch.response_mask) * batch.response_mask
    ours = learner.compute_logprobs(batch)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    assert (ours - base * batch.response_mask).abs().max() > 1e-4  # and they are not the base's


def test_training_state_round_trips_into_a_fresh_lora_learner(tiny_model_path, tmp_path):
    learner = _learner(tiny_model_path)
    batch = _sft_batch(tiny_model_path, n=4)
    for _ in range(2):
        learner.sft_step(batch, int(batch.loss_mask.sum()), lr=1e-3)
    learner.save_training_state(str(tmp_path / "state"))
    fresh = _learner(tiny_model_path)
    fresh.load_training_state(str(tmp_path / "state"))
    a, b = learner.state_dict(), fresh.state_dict()
    assert list(a) == list(b)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    mine, theirs = _params(learner), _params(fresh)
    assert all(torch.equal(mine[n], theirs[n]) for n in mine)  # the adapters themselves, not only the merge
    # the optimizer state too: the next step is the same on both
    s1 = learner.sft_step(batch, int(batch.loss_mask.sum()), lr=1e-3)
    s2 = fresh.sft_step(batch, int(batch.loss_mask.sum()), lr=1e-3)
    assert s1["sft/loss"] == s2["sft/loss"]
    after, after_fresh = learner.state_dict(), fresh.state_dict()
    for name in after:
        assert torch.equal(after[name], after_fresh[name]), name


# ---- an untied model ------------------------------------------------------------------------------
def test_an_untied_models_output_tag_rows_train_and_merge_like_peft():
    """Qwen3-8B-style untied embeddings: the tags' output rows train too, and the merged export still
    equals peft's merge_and_unload under the plain names."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from actors.lora import MergedWeights, wrap
    from parallax.contract.config import LoraConfig

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                         tie_word_embeddings=False))
    names = list(model.state_dict())
    tags = [60, 61, 62]
    peft_model = wrap(model, LoraConfig(r=4), tags)
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert sum("trainable_tokens_delta" in n for n in trainable) == 2  # input and output rows
    with torch.no_grad():  # as if trained: every adapter and row away from its start
        for n, p in peft_model.named_parameters():
            if p.requires_grad:
                p.add_(0.1 * torch.randn_like(p))
    export = MergedWeights(peft_model)
    merged = {n: export.merged(t) for n, t in export.named}
    assert list(merged) == names
    ref = copy.deepcopy(peft_model).merge_and_unload().state_dict()
    for n in names:
        torch.testing.assert_close(merged[n], ref[n], rtol=0, atol=1e-6, msg=n)
    out_w = merged["lm_head.weight"]
    assert not torch.equal(out_w[tags], peft_model.get_base_model().lm_head.token_adapter.base_layer.weight[tags])


def test_a_target_module_the_model_lacks_names_the_key():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from actors.lora import wrap
    from parallax.contract.config import LoraConfig

    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, head_dim=16))
    with pytest.raises(ValueError, match=r"learner\.lora\.target_modules=\['c_attn'\]"):
        wrap(model, LoraConfig(r=4, target_modules=["c_attn"]), [])
