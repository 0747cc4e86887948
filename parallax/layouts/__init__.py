"""Learner layouts: how trajectories and teacher traces become the learner's padded rows.

One layout per module, picked by name once at setup (`learner.layout`, `get_layout`), so neither
training step branches on a layout name:

* `causal` (causal.py): one causal row per trajectory, the "Seen" variant;
* `structured` (structured.py): one row per trajectory scored with the engine's segment
  visibility and positions, the "Unseen" variant; request-executor records get copies of later
  branches (reprefill.py);
* `threadweaver` (threadweaver.py): one causal row per engine request.

Beside them: the attention masks and structured scoring (masks.py), SFT packing (packing.py),
teacher-trace emulation for cold-start SFT (sft_records.py), records (records.py), padding (pad.py).
"""

from parallax.layouts.layout import LAYOUTS, Layout, build_train_batch, get_layout

__all__ = ["LAYOUTS", "Layout", "build_train_batch", "get_layout"]
