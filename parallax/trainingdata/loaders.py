"""Benchmark loaders: GSM8K, DAPO-Math-17k, MATH-500, AIME24, AIME25, AMC23 and the toy world.

Every loader returns a list of :class:`EvalProblem` (uid, benchmark, question, answer, meta).

Where the data comes from (``source`` argument of :func:`load_benchmark`):

* ``None`` (default): the benchmark's file under the data directory -- ``$PARALLAX_DATA_DIR``
  if set, else ``<repo>/../shared/data`` (see ``shared/data/README.md``);
* a path to a ``.jsonl`` / ``.json`` / ``.parquet`` file: that file (missing file: clear error);
* a Hugging Face dataset name (``openai/gsm8k``, optionally ``name:config``): loaded with
  ``datasets.load_dataset`` -- only then is the hub contacted.

DAPO-Math-17k's form-feed flaw (README): 637 problems contain ``"\\x0c"``.  Almost all of them
(606) are ``"\\f"`` of ``\\frac`` turned into a form feed (``"\\x0crac"``); the others are PDF
text-extraction residue next to an ``fi`` ligature (``"fi\\x0cve"``, ``"de\\x0cne"``).
:func:`repair_form_feed` restores ``\\f`` before ``rac`` (the README's repair) and removes the
residue elsewhere, so no form feed survives.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "BENCHMARKS",
    "BenchmarkInfo",
    "EvalProblem",
    "data_dir",
    "load_benchmark",
    "load_records",
    "repair_form_feed",
    "toyworld_problems",
]

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class EvalProblem:
    """One evaluation (or training) problem.

    ``answer`` is the reference answer as a string (GSM8K: the number after ``####``, commas
    removed).  ``meta`` holds what strata need: ``level`` (MATH), ``problem_number`` and
    ``contest`` (AIME/AMC), ``index`` (position in the file), ``difficulty``/``family`` (toy world).
    """

    uid: str
    benchmark: str
    question: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class BenchmarkInfo:
    """Where one benchmark lives locally and on the hub."""

    file: str  # relative to the data directory
    hub: str  # Hugging Face dataset name ("name" or "name:config")
    split: str  # hub split


BENCHMARKS: dict[str, BenchmarkInfo] = {
    "gsm8k": BenchmarkInfo("gsm8k/test.jsonl", "openai/gsm8k:main", "test"),
    "gsm8k_train": BenchmarkInfo("gsm8k/train.jsonl", "openai/gsm8k:main", "train"),
    "math500": BenchmarkInfo("math/math500.jsonl", "HuggingFaceH4/MATH-500", "test"),
    "aime24": BenchmarkInfo("math/aime24.jsonl", "HuggingFaceH4/aime_2024", "train"),
    "aime25": BenchmarkInfo("math/aime25.jsonl", "math-ai/aime25", "test"),
    "amc23": BenchmarkInfo("math/amc23.jsonl", "math-ai/amc23", "test"),
    "dapo_math_17k": BenchmarkInfo("math/dapo_math_17k.jsonl", "BytedTsinghua-SIA/DAPO-Math-17k", "train"),
}


#: Named teacher-trajectory sets for SFT stages (`stage.data: parallel_gsm8k`), under the data
#: directory. On these machines Parallel-GSM8K is the 171-row sample of the public cold-start set (verl's
#: parquet schema); a full copy (or `python -m parallax.evaluation build-gsm8k` output) goes in by path.
#: `parason_traces` stands in for the Parason release's SFT traces, which are not on these machines: the
#: Parallel-GSM8K sample converted (`parallax.trainingdata.convert.convert`: each path a `<Trial>`, its first sentence
#: the outline entry, the summary opening the main chain after the block), with thread headers.
TRAJECTORY_SETS: dict[str, str] = {
    "parallel_gsm8k": "parallel_r1/gsm8k_parallel_sft_sample.parquet",
    "parason_traces": "parallel_r1/gsm8k_parallel_sft_sample.parquet",
}


def trajectory_file(name: str, data_dir_: str | os.PathLike | None = None) -> Path:
    """The file of a named trajectory set; FileNotFoundError naming it and the data directory."""
    path = data_dir(data_dir_) / TRAJECTORY_SETS[name]
    if not path.is_file():
        raise FileNotFoundError(f"trajectory set {name!r}: {path} not found (set PARALLAX_DATA_DIR, or give "
                                "the stage's data as a file path)")
    if name == "parason_traces":
        return _parason_from_r1(path)
    return path


def _parason_from_r1(src: Path) -> Path:
    """`src`'s Parallel-R1 rows as Parason rows (JSONL beside the model cache, rebuilt when `src` changes)."""
    import hashlib

    from parallax.formats import parse, render, with_thread_headers
    from parallax.trainingdata.convert import convert
    from parallax.trainingdata.rows import read_rows

    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:12]
    root = Path(os.environ.get("PARALLAX_DATA_CACHE", Path.home() / ".cache" / "parallax" / "data"))
    out = root / f"parason_traces-{digest}.jsonl"
    if out.is_file():
        return out
    rows = []
    for row in read_rows(src):
        obj = dict(row.data or {})
        try:
            text = convert(obj.get("output", ""), "parallel_r1", "parason")
            obj["output"] = render(with_thread_headers(parse(text, "parason").tree), "parason")
        except ValueError:
            pass  # not convertible: kept as it is, the SFT loader reports it by its line
        rows.append(obj)
    root.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
    os.replace(tmp, out)
    return out


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The data directory: ``path`` if given, else ``$PARALLAX_DATA_DIR``, else ``<repo>/../shared/data``."""
    if path is not None:
        return Path(path)
    env = os.environ.get("PARALLAX_DATA_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


_resolve_dir = data_dir  # load_benchmark's keyword argument shadows the function's name


# --------------------------------------------------------------------------- raw records


def _read_file(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(
            f"benchmark file not found: {path} (set PARALLAX_DATA_DIR or pass data_dir=/source= a file path; "
            "see shared/data/README.md)"
        )
    if path.suffix == ".parquet":
        import datasets

        return [dict(r) for r in datasets.load_dataset("parquet", data_files=str(path), split="train")]
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
        return list(data if isinstance(data, list) else data.get("data", []))
    rows = []
    for i, line in enumerate(text.splitlines()):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i + 1}: not valid JSON ({e.msg})") from e
    return rows


def _read_hub(name: str, split: str) -> list[dict]:
    import datasets  # lazy: only a hub name needs it

    repo, _, config = name.partition(":")
    ds = datasets.load_dataset(repo, config or None, split=split)
    return [dict(r) for r in ds]


def _is_file_source(source: str) -> bool:
    return Path(source).exists() or source.endswith((".jsonl", ".json", ".parquet")) or source.startswith((".", "/"))


def load_records(benchmark: str, source: str | None = None, data_dir_: str | os.PathLike | None = None,
                 split: str | None = None) -> list[dict]:
    """Raw rows of ``benchmark`` from the default file, a given file, or a hub dataset name."""
    info = BENCHMARKS.get(benchmark)
    if source is None:
        if info is None:
            raise ValueError(f"unknown benchmark {benchmark!r}; known: {sorted(BENCHMARKS)} or pass source=")
        return _read_file(data_dir(data_dir_) / info.file)
    if _is_file_source(source):
        return _read_file(Path(source))
    return _read_hub(source, split or (info.split if info else "test"))


# --------------------------------------------------------------------------- normalisation

_FF_FRAC = re.compile("\x0c(?=rac)")
_FF_NEAR_FI = re.compile("(?<=fi)\x0c|\x0c(?=fi)")
_FF_MID_WORD = re.compile("(?<=[A-Za-z])\x0c(?=[a-z])")


def repair_form_feed(text: str) -> str:
    """Undo DAPO's form-feed damage: ``\\x0crac`` -> ``\\frac``; residue near an ``fi`` ligature is
    dropped; a form feed inside a word stands for a lost ``fi`` ligature; any other becomes a space.

    >>> repair_form_feed("the form \\x0crac{m}{n}, fi\\x0cve, de\\x0cne")
    'the form \\\\frac{m}{n}, five, define'
    """
    if "\x0c" not in text:
        return text
    text = _FF_FRAC.sub(r"\\f", text)
    text = _FF_NEAR_FI.sub("", text)
    text = _FF_MID_WORD.sub("fi", text)
    return text.replace("\x0c", " ")


def _first(row: dict, keys: tuple[str, ...], what: str, where: str) -> Any:
    for k in keys:
        if k in row and row[k] is not None:
            return row[k]
    raise ValueError(f"{where}: row has none of the {what} fields {keys}; fields: {sorted(row)}")


def _gsm8k_answer(ans: str) -> str:
    # "reasoning ... #### 1,234" -> "1234": the reference is the number after the last ####.
    tail = ans.rsplit("####", 1)[-1] if "####" in ans else ans
    return tail.strip().replace(",", "")


def _question(row: dict, where: str) -> str:
    q = _first(row, ("problem", "question", "Problem", "prompt"), "question", where)
    if isinstance(q, list):  # hub DAPO: chat messages
        q = "\n".join(m.get("content", "") for m in q if isinstance(m, dict))
    return str(q)


def _answer(row: dict, where: str) -> str:
    if "answer" not in row and isinstance(row.get("reward_model"), dict):  # hub DAPO schema
        return str(row["reward_model"].get("ground_truth", "")).strip()
    return str(_first(row, ("answer", "Answer", "final_answer"), "answer", where)).strip()


_META_KEYS = ("level", "subject", "unique_id", "id", "contest", "problem_number", "index", "row", "source_id")


def _to_problem(benchmark: str, i: int, row: dict, where: str) -> EvalProblem:
    question = _question(row, f"{where}[{i}]")
    answer = _answer(row, f"{where}[{i}]")
    if benchmark.startswith("gsm8k"):
        answer = _gsm8k_answer(answer)
    if benchmark.startswith("dapo"):
        question = repair_form_feed(question)
    meta = {k: row[k] for k in _META_KEYS if k in row and row[k] is not None}
    meta["position"] = i
    if isinstance(meta.get("level"), str) and meta["level"].strip().lower().startswith("level"):
        meta["level"] = int(meta["level"].split()[-1])  # hub MATH writes "Level 3"
    if "problem_number" in meta:
        meta["problem_number"] = int(meta["problem_number"])
    uid = str(meta.get("unique_id") or meta.get("id") or f"{benchmark}-{i}")
    return EvalProblem(uid=f"{benchmark}/{uid}", benchmark=benchmark, question=question, answer=answer, meta=meta)


def toyworld_problems(n: int = 128, seed: int = 0, difficulty: int | tuple[int, ...] = 1,
                      family: str = "mixed", fewshot: int = 0) -> list[EvalProblem]:
    """The toy world's held-out split (the same problems as ``make_splits(..., n_test=n)``'s test set).

    The prompt is the raw toy prompt (``"Q: ...\\nA:"``, what the tiny model was trained on);
    ``meta`` carries ``difficulty`` and ``family`` for the strata, and with ``fewshot`` the solved
    problems a run with ``data.fewshot`` showed before it (``shots``, `parallax.trainingdata.prompts.toy_shots`).
    """
    from parallax import toyworld
    from parallax.trainingdata.prompts import toy_shots

    _, test = toyworld.make_splits(1, n, seed, difficulty, family=family)
    return [EvalProblem(uid=p.uid, benchmark="toyworld", question=p.prompt, answer=p.answer,
                        meta={"difficulty": p.difficulty, "family": p.family, "position": i, "raw_prompt": True,
                              **({"shots": toy_shots(p.prompt, fewshot, family, difficulty)} if fewshot else {})})
            for i, p in enumerate(test)]


def load_benchmark(benchmark: str, source: str | None = None, *, data_dir: str | os.PathLike | None = None,
                   split: str | None = None, limit: int | None = None, **toy: Any) -> list[EvalProblem]:
    """Problems of ``benchmark`` (a key of :data:`BENCHMARKS`, ``"toyworld"``, or any name with ``source``).

    ``limit`` keeps the first N problems.  ``toy`` are :func:`toyworld_problems` keyword arguments
    (``n``, ``seed``, ``difficulty``, ``family``, ``fewshot``).  Raises ``FileNotFoundError`` naming the path of a
    missing file and ``ValueError`` for an unknown benchmark or a row without question / answer.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if benchmark == "toyworld":
        probs = toyworld_problems(**toy)
    else:
        rows = load_records(benchmark, source, data_dir, split)
        where = source or str(_resolve_dir(data_dir) / BENCHMARKS[benchmark].file)
        probs = [_to_problem(benchmark, i, r, where) for i, r in enumerate(rows)]
    return probs[:limit] if limit else probs
