"""Turn completion texts into analysed :class:`~rewards.types.Analysis` records.

Per text, in the calling process (cheap, linear time, never raises):

1. parse with the format package (``parallax.formats.parse``, lenient) and compute its metrics
   (``parallax.formats.compute_metrics``) -> :class:`TrajStats`.  A malformed/truncated text gets
   ``valid=False`` and the metrics of its longest valid prefix (so ``n_blocks`` counts the
   well-formed parallel units it does contain);
2. the *final part* = main-chain text after the last block (``parallax.formats.answer_text``): for a
   malformed text, the text after the last ``</Parallel>`` outside any tag left open, so the final
   answer decides correctness whatever the format (an answer inside a branch never counts; the
   format-aware rewards keep their own gates on validity and parallel units);
3. answer extraction (:mod:`rewards.extract`) and the exact fast path (:mod:`rewards.verify`).

Whatever the fast path leaves undecided (and every DAPO-mode item) is a :class:`SlowJob`
for :func:`rewards.verify.slow_verify`, run in a :class:`~rewards.pool.TimeoutPool` by
:func:`analyze_group` (or in-process when no pool is given: tests, quick CLI use).

Example:
    >>> s = analyze_group(["6*7 is 42. #### 42"], "42", AnalysisOptions("parallel_r1"))[0]
    >>> s.correct, s.pred, s.format_valid, s.has_parallel
    (True, '42', True, False)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from parallax.formats.metrics import compute_metrics
from parallax.formats.parser import answer_text, parse
from parallax.formats.spec import resolve_spec
from rewards.extract import extract_answer, extract_answers
from rewards.pool import Outcome, TimeoutPool
from rewards.types import Analysis, TrajStats
from rewards.verify import MAX_ANSWER_CHARS, _as_number, fast_verdict, normalize, slow_verify

__all__ = ["AnalysisOptions", "SlowJob", "analyze_fast", "analyze_group", "run_slow", "trajectory_stats"]


@dataclass(frozen=True)
class AnalysisOptions:
    """What to compute: trajectory ``format``, answer ``verifier``, whether to verify answers
    (``need_accuracy``) and keep metrics/trees (``need_parse``); an optional ``tokenizer`` (HF,
    or its Rust core ``tokenizers.Tokenizer``) makes token counts real tokens instead of words."""

    format: Any = "parallel_r1"  # a format name or a parallax.formats.FormatSpec
    verifier: str = "math_verify"
    need_accuracy: bool = True
    need_parse: bool = True
    tokenizer: Any = None
    multiple_answers: str = "last"  # last | reject (BaseParams.multiple_answers)


@dataclass(frozen=True)
class SlowJob:
    """Arguments of :func:`rewards.verify.slow_verify` for one sample."""

    index: int
    pred: str | None
    gold: str
    verifier: str
    final_text: str

    def args(self) -> tuple[Any, ...]:
        return (self.pred, self.gold, self.verifier, self.final_text)


def trajectory_stats(text: str, fmt: Any, tokenizer: Any = None) -> tuple[TrajStats, Any, str]:
    """``(stats, tree, final_part)`` of one text through the format package.

    >>> # words: a(1) <Parallel>(1) 2 paths(3+3) summary(3) </Parallel>(1) "#### 3"(2) = 14; T = 14 - 6 + 3
    >>> st, _, final = trajectory_stats("a <Parallel><Path>x</Path><Path>y</Path>"
    ...                                 "<Summary>s</Summary></Parallel> #### 3", "parallel_r1")
    >>> (st.valid, st.n_blocks, st.total_tokens, st.critical_tokens, final)
    (True, 1, 14, 11, ' #### 3')
    """
    stats, res, final = _parsed(text, fmt, tokenizer)
    return stats, res.tree, final


def _parsed(text: str, fmt: Any, tokenizer: Any = None):
    """`trajectory_stats` with the whole parse result in place of its tree (`structure` reads it)."""
    spec = resolve_spec(fmt)
    res = parse(text, spec, strict=False)
    tree = res.tree
    m = compute_metrics(tree, spec, tokenizer)
    if spec.is_parason:
        sub, trial = m.subtask_share, m.trial_share
    else:  # Parallel-R1 paths are neither AND nor OR branches
        sub, trial = 0.0, 0.0
    stats = TrajStats(
        total_tokens=m.total_tokens,
        critical_tokens=m.critical_path_tokens,
        sub_share=sub,
        trial_share=trial,
        eta=m.eta,
        n_blocks=m.num_blocks,
        valid=res.ok,
    )
    # where the answer is read: after the last block, outside any unclosed tag (parallax.formats.answer_text), so
    # a malformed block before a correct final answer does not hide it; an answer in a path never counts
    return stats, res, answer_text(text, spec, res)


def structure(res, text: str, fmt: Any, gold: str, tokenizer: Any = None) -> dict[str, Any]:
    """The figures the driver logs of one parsed text (`parallax.contract.batch.SampleScore.structure`):
    `parallax.formats.text_stats` in its default units, from this parse, and `steps_ok`; with the run's
    `tokenizer`, also `in_tokens`: the same figures counted in its tokens (held-out evaluation's units)."""
    from parallax.formats.metrics import parsed_stats
    from rewards.branch import _share, tree_units

    out = parsed_stats(res, text, fmt)
    out["steps_ok"] = _share(tree_units(res.tree) if res.ok else [], gold)
    if tokenizer is not None:
        out["in_tokens"] = parsed_stats(res, text, fmt, tokenizer)
        del out["in_tokens"]["error"]  # the parse's error says its place in words (`out["error"]`)
    return out


def analyze_fast(index: int, text: str, gold: str, opts: AnalysisOptions) -> tuple[Analysis, SlowJob | None]:
    """In-process analysis of one text; returns the sample and the slow job still to run
    (``None`` when decided).  A non-str text gives ``Analysis(error="bad_input")``."""
    if not isinstance(text, str):
        from parallax.formats.metrics import text_stats

        return Analysis(error="bad_input", structure={**text_stats(text, opts.format), "steps_ok": 0.0}), None
    stats, res, final = _parsed(text, opts.format, opts.tokenizer)
    keep = opts.need_parse
    sample = Analysis(stats=stats, tree=res.tree if keep else None,
                    structure=structure(res, text, opts.format, gold, opts.tokenizer))
    if not opts.need_accuracy:
        return sample, None
    pred = extract_answer(final)
    sample = replace(sample, pred=pred)
    if opts.multiple_answers == "reject" and len({_answer_key(a) for a in extract_answers(final)}) > 1:
        return replace(sample, reason="multiple_answers"), None
    if opts.verifier == "dapo":
        return sample, SlowJob(index, pred, gold, "dapo", final)
    if pred is None:
        return replace(sample, reason="no_answer"), None
    verdict = fast_verdict(pred, gold)  # linear in the answer's length: a plain number of any size
    if verdict is not None:
        return replace(sample, correct=verdict, reason=None if verdict else "mismatch"), None
    if len(pred) > MAX_ANSWER_CHARS:
        return replace(sample, reason="too_long"), None
    return sample, SlowJob(index, pred, gold, opts.verifier, final)


def _answer_key(ans: str) -> str:
    """Two final answers that say the same (``12``, ``12.0``, ``$12$``) are one answer, not a hedge."""
    n = normalize(ans)
    return _as_number(n) or n


def run_slow(jobs: Sequence[SlowJob], pool: TimeoutPool | None) -> list[Outcome]:
    """Run slow jobs in ``pool`` (hard per-item timeout) or, without one, in-process."""
    if pool is not None:
        return pool.map([j.args() for j in jobs])
    out = []
    for j in jobs:
        try:
            out.append(Outcome(True, slow_verify(*j.args())))
        except Exception as e:  # noqa: BLE001 - one bad item must not fail the group
            out.append(Outcome(False, reason="exception", detail=f"{type(e).__name__}: {e}"))
    return out


def apply_slow(samples: list[Analysis], jobs: Sequence[SlowJob], outcomes: Sequence[Outcome]) -> None:
    """Write slow verdicts into ``samples`` (in place); failures become ``error`` samples."""
    for job, o in zip(jobs, outcomes):
        s = samples[job.index]
        if o.ok:
            correct, pred, reason = o.value
            samples[job.index] = replace(s, correct=bool(correct), pred=pred if pred is not None else s.pred,
                                         reason=None if correct else reason)
        else:
            samples[job.index] = replace(s, correct=False, error=o.reason or "exception",
                                         reason=o.reason or "exception")


def analyze_group(
    texts: Sequence[str], gold: str, opts: AnalysisOptions, pool: TimeoutPool | None = None
) -> list[Analysis]:
    """Analyse one group's texts against ``gold``; errors become samples with ``error`` set."""
    samples: list[Analysis] = []
    jobs: list[SlowJob] = []
    for i, t in enumerate(texts):
        s, job = analyze_fast(i, t, gold, opts)
        samples.append(s)
        if job is not None:
            jobs.append(job)
    if jobs:
        apply_slow(samples, jobs, run_slow(jobs, pool))
    return samples
