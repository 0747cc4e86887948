"""Real-data check of answer verification: every gold answer must verify against itself
rendered as a model answer, and a perturbed answer must not.

Datasets (``/work/shared/data`` or ``--data-dir``): GSM8K test (rendered ``... #### N``),
MATH-500, AIME 2024/2025, AMC 2023 (rendered ``... \\boxed{gold}``).  Three counts per set:

* ``self_ok``: the full pipeline (extraction + fast path + math-verify in the pool) accepts
  the gold answer;
* ``self_ok_mv``: math-verify alone (fast path bypassed) accepts gold == gold;
* ``perturbed_rejected``: the pipeline rejects the perturbed answer (integers + 1, anything
  else with ``+1`` appended).

Run: ``python -m rewards goldcheck [--data-dir DIR] [--workers 2]`` (prints one JSON line).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rewards.pool import TimeoutPool
from rewards.verify import slow_verify

__all__ = ["DEFAULT_DATA_DIR", "load_golds", "perturb", "render", "run_goldcheck"]

DEFAULT_DATA_DIR = Path("/work/shared/data")
_SETS = {
    "gsm8k_test": ("gsm8k/test.jsonl", "gsm8k"),
    "math500": ("math/math500.jsonl", "boxed"),
    "aime24": ("math/aime24.jsonl", "boxed"),
    "aime25": ("math/aime25.jsonl", "boxed"),
    "amc23": ("math/amc23.jsonl", "boxed"),
}
_INT = re.compile(r"-?\d+")


def load_golds(data_dir: Path | str = DEFAULT_DATA_DIR) -> dict[str, tuple[str, list[str]]]:
    """``{set_name: (style, gold answers)}`` for the sets present under ``data_dir``."""
    out = {}
    for name, (rel, style) in _SETS.items():
        path = Path(data_dir) / rel
        if not path.exists():
            continue
        golds = []
        for line in path.read_text().splitlines():
            row = json.loads(line)
            ans = str(row["answer"])
            golds.append(ans.rsplit("####", 1)[-1].strip() if style == "gsm8k" else ans)
        out[name] = (style, golds)
    return out


def render(answer: str, style: str) -> str:
    """A model-like completion ending in ``answer``."""
    if style == "gsm8k":
        return f"Let me compute step by step.\nSo the result follows.\n#### {answer}"
    return f"Let me reason about it.\nTherefore the final answer is $\\boxed{{{answer}}}$."


def perturb(answer: str) -> str:
    """A different answer: integers + 1, anything else ``+1`` appended."""
    a = answer.strip()
    return str(int(a) + 1) if _INT.fullmatch(a) else f"{a}+1"


def run_goldcheck(
    data_dir: Path | str = DEFAULT_DATA_DIR, workers: int = 2, timeout_s: float = 20.0
) -> dict[str, Any]:
    """Counts per data set (see the module docstring) plus up to 5 failures of each kind."""
    from rewards.scorer import RewardScorer
    from rewards.types import RewardGroup

    report: dict[str, Any] = {}
    worker = RewardScorer("accuracy", workers=workers, timeout_s=timeout_s)
    mv_pool = TimeoutPool(slow_verify, workers=workers, timeout_s=timeout_s)
    try:
        for name, (style, golds) in load_golds(data_dir).items():
            groups = [
                RewardGroup([render(g, style), render(perturb(g), style)], g) for g in golds
            ]
            batch = worker.score(groups)
            mv = mv_pool.map([(g, g, "math_verify", "") for g in golds])
            self_fail = [g for g, c in zip(golds, batch.correct) if not c[0]]
            pert_fail = [g for g, c in zip(golds, batch.correct) if c[1]]
            mv_fail = [g for g, o in zip(golds, mv) if not (o.ok and o.value[0])]
            report[name] = {
                "n": len(golds),
                "self_ok": len(golds) - len(self_fail),
                "self_ok_mv": len(golds) - len(mv_fail),
                "perturbed_rejected": len(golds) - len(pert_fail),
                "errors": batch.errors,
                "fail_self": self_fail[:5],
                "fail_self_mv": mv_fail[:5],
                "fail_perturbed": pert_fail[:5],
            }
    finally:
        worker.close()
        mv_pool.close()
    return report
