"""One decode step of a transformers causal LM over a left-padded batch, without per-step copies.

Both CPU decode loops (`parallax.engines.hf` and the executor's `parallax.executors.decode_batch.DecodeBatch`)
feed one token per row per step. With transformers' defaults every step pays three costs that
grow with rows x cache width and are not model work:

* `DynamicCache` appends by `torch.cat`: the whole cache is copied every step;
* the 2-D padding mask is re-expanded into a 4-D mask every step;
* sdpa models with grouped-query attention copy K and V to every query head (`repeat_kv`)
  whenever a mask is passed, because the fused CUDA kernels cannot take both.

`KVDecoder` removes them for sdpa models on CPU: K/V live in buffers with spare columns
(`GrowingLayer`, doubled when full), the mask is a boolean [R, 1, 1, cap] buffer extended in place
(and not passed at all while no row is padded), and attention runs through `decode_sdpa`, which
calls sdpa with `enable_gqa=True` on the un-repeated K/V. The values are the ones transformers'
sdpa path computes (tests compare them; on the tiny model the tokens and logprobs are the same
bit for bit); `bench/bench_decode.py` times both. Other attention implementations, and sdpa on
an accelerator, keep transformers' own path (`DynamicCache`, 2-D mask).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

DECODE_SDPA = "parallax_decode_sdpa"
KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: K, V [R, Hkv, W, D] (or [Hkv, W, D] for one row)


class GrowingLayer(DynamicLayer):
    """One layer's K/V in buffers with spare columns; `keys`/`values` are views of the filled part.

    A step writes its column into the buffer instead of concatenating a new cache, and the
    buffer doubles when full (amortised O(1) columns copied per step).
    """

    def __init__(self, keys: torch.Tensor | None = None, values: torch.Tensor | None = None, capacity: int = 0,
                 filled: int | None = None):
        """keys/values [..., n, D] are copied into a buffer of `capacity` columns or more; with
        `filled`, they *are* the buffers (not copied) and their first `filled` columns are the cache."""
        super().__init__()
        if keys is not None and filled is not None:
            self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
            self._k, self._v, self._n = keys, values, filled
            self.keys, self.values = keys[..., :filled, :], values[..., :filled, :]
        elif keys is not None:
            self._adopt(keys, values, capacity)

    def _adopt(self, keys: torch.Tensor, values: torch.Tensor, capacity: int) -> None:
        n = keys.shape[-2]
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._k = keys.new_zeros((*keys.shape[:-2], max(capacity, 2 * n, 16), keys.shape[-1]))
        self._v = torch.zeros_like(self._k)
        self._k[..., :n, :] = keys
        self._v[..., :n, :] = values
        self._n = n
        self.keys, self.values = self._k[..., :n, :], self._v[..., :n, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self._adopt(key_states, value_states, 0)
            return self.keys, self.values
        n, q = self._n, key_states.shape[-2]
        if n + q > self._k.shape[-2]:
            self._adopt(self.keys, self.values, 2 * (n + q))
        self._k[..., n:n + q, :] = key_states
        self._v[..., n:n + q, :] = value_states
        self._n = n + q
        self.keys, self.values = self._k[..., :n + q, :], self._v[..., :n + q, :]
        return self.keys, self.values

    def crop(self, max_length: int) -> None:
        raise NotImplementedError("GrowingLayer is a decode buffer; crop is not supported")


def decode_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                is_causal=None, **kwargs):
    """sdpa attention that hands grouped K/V to the kernel un-repeated (`enable_gqa`).

    Same arguments and result as transformers' `sdpa_attention_forward`, which it delegates to
    for anything but a masked CPU call (where it would copy K and V to every head first).
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_mask is None or query.device.type != "cpu" or kwargs.get("output_attentions"):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    groups = getattr(module, "num_key_value_groups", 1)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=groups > 1)
    return out.transpose(1, 2).contiguous(), None


def _keeps_logits(model) -> bool:
    """Whether the model's forward takes transformers' `logits_to_keep` (its head on the last positions only)."""
    import inspect

    return "logits_to_keep" in inspect.signature(getattr(model, "module", model).forward).parameters


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if DECODE_SDPA not in AttentionInterface._global_mapping:
        AttentionInterface.register(DECODE_SDPA, decode_sdpa)
        ALL_MASK_ATTENTION_FUNCTIONS.register(DECODE_SDPA, sdpa_mask)


class KVDecoder:
    """A left-padded batch's KV cache and mask, and the model call that extends them by one column.

    Rows are independent sequences; row b's real columns are the last `lengths[b]` of the cache
    (left padding before them is masked). `prefill` runs the prompts, `step` feeds one token per
    row, `load` replaces the whole batch (the executor's regroup).
    """

    def __init__(self, model):
        self.model = model
        self.config = getattr(model, "module", model).config
        self.device = next(model.parameters()).device
        self.fast = self.config._attn_implementation == "sdpa" and self.device.type == "cpu"
        # the prefill's logits on the last position only: the head over every prompt position was a third of
        # SmolLM2's prefill
        self._keep = {"logits_to_keep": 1} if _keeps_logits(model) else {}
        if self.fast:
            _register()
        self.cache: Cache | None = None
        self._mask: torch.Tensor | None = None  # fast: bool [R, 1, 1, cap]; else long [R, W]
        self._width = 0
        self._padded = True  # fast: some row has masked (padding) columns

    @property
    def width(self) -> int:
        """Cache columns (padding included) before the next step."""
        return self._width

    @property
    def padded(self) -> bool:
        """Whether the next step attends under a mask (some row has padding columns)."""
        return self._padded or not self.fast

    @property
    def layers(self) -> list:
        """Per layer an object with `.keys` / `.values` [R, Hkv, W, D] (the batch's cache)."""
        return self.cache.layers

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """ids, mask (1 on real tokens), positions: [R, P] on the model's device; last logits [R, V]."""
        cache = Cache(layer_class_to_replicate=GrowingLayer) if self.fast else None
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         past_key_values=cache, use_cache=True, **self._keep)
        self.cache = out.past_key_values
        self._set_mask(mask)
        return out.logits[:, -1, :].float()

    @property
    def spare(self) -> int:
        """Columns to allocate past the width when building buffers for `load` (0: exact width)."""
        return 64 if self.fast else 0

    def load(self, kv: KV, mask: torch.Tensor) -> None:
        """Make `kv` the cache: per layer K, V [R, Hkv, W + s, D] whose first W columns are filled
        (mask [R, W], 1 on real columns). The fast path keeps the tensors as its buffers (no copy:
        allocate them with `spare` extra columns); transformers' path needs s = 0."""
        W = mask.shape[1]
        if self.fast:
            self.cache = Cache(layers=[GrowingLayer(k, v, filled=W) for k, v in kv])
        else:
            from transformers import DynamicCache

            self.cache = DynamicCache(ddp_cache_data=[(k[:, :, :W], v[:, :, :W]) for k, v in kv])
        self._set_mask(mask)

    @torch.no_grad()
    def step(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Feed ids [R, 1] at positions [R, 1]; every row gains a real column. Logits [R, V]."""
        mask = self._extend_mask()
        if self.fast:
            impl, self.config._attn_implementation = self.config._attn_implementation, DECODE_SDPA
            try:  # no padding: no mask at all (sdpa's unmasked kernel is faster still)
                out = self.model(input_ids=ids, attention_mask=mask if self._padded else None, position_ids=positions,
                                 past_key_values=self.cache, use_cache=True)
            finally:
                self.config._attn_implementation = impl
        else:
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                             past_key_values=self.cache, use_cache=True)
        self.cache = out.past_key_values
        return out.logits[:, -1, :].float()

    def _set_mask(self, mask: torch.Tensor) -> None:
        R, W = mask.shape
        self._width = W
        if not self.fast:
            self._mask = mask.to(torch.long)
            return
        self._mask = torch.zeros((R, 1, 1, W + 64), dtype=torch.bool, device=mask.device)
        self._mask[:, 0, 0, :W] = mask.bool()
        self._padded = not bool(self._mask[..., :W].all())

    def _extend_mask(self) -> torch.Tensor:
        """The mask with one more real column for every row (the token being fed)."""
        W = self._width
        self._width += 1
        if not self.fast:
            self._mask = torch.cat([self._mask, torch.ones_like(self._mask[:, :1])], dim=-1)
            return self._mask
        if W + 1 > self._mask.shape[-1]:
            grown = torch.zeros((*self._mask.shape[:3], 2 * (W + 1)), dtype=torch.bool, device=self._mask.device)
            grown[..., :W] = self._mask[..., :W]
            self._mask = grown
        self._mask[..., W] = True
        return self._mask[..., :W + 1]
