"""Parallel-GSM8K builder: a teacher writes parallel traces for GSM8K, format-valid correct ones are kept.

Algorithm (Parallel-R1 §cold start): for every GSM8K problem, prompt the teacher zero-shot with the
parallel-thinking prompt of the chosen format (:mod:`parallax.trainingdata.prompts`), take the answer part
(text after ``</think>`` if the teacher thinks), and record

* ``format_valid`` -- the trace parses in the format AND holds at least one parallel block
  (the paper's Table 1 statistic: 83.7% on GSM8K, 0.0% on DAPO for its teacher);
* ``correct`` -- the ``accuracy`` reward's binary verdict against the GSM8K answer;
* ``kept`` = format_valid and correct: the SFT example.

Resumable: ``records.jsonl`` (append-only, one line per processed problem, the only file written
while running) is the source of truth; its uids are the done-set, so a restarted build skips them
(a line cut by a crash is ignored and redone).  ``parallel_gsm8k.jsonl`` (the kept SFT set) and
``stats.json`` are rewritten from the records at the end.  Sharded over Ray tasks (``workers > 0``),
the driver alone appends, so no two processes write one file.

Launch::

    python -m parallax.evaluation build-gsm8k --endpoint http://127.0.0.1:8000 --model Qwen3-8B --format parallel_r1 \\
        --out data/parallel_gsm8k --workers 8 --shard-size 32
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from parallax.evaluation.teachers import EngineTeacher, HTTPTeacher, Teacher
from parallax.trainingdata.loaders import BENCHMARKS, EvalProblem, load_benchmark
from parallax.trainingdata.prompts import build_prompt

__all__ = ["BuildStats", "add_cli", "build_parallel_gsm8k", "process_shard", "read_records", "strip_thinking"]


@dataclass
class BuildStats:
    """Counts over every processed problem (all samples), and the rates the paper reports."""

    problems: int
    samples: int
    format_valid: int
    correct: int
    kept: int
    kept_problems: int

    @property
    def format_valid_rate(self) -> float:
        return self.format_valid / self.samples if self.samples else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["format_valid_rate"] = self.format_valid_rate
        d["correct_rate"] = self.correct / self.samples if self.samples else 0.0
        d["kept_rate"] = self.kept / self.samples if self.samples else 0.0
        return d


def strip_thinking(text: str) -> str:
    """The answer part of a thinking teacher's output (after the last ``</think>``), stripped."""
    return text.rsplit("</think>", 1)[-1].strip()


def process_shard(teacher: Teacher, items: Sequence[dict], fmt: str, n: int, seed: int) -> list[dict]:
    """Teacher completions of ``items`` (uid, question, answer, prompt), judged; one record per item."""
    import rewards
    from parallax import formats

    outs = teacher.complete([it["prompt"] for it in items], n=n, seed=seed)
    records = []
    for it, texts in zip(items, outs):
        traces = [strip_thinking(t) for t in texts]
        correct = rewards.score_group("accuracy", traces, it["answer"], params={"format": fmt}).correct
        samples = []
        for t, c in zip(traces, correct):
            st = formats.text_stats(t, fmt)
            valid = bool(st["valid"]) and bool(st["num_blocks"])
            samples.append({"trace": t, "format_valid": valid, "parse_status": st["status"], "correct": bool(c),
                            "kept": valid and bool(c)})
        records.append({"uid": it["uid"], "question": it["question"], "answer": it["answer"], "samples": samples})
    return records


def read_records(path: Path) -> list[dict]:
    """Complete records of ``records.jsonl`` (a torn last line from a crash is skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a crash: that problem is redone
    return out


def _drop_torn_tail(path: Path) -> None:
    """Cut a partial last line (a crash mid-write) so the next append starts on a fresh line."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def _stats(records: list[dict]) -> BuildStats:
    samples = [s for r in records for s in r["samples"]]
    return BuildStats(problems=len(records), samples=len(samples),
                      format_valid=sum(s["format_valid"] for s in samples), correct=sum(s["correct"] for s in samples),
                      kept=sum(s["kept"] for s in samples),
                      kept_problems=sum(any(s["kept"] for s in r["samples"]) for r in records))


def _shards(problems: Sequence[EvalProblem], done: set[str], size: int, style: str, fmt: str) -> list[list[dict]]:
    todo = [{"uid": p.uid, "question": p.question, "answer": p.answer,
             "prompt": build_prompt(p.question, style, fmt)} for p in problems if p.uid not in done]
    return [todo[i:i + size] for i in range(0, len(todo), size)]


def _run_shards(teacher: Teacher, shards: list[list[dict]], fmt: str, n: int, seed: int, workers: int):
    """Yield each shard's records as it finishes (Ray tasks when ``workers > 0``, else in-process)."""
    if workers <= 0:
        for i, sh in enumerate(shards):
            yield process_shard(teacher, sh, fmt, n, seed + i)
        return
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=max(2, workers), include_dashboard=False, log_to_driver=False)
    # Fractional CPUs: `workers` tasks fit on any cluster size (no placement deadlock: Ray counts CPUs logically).
    task = ray.remote(num_cpus=0.5)(process_shard)
    pending = {}
    queue = list(enumerate(shards))
    while queue or pending:
        while queue and len(pending) < workers:
            i, sh = queue.pop(0)
            pending[task.remote(teacher, sh, fmt, n, seed + i)] = i
        ready, _ = ray.wait(list(pending), num_returns=1)
        pending.pop(ready[0])
        yield ray.get(ready[0])


def build_parallel_gsm8k(teacher: Teacher, out_dir: str | Path, *, problems: Sequence[EvalProblem] | None = None,
                         fmt: str = "parallel_r1", n: int = 1, shard_size: int = 16, workers: int = 0,
                         seed: int = 0, style: str = "parallel", limit: int | None = None,
                         progress: bool = True, meta: dict[str, Any] | None = None) -> BuildStats:
    """Run (or resume) the build into ``out_dir``; returns the statistics over all records.

    ``problems`` default: GSM8K train (the paper's ~7.5k).  ``n`` teacher samples per problem.
    Writes ``records.jsonl`` (append-only), then ``parallel_gsm8k.jsonl`` (kept traces, one row per
    kept sample: uid, question, answer, prompt-free ``trace``) and ``stats.json``.
    """
    if n < 1 or shard_size < 1:
        raise ValueError(f"n and shard_size must be >= 1, got {n}, {shard_size}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rec_path = out / "records.jsonl"
    problems = list(problems) if problems is not None else load_benchmark("gsm8k_train", limit=limit)
    _drop_torn_tail(rec_path)
    done = {r["uid"] for r in read_records(rec_path)}
    shards = _shards(problems, done, shard_size, style, fmt)
    total, start, finished = sum(len(s) for s in shards), time.time(), 0
    with open(rec_path, "a", encoding="utf-8") as f:
        for recs in _run_shards(teacher, shards, fmt, n, seed, workers):
            f.writelines(json.dumps(r) + "\n" for r in recs)
            f.flush()  # a crash loses at most the shard in flight
            finished += len(recs)
            if progress:
                st = _stats(recs)
                print(f"[build-gsm8k] {finished}/{total} new problems ({len(done)} done before), shard "
                      f"format-valid {st.format_valid_rate:.1%}, {finished / (time.time() - start):.2f} problems/s",
                      file=sys.stderr)
    records = read_records(rec_path)
    wanted = {p.uid for p in problems}
    with open(out / "parallel_gsm8k.jsonl", "w", encoding="utf-8") as f:
        for r in records:
            for i, s in enumerate(r["samples"]):
                if s["kept"] and r["uid"] in wanted:
                    f.write(json.dumps({"uid": r["uid"], "sample": i, "question": r["question"],
                                        "answer": r["answer"], "trace": s["trace"], "format": fmt}) + "\n")
    stats = _stats([r for r in records if r["uid"] in wanted])
    (out / "stats.json").write_text(json.dumps({**stats.to_dict(), "format": fmt, "style": style, **(meta or {})},
                                               indent=1))
    return stats


def _teacher_from_args(a: argparse.Namespace) -> Teacher:
    if sum(bool(x) for x in (a.endpoint, a.model_path, a.package)) != 1:
        raise ValueError("give one teacher: --endpoint URL (OpenAI-compatible), --model-path HF_DIR or "
                         "--package NAME (a packaged model, e.g. smollm2_135m)")
    if a.endpoint:
        return HTTPTeacher(a.endpoint, a.model or "default", chat=a.chat, temperature=a.temperature,
                           max_tokens=a.max_tokens)
    path = a.model_path
    if a.package:
        from parallax.models.packaged import materialize

        path = str(materialize(a.package))
    elif not Path(path).is_dir():
        raise FileNotFoundError(f"--model-path {path}: no such directory")
    return EngineTeacher(path, temperature=a.temperature, max_new_tokens=a.max_tokens, engine=a.engine,
                         batch_size=a.batch_size, torch_threads=a.threads,
                         vllm={"enforce_eager": True, "cpu_kvcache_gib": a.kv_gib})


def add_cli(sub: Any) -> None:
    """Register ``build-gsm8k`` on the ``python -m parallax.evaluation`` parser."""
    p = sub.add_parser("build-gsm8k", help="build Parallel-GSM8K with a teacher (resumable)")
    p.add_argument("--endpoint", default=None, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", default=None, help="model name sent to the endpoint")
    p.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    p.add_argument("--model-path", default=None, help="local HF checkpoint (rollout engine) instead")
    p.add_argument("--package", default=None, help="a packaged model (parallax/models/packaged.py), e.g. smollm2_135m")
    p.add_argument("--engine", default="hf", choices=("hf", "vllm"), help="local teacher's engine")
    p.add_argument("--batch-size", type=int, default=64, help="local teacher: prompts per engine batch")
    p.add_argument("--threads", type=int, default=2, help="local teacher: torch threads")
    p.add_argument("--kv-gib", type=int, default=2, help="vLLM on CPU: KV cache GiB")
    p.add_argument("--format", default="parallel_r1", choices=("parallel_r1", "parason"))
    p.add_argument("--benchmark", default="gsm8k_train", choices=sorted(BENCHMARKS),
                   help="problem set (Table 1: gsm8k_train and dapo_math_17k)")
    p.add_argument("--source", default=None, help="problem file or hub name (default: the benchmark's shared file)")
    p.add_argument("--offset", type=int, default=0, help="skip the first N problems")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--n", type=int, default=1, help="teacher samples per problem")
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--shard-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=0, help="Ray tasks in flight (0: no Ray)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)

    def run(a: argparse.Namespace) -> int:
        teacher = _teacher_from_args(a)
        problems = load_benchmark(a.benchmark, a.source)
        problems = problems[a.offset:][:a.limit] if a.limit is not None else problems[a.offset:]
        stats = build_parallel_gsm8k(teacher, a.out, problems=problems, fmt=a.format, n=a.n,
                                     shard_size=a.shard_size, workers=a.workers, seed=a.seed,
                                     meta={"benchmark": a.benchmark, "teacher": repr(teacher)})
        print(json.dumps({**stats.to_dict(), "benchmark": a.benchmark}))
        return 0

    p.set_defaults(run=run)
