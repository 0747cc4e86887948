"""The evaluation runner decodes plainly or through the parallel executor, as training's rollouts do."""

from __future__ import annotations

import pytest

from parallax.evaluation.runner import generate_samples
from parallax.trainingdata.loaders import EvalProblem


def _problems(n: int) -> list[EvalProblem]:
    from parallax import toyworld

    return [EvalProblem(uid=p.uid, benchmark="toyworld", question=p.prompt, answer=p.answer,
                        meta={"raw_prompt": True}) for p in toyworld.generate("mixed", n, seed=3)]


def test_executed_mode_forks_every_parallel_block(tiny_model):
    """In executed mode a sampled <Parallel> is a fork point: the executor forces each path's opening
    tag right after it, so every block's text reads `<Parallel><Path>` (plain decoding of a random
    model almost never writes that)."""
    kw = {"k": 8, "max_new_tokens": 32, "fmt": "parallel_r1", "style": "raw", "torch_threads": 1, "seed": 0}
    executed, _ = generate_samples(tiny_model, _problems(8), mode="executed", **kw)
    forked = [s["text"] for s in executed if "<Parallel>" in s["text"]]
    assert forked, "no sample forked: the check below would be vacuous"
    assert all(t.count("<Parallel>") == t.count("<Parallel><Path>") for t in forked)
    plain, _ = generate_samples(tiny_model, _problems(8), mode="sequential", **kw)
    assert len(plain) == len(executed) == 64 and [s["uid"] for s in plain] == [s["uid"] for s in executed]


def test_unknown_mode_is_refused(tiny_model):
    with pytest.raises(ValueError, match="decoding mode 'nope'"):
        generate_samples(tiny_model, _problems(1), k=1, mode="nope")
