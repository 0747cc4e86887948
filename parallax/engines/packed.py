"""Prepacked bf16 weights for a CPU engine's linear layers: the same products, bit for bit, in less time.

On CPU, torch hands a bf16 `F.linear` to oneDNN's AMX kernel with the weight in its plain layout, every
call. From weights reordered once into oneDNN's blocked layout (`torch.ops.mkldnn._reorder_linear_weight`,
what inductor's CPU freezing does), SmolLM2-135M's 211 products of a decode step at 16 rows took 16 ms
instead of 25 (`bench/limits.py` splits a step; bench/README.md has the figures). Reordering them all
takes 75-90 ms, which every weight sync makes the engine pay again: it pays from about 15 decode steps a
sync. `PackedLinears` keeps each linear layer's weight reordered and calls oneDNN's linear on it.

What it must not do is change a token: the learner scores what the engine sampled, and the engines'
weights are bit-equal to the learner's cast. So:

* **the products are checked, not assumed:** the first call at each (weight shape, rows) compares the
  packed product with `F.linear` on the call's own input, bit for bit; one difference turns packing off
  for the model (and says so), and every later call is plain;
* **a packed copy follows its weight:** it is keyed by the weight's storage and version counter, so an
  in-place copy (the collective sync), a new tensor (`load_state`, wake-up) or a rebinding (the same-device
  hand-off) repacks on the next call. A rebinding back to a buffer another process rewrote keeps both, so
  the engine also calls `drop` on every weight load;
* only inference on CPU in bf16 takes it: with grad enabled, in another dtype or on another device a layer
  runs `F.linear` as before.

The packed copies cost the weights' bytes again (269 MB for SmolLM2 in bf16); `drop` frees them (the
engine does while asleep).
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)


def _linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """oneDNN's linear on a packed weight (one name, for the test that injects a difference)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def available() -> bool:
    """Whether this torch can reorder and run a bf16 linear layer's weight through oneDNN on this CPU."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
                    and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
                    and hasattr(torch.ops.mkldnn, "_linear_pointwise"))
    except (AttributeError, RuntimeError):
        return False


class PackedLinears:
    """Packed bf16 weights for every `nn.Linear` of `model`, installed as each layer's forward.

    `hint`: the rows oneDNN lays the weight out for (any row count runs on it; 64 was the fastest at 16
    rows here).
    """

    def __init__(self, model: torch.nn.Module, hint: int = 64):
        self.hint = hint
        self.on = True
        self._packs: dict[torch.nn.Linear, tuple[tuple, torch.Tensor]] = {}  # layer -> (weight key, packed weight)
        self._checked: set[tuple] = set()  # (out, in, rows, bias) shapes whose packed product was verified
        self.layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        for layer in self.layers:
            layer.forward = self._forward_of(layer)

    def drop(self) -> None:
        """Forget every packed copy (their memory); the next call of each layer packs its weight again."""
        self._packs.clear()

    @property
    def packed_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for _, p in self._packs.values())

    def _forward_of(self, layer: torch.nn.Linear):
        bf16 = torch.bfloat16

        def forward(x: torch.Tensor) -> torch.Tensor:
            w = layer.weight
            if (self.on and x.dtype == bf16 and w.dtype == bf16 and x.is_cpu and w.is_cpu and w.numel()
                    and not torch.is_grad_enabled()):
                return self._packed(layer, w, x)
            return F.linear(x, w, layer.bias)

        return forward

    def _packed(self, layer: torch.nn.Linear, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        bias = layer.bias
        key = (w.data_ptr(), w._version) if bias is None else (w.data_ptr(), w._version, bias.data_ptr(), bias._version)
        entry = self._packs.get(layer)
        if entry is None or entry[0] != key:
            entry = (key, torch.ops.mkldnn._reorder_linear_weight(w.detach(), self.hint))
            self._packs[layer] = entry
        out = _linear(x, entry[1], bias)
        shape = (w.shape, x.numel() // x.shape[-1], bias is not None)
        if shape not in self._checked:
            plain = F.linear(x, w, bias)
            if out.shape != plain.shape or not torch.equal(out.view(torch.int16), plain.view(torch.int16)):
                self.on = False
                self.drop()
                log.warning("packed bf16 linear differs from F.linear at weight %s x %d rows%s on this CPU: "
                            "packing is off for this model", tuple(w.shape), shape[1], " with bias" * shape[2])
                return plain
            self._checked.add(shape)
        return out
