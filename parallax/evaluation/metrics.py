"""Evaluation metrics of the two papers, computed from model outputs.

Definitions (a *problem* has k samples; benchmark numbers average over problems, each weighted 1):

* ``mean@k`` -- mean over problems of (correct samples / k): Parallel-R1's Mean@16 (and MATH Mean@1).
* ``pass@j`` -- the unbiased estimator ``1 - C(n-c, j) / C(n, j)`` per problem (n samples, c correct),
  averaged over problems; defined for ``j <= n``.
* ``parallel_ratio`` (#Parallel, Parason's trigger rate) -- share of samples whose text is well formed
  in the format AND holds at least one parallel block.  ``format_valid`` -- share of well-formed texts.
* ``answered`` -- share of samples with a final answer :func:`rewards.extract.extract_answer` can
  read (``#### x``, ``\\boxed{x}`` or ``Answer: x``); a sample without one scores 0 whatever it did.
* ``first_parallel_pos`` -- mean, over samples with a block, of (token index of the first
  ``<Parallel>``) / (total tokens)  (Parallel-R1 Figure 3).
* ``total_tokens`` / ``critical_path_tokens`` (T, latency) -- means over samples, from
  :func:`parallax.formats.text_stats`: a parallel block counts only its longest branch.  A malformed text
  cannot be executed in parallel, so its T is its total token count.
* ``speedup`` -- mean total tokens / mean T (ratio of means, as Parason's difficulty table:
  21.3k / 12.5k = 1.70x); ``speedup_per_sample`` -- mean of per-sample total/T.
* ``acc@B`` (budget curve, Parason Exp. 2) -- a sample counts as correct under a critical-path
  budget B only if it is correct AND its T <= B; acc@B is mean@k with that rule.  Equivalently:
  decoding stopped once the critical path reaches B tokens, and an unfinished answer is wrong.
* Strata -- MATH ``level`` (1..5); AIME by index terciles of the problem number within the contest
  (1-5 easy, 6-10 medium, 11-15 hard); toy world ``difficulty``; or a sample's explicit ``stratum``.

Token unit: with ``tokenizer=None`` the :mod:`formats` default unit (tags 1, words of text);
pass the checkpoint's tokenizer for real tokens.  Correctness comes from :mod:`rewards`
(``accuracy`` reward: answer after the last join, math-verify), unless a sample carries ``correct``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from parallax import formats
from parallax.formats.spec import format_options
from rewards.extract import extract_answer

__all__ = [
    "PAPER_BUDGETS",
    "Scorer",
    "evaluate_outputs",
    "flatten_metrics",
    "mean_at_k",
    "pass_at_k",
    "sample_stats",
    "score_with_rewards",
    "stratum_of",
]

#: Parason's critical-path budgets at paper scale.
PAPER_BUDGETS: tuple[int, ...] = (2048, 8192, 16384, 24576)

#: ``scorer(groups) -> correct flags``; a group is ``(texts, ground_truth)``.
Scorer = Callable[[list[tuple[list[str], str]]], list[list[bool]]]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with ``n`` samples of which ``c`` are correct.

    ``1 - C(n-c, k) / C(n, k)`` computed as a product (no huge binomials).

    >>> pass_at_k(4, 1, 2)   # 1 - C(3,2)/C(4,2) = 1 - 3/6
    0.5
    """
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError("n, c and k must be ints")
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need n >= 1, 0 <= c <= n, 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    # C(n-c, k)/C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i)
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean_at_k(correct: Sequence[bool]) -> float:
    """Share of correct samples of one problem."""
    if not correct:
        raise ValueError("mean@k of an empty sample list")
    return sum(bool(c) for c in correct) / len(correct)


def sample_stats(text: str, fmt: str, tokenizer: Any = None, parsed: dict | None = None) -> dict[str, Any]:
    """Per-sample numbers: valid, has_parallel, total/critical tokens, speedup, first position, shares.
    `parsed`: the text's `formats.text_stats` in `tokenizer`'s units where a reader already parsed it (a run's
    reward actor: `SampleScore.structure["in_tokens"]`), so it is not parsed again."""
    st = parsed if parsed is not None else formats.text_stats(text, fmt, tokenizer)
    valid = bool(st["valid"])
    total = int(st["total_tokens"] or 0)
    crit = int(st["critical_path_tokens"]) if valid else total  # malformed: nothing runs in parallel
    return {
        "valid": valid,
        "answered": extract_answer(text) is not None,  # a final answer the verifier can read
        "has_parallel": valid and bool(st["num_blocks"]),
        "total_tokens": total,
        "critical_path_tokens": crit,
        "speedup": (total / crit) if crit else 1.0,
        "first_parallel_pos": st["first_parallel_pos"] if valid else None,
        "subtask_share": st["subtask_share"] if valid else 0.0,
        "trial_share": st["trial_share"] if valid else 0.0,
    }


def score_with_rewards(fmt: str, verifier: str = "math_verify") -> Scorer:
    """A scorer using the ``accuracy`` reward in-process (math-verify's own soft timeout)."""
    import rewards

    spec = formats.get_spec(fmt) if isinstance(fmt, str) else fmt
    params = {"format": spec.name, "verifier": verifier, **format_options(spec)}

    def score(groups: list[tuple[list[str], str]]) -> list[list[bool]]:
        return [list(rewards.score_group("accuracy", texts, gt, params=params).correct) for texts, gt in groups]

    return score


def stratum_of(sample: dict, max_number: int | None = None) -> str | None:
    """The difficulty stratum of a sample (see module docstring), or None."""
    if sample.get("stratum") is not None:
        return str(sample["stratum"])
    bench = str(sample.get("benchmark", ""))
    if sample.get("level") is not None:
        return f"level_{sample['level']}"
    if sample.get("difficulty") is not None:
        return f"difficulty_{sample['difficulty']}"
    if bench.startswith("aime") and sample.get("problem_number") is not None:
        top = max_number or 15
        tercile = min(2, (int(sample["problem_number"]) - 1) * 3 // top)
        return ("easy", "medium", "hard")[tercile]
    return None


def _stratum_key(name: str) -> tuple:
    """easy < medium < hard; level_2 < level_10 (numeric); other names alphabetically."""
    order = {"easy": 0, "medium": 1, "hard": 2}
    if name in order:
        return (0, order[name], "")
    head, _, tail = name.rpartition("_")
    return (1, int(tail), head) if tail.isdigit() else (2, 0, name)


def _group(samples: Sequence[dict], k: int | None) -> tuple[dict, int]:
    """{(benchmark, uid): [samples]} keeping the first k of each; checks every problem has k."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for i, s in enumerate(samples):
        for key in ("uid", "text"):
            if key not in s:
                raise ValueError(f"sample {i} has no {key!r} field (fields: {sorted(s)})")
        if "answer" not in s and "correct" not in s:
            raise ValueError(f"sample {i} (uid {s['uid']!r}) has neither 'answer' nor 'correct'")
        groups[(str(s.get("benchmark", "default")), str(s["uid"]))].append(s)
    if not groups:
        raise ValueError("no samples to evaluate")
    fewest = min(len(g) for g in groups.values())
    k = fewest if k is None else k
    if k < 1 or fewest < k:
        short = [u for u, g in groups.items() if len(g) < k][:5]
        raise ValueError(f"k={k} but some problems have fewer samples ({fewest}); e.g. {short}")
    return {key: g[:k] for key, g in groups.items()}, k


def _summary(rows: list[list[dict]], k: int, pass_ks: Sequence[int], budgets: Sequence[int]) -> dict[str, Any]:
    """Aggregate one set of problems (rows = per-problem sample records)."""
    flat = [r for row in rows for r in row]
    n_prob = len(rows)
    out: dict[str, Any] = {"n_problems": n_prob, "n_samples": len(flat)}
    out[f"mean@{k}"] = sum(mean_at_k([r["correct"] for r in row]) for row in rows) / n_prob
    for j in pass_ks:
        if j <= k:
            out[f"pass@{j}"] = sum(pass_at_k(k, sum(r["correct"] for r in row), j) for row in rows) / n_prob
    out["parallel_ratio"] = sum(r["has_parallel"] for r in flat) / len(flat)
    out["format_valid"] = sum(r["valid"] for r in flat) / len(flat)
    out["answered"] = sum(r["answered"] for r in flat) / len(flat)
    pos = [r["first_parallel_pos"] for r in flat if r["has_parallel"] and r["first_parallel_pos"] is not None]
    out["first_parallel_pos"] = sum(pos) / len(pos) if pos else None
    tot = sum(r["total_tokens"] for r in flat) / len(flat)
    crit = sum(r["critical_path_tokens"] for r in flat) / len(flat)
    out["total_tokens"], out["critical_path_tokens"] = tot, crit
    out["speedup"] = tot / crit if crit else 1.0
    out["speedup_per_sample"] = sum(r["speedup"] for r in flat) / len(flat)
    out["subtask_share"] = sum(r["subtask_share"] for r in flat) / len(flat)
    out["trial_share"] = sum(r["trial_share"] for r in flat) / len(flat)
    out["budget_acc"] = {
        str(b): sum(sum(r["correct"] and r["critical_path_tokens"] <= b for r in row) / k for row in rows) / n_prob
        for b in budgets
    }
    return out


def _records(groups: dict, fmt: str, tokenizer: Any, scorer: Scorer | None) -> dict:
    """Per-sample records (stats + correct), scoring only the groups without given ``correct``."""
    todo = [key for key, g in groups.items() if any("correct" not in s for s in g)]
    if todo:
        scorer = scorer or score_with_rewards(fmt)
        flags = scorer([([s["text"] for s in groups[key]], str(groups[key][0]["answer"])) for key in todo])
        scored = dict(zip(todo, flags))
    else:
        scored = {}
    out = {}
    for key, g in groups.items():
        recs = []
        for i, s in enumerate(g):
            r = sample_stats(s["text"], fmt, tokenizer, s.get("parsed"))
            for field in ("critical_path_tokens", "total_tokens"):  # e.g. measured by the executor
                if s.get(field) is not None:
                    r[field] = int(s[field])
            r["correct"] = bool(s["correct"]) if "correct" in s else bool(scored[key][i])
            recs.append(r)
        out[key] = recs
    return out


def evaluate_outputs(samples: list[dict], fmt: str = "parallel_r1", k: int | None = None, *,
                     budgets: Sequence[int] = PAPER_BUDGETS, pass_ks: Sequence[int] | None = None,
                     tokenizer: Any = None, scorer: Scorer | None = None) -> dict[str, Any]:
    """Metrics of model outputs, per benchmark, per stratum and overall.

    ``samples``: dicts with ``uid`` (problem id), ``text`` (the response), ``answer`` (reference)
    and optionally ``benchmark`` (default ``"default"``), strata fields (``level``,
    ``problem_number``, ``difficulty``, ``stratum``), ``correct`` (skip scoring), ``parsed`` (the
    text's ``formats.text_stats`` in ``tokenizer``'s units: skip parsing) and measured
    ``critical_path_tokens`` / ``total_tokens``.  ``k``: samples per problem (default: the fewest
    any problem has; every problem must have at least k, extra samples are ignored).
    ``pass_ks`` default: 1, powers of two below k, and k.

    Returns ``{"format", "k", "budgets", "benchmarks": {name: summary + "strata"}, "overall"}``;
    ``overall["avg_mean@k"]`` is the papers' Avg. column (unweighted mean over benchmarks).
    """
    fmt = formats.get_spec(fmt) if isinstance(fmt, str) else fmt  # clear error for an unknown format
    if any((not isinstance(b, int)) or b < 1 for b in budgets):
        raise ValueError(f"budgets must be positive ints, got {list(budgets)}")
    groups, k = _group(samples, k)
    pass_ks = sorted({1, k, *(2**i for i in range(1, 12) if 2**i < k)} if pass_ks is None else set(pass_ks))
    recs = _records(groups, fmt, tokenizer, scorer)
    by_bench: dict[str, list[tuple[dict, list[dict]]]] = defaultdict(list)
    for (bench, _uid), g in groups.items():
        by_bench[bench].append((g[0], recs[(bench, _uid)]))
    result: dict[str, Any] = {"format": fmt.name, "k": k, "budgets": list(budgets), "pass_ks": pass_ks,
                              "benchmarks": {}}
    for bench, items in sorted(by_bench.items()):
        summ = _summary([r for _, r in items], k, pass_ks, budgets)
        numbers = [int(s["problem_number"]) for s, _ in items if s.get("problem_number") is not None]
        strata: dict[str, list] = defaultdict(list)
        for s, r in items:
            name = stratum_of(s, max(numbers) if numbers else None)
            if name is not None:
                strata[name].append(r)
        summ["strata"] = {name: _summary(strata[name], k, pass_ks, budgets)
                          for name in sorted(strata, key=_stratum_key)}
        result["benchmarks"][bench] = summ
    benches = list(result["benchmarks"].values())
    result["overall"] = {
        f"avg_mean@{k}": sum(b[f"mean@{k}"] for b in benches) / len(benches),
        **_summary(list(recs.values()), k, pass_ks, budgets),
    }
    return result


def flatten_metrics(result: dict[str, Any], prefix: str = "eval") -> dict[str, float]:
    """Slash-namespaced scalars for W&B / the driver's logger: ``eval/<bench>/mean@k``, ..."""
    out: dict[str, float] = {}

    def put(base: str, summ: dict) -> None:
        for key, v in summ.items():
            if key == "budget_acc":
                out.update({f"{base}/acc@{b}": float(x) for b, x in v.items()})
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                out[f"{base}/{key}"] = float(v)

    for bench, summ in result["benchmarks"].items():
        put(f"{prefix}/{bench}", summ)
        for name, s in summ.get("strata", {}).items():
            put(f"{prefix}/{bench}/{name}", s)
    put(f"{prefix}/overall", result["overall"])
    return out
