"""summary.png's panels: the whole run (the SFT loss included), on axes that do not magnify noise."""

from __future__ import annotations

import pytest

from orchestrator.plots import panels, y_limits


def _run() -> list[dict]:
    rows = [{"step": s, "curriculum/stage": 0, "sft/loss": 2.0 - 0.1 * s} for s in range(5)]
    rows += [{"step": s, "curriculum/stage": 1, "reward/acc": 0.5, "parallel/ratio": 0.992 + 0.002 * (s % 5),
              "parallel/speedup": 1.37 + 0.005 * (s % 5)} for s in range(5, 10)]
    return rows + [{"step": 10, "eval/acc": 0.6, "eval/parallel/ratio": 1.0}]


def test_the_sft_loss_is_drawn_and_the_rl_panels_keep_their_steps():
    drawn = {p.title: p for p in panels(_run())}
    assert [s for s, _ in drawn["SFT loss"].series["train batch"]] == [0, 1, 2, 3, 4]
    assert drawn["accuracy"].series["held-out"] == [(10, 0.6)]
    assert drawn["first <Parallel> position"].series == {}  # not logged: an empty panel, not an error


def test_shares_are_drawn_on_zero_to_one_whatever_they_span():
    ratio = {p.title: p for p in panels(_run())}["#Parallel (share of samples)"]
    lo, hi = ratio.ylim
    assert lo < 0 and hi > 1 and hi - lo == pytest.approx(1.08)  # 0.992-1.000 is not a swing


def test_a_narrow_free_panel_spans_at_least_its_minimum():
    speedup = {p.title: p for p in panels(_run())}["speed-up (total / critical path)"]
    lo, hi = speedup.ylim
    assert hi - lo == pytest.approx(0.5 * 1.08)
    assert lo < 1.37 and 1.39 < hi and (lo + hi) / 2 == pytest.approx(1.38)
    assert y_limits([0.0, 3.0], None, 0.5) == pytest.approx((-0.12, 3.12))  # wide enough: its own range
