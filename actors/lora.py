"""LoRA on the learner's model through peft (`learner.lora.*`, parallax/contract/learner_config.py `LoraConfig`).

`wrap` freezes the base and adds adapters to the targeted projections (W x + (alpha / r) B A x) and,
with `train_tags`, makes the format tags' embedding rows trainable as peft's trainable tokens: those
rows are new and all alike (parallax/models/prepare.py gives each the vocabulary's mean), and adapters on the
projections cannot tell identical inputs apart, so without them SFT could not teach the format. peft
stores a trainable row's value (not a difference) in `trainable_tokens_delta` and writes it over the
base row in the forward; a tied output embedding follows the input one, an untied one gets its own.

`param_groups` gives the optimizer the adapters and, apart, the tag rows (marked `TAG_ROWS`): the
learner sets that group's lr to sft_tag_lr_mult x lr in SFT steps and 1 x lr in RL steps, which is
what `actors/row_lr.py` emulates for full fine-tuning, where the rows cannot be a group of their own.

`MergedWeights` is what leaves the learner (state_dict, save_pretrained, the weight sync): the plain
model's names (no `base_model.model.`, `base_layer`, `lora_A`, `trainable_tokens_delta`) and merged
values, computed tensor by tensor with peft's own merge math (`get_delta_weight`,
`get_merged_weights`) without touching the trained parameters. The engines load a plain model.
"""

from __future__ import annotations

import torch

__all__ = ["TAG_ROWS", "MergedWeights", "base_name", "param_groups", "wrap"]

#: The optimizer param-group key that marks the tag rows' group (its lr is scaled in SFT steps).
TAG_ROWS = "tag_rows"


def wrap(model, lcfg, tags: list[int]):
    """`model` (a transformers causal LM) as a peft model: only the adapters and, with
    `lcfg.train_tags`, the `tags`' embedding rows train."""
    import peft

    target = "all-linear" if list(lcfg.target_modules) == ["all-linear"] else list(lcfg.target_modules)
    rows = _tag_rows(model, tags) if lcfg.train_tags and tags else None
    pcfg = peft.LoraConfig(r=lcfg.r, lora_alpha=lcfg.alpha, lora_dropout=lcfg.dropout, target_modules=target,
                           trainable_token_indices=rows)
    try:
        return peft.get_peft_model(model, pcfg)
    except ValueError as e:  # peft's "Target modules ... not found in the base model"
        raise ValueError(f"learner.lora.target_modules={list(lcfg.target_modules)}: {e}") from None


def _tag_rows(model, tags: list[int]):
    """peft's `trainable_token_indices`: the ids alone when the output embedding is tied to the input one
    (peft ties the trainable rows too), else both matrices by module name, so the untied output rows of
    the tags (mean-initialised as well) learn."""
    emb, out = model.get_input_embeddings(), model.get_output_embeddings()
    if out is None or out.weight is emb.weight:
        return list(tags)
    names = {id(m): n for n, m in model.named_modules()}
    return {names[id(emb)]: list(tags), names[id(out)]: list(tags)}


def param_groups(model) -> list[dict]:
    """The trainable parameters as optimizer groups: the adapters, then the tag rows (`TAG_ROWS`)."""
    adapters, rows = [], []
    for name, p in model.named_parameters():  # a tied token layer's rows are one parameter, listed once
        if p.requires_grad:
            (rows if "trainable_tokens_delta" in name else adapters).append(p)
    return [g for g in ({"params": adapters}, {"params": rows, TAG_ROWS: True}) if g["params"]]


def base_name(name: str) -> str | None:
    """The plain model's name of a peft model's state-dict entry (under `get_base_model()`), or None for
    an adapter's own tensor: `model.layers.0.self_attn.q_proj.base_layer.weight` ->
    `model.layers.0.self_attn.q_proj.weight`, `lm_head.token_adapter.base_layer.weight` -> `lm_head.weight`."""
    parts = name.split(".")
    if any(p.startswith(("lora_", "trainable_tokens_")) for p in parts):
        return None
    return ".".join(p for p in parts if p not in ("base_layer", "token_adapter"))


class MergedWeights:
    """A peft model's weights as the plain model has them: `named` lists (plain name, frozen base tensor),
    a tied weight as one object under two names (the learner's export plan keys on identity); `merged(t)`
    is the value to export for such a tensor."""

    def __init__(self, model):
        from peft.tuners.lora import LoraLayer
        from peft.tuners.trainable_tokens import TrainableTokensLayer

        inner = model.get_base_model()
        self._layers: dict[int, torch.nn.Module] = {}  # id(base weight) -> the tuner layer that merges into it
        for layer in inner.modules():
            if isinstance(layer, (LoraLayer, TrainableTokensLayer)):
                # a tied lm_head's token layer shares the embedding's weight and rows: the first one stands
                self._layers.setdefault(id(layer.get_base_layer().weight), layer)
        self.named = [(plain, t) for name, t in inner.state_dict(keep_vars=True).items()
                      if (plain := base_name(name)) is not None]

    @torch.no_grad()
    def merged(self, t: torch.Tensor) -> torch.Tensor:
        """`t` with its layer's active adapters merged in (a new tensor), or `t` itself when none adapts it."""
        from peft.tuners.trainable_tokens import TrainableTokensLayer

        layer = self._layers.get(id(t))
        if layer is None:
            return t
        if isinstance(layer, TrainableTokensLayer):  # the trained rows written over the base rows
            return layer.get_merged_weights(layer.active_adapters)
        out = t.detach().clone()
        for name in layer.active_adapters:  # W + scale * B @ A, as peft's merge adds it
            if name in layer.lora_A or name in layer.lora_embedding_A:
                out += layer.get_delta_weight(name)
        return out
