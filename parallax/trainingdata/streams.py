"""The run's data: problems, prompts and one shuffled batch stream per curriculum stage.

Pure functions between the dataset, the tokenizer and the batch contract; the learner's tensors
are built by the layouts (`parallax/layouts/`).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator

from parallax.contract.batch import Prompt
from parallax.contract.config import DataConfig


def load_problems(cfg: DataConfig) -> tuple[list, list]:
    """Train and held-out problems for the configured source."""
    if cfg.source == "toyworld":
        from dataclasses import replace

        from parallax import toyworld

        per_problem = cfg.teacher_serial if cfg.teacher_serial_per == "problem" else 0.0  # else: per SFT draw
        return toyworld.make_splits(cfg.n_train, cfg.n_test, cfg.seed, toyworld.as_difficulty(cfg.difficulty),
                                    family=cfg.family,
                                    teacher_error=cfg.teacher_error, teacher_no_answer=cfg.teacher_no_answer,
                                    teacher_serial=per_problem, r1_spec=replace(cfg.spec, name="parallel_r1"),
                                    teacher_verify=cfg.teacher_verify, teacher_midfork=cfg.teacher_midfork)
    raise ValueError(f"data.source={cfg.source!r} is not available yet; valid: toyworld")


def show_examples(problems: list, cfg: DataConfig, tokenizer) -> list:
    """The toy `problems` with `data.fewshot` solved problems before each prompt (`parallax.trainingdata.prompts.
    fewshot_prompt`: earlier chat turns); unchanged at 0. ValueError naming `data.fewshot` without a chat
    template."""
    if not cfg.fewshot or cfg.source != "toyworld":
        return problems
    from dataclasses import replace

    from parallax.trainingdata.prompts import fewshot_prompt, toy_shots

    return [replace(p, prompt=fewshot_prompt(tokenizer, p.prompt, toy_shots(p.prompt, cfg.fewshot, cfg.family,
                                                                            cfg.difficulty)))
            for p in problems]


def held_for_rl(problems: list, share: float, rl: bool) -> list:
    """The toy problems an RL stage (``rl``) or an SFT stage draws from when a ``share`` of the distinct
    problems is kept for RL (`data.rl_holdout`): a problem is RL's when a stable hash of its identity
    (`parallax.toyworld.Problem.key`: reorderings are one problem) falls below ``share``, the same in every process.

    >>> from parallax import toyworld
    >>> train = parallax.toyworld.make_splits(200, 0, seed=0)[0]
    >>> rl, sft = held_for_rl(train, 0.3, True), held_for_rl(train, 0.3, False)
    >>> len(rl) + len(sft) == 200, not {p.key for p in rl} & {p.key for p in sft}
    (True, True)
    """
    if share <= 0:
        return problems
    return [p for p in problems if (zlib.crc32(repr(p.key).encode()) / 2**32 < share) == rl]


def tokenizer_corpus(cfg: DataConfig) -> list[str]:
    """Text the tiny tokenizer is trained on (the toy world's prompts and all trace kinds)."""
    from parallax import toyworld

    return toyworld.corpus(2000, cfg.seed)


def to_prompts(problems: list, tokenizer) -> list[Prompt]:
    ids = tokenizer([p.prompt for p in problems], add_special_tokens=False)["input_ids"]
    return [Prompt(uid=p.uid, text=p.prompt, token_ids=i, ground_truth=p.answer,
                   meta={"family": p.family, "difficulty": p.difficulty})
            for p, i in zip(problems, ids)]


def is_file_source(source: str) -> bool:
    """Whether a stage's data names a file (by its extension) rather than a loader."""
    return str(source).endswith((".jsonl", ".json", ".parquet"))


def benchmark_prompts(name: str, cfg: DataConfig, tokenizer, limit: int | None = None) -> list[Prompt]:
    """Prompts of benchmark `name` (a `parallax.trainingdata.loaders` name): the papers' prompts (Parallel-R1's
    own, Parason's format rules, plain for a serial run) through the model's chat template when it has
    one; `meta["benchmark"]` names it. Unknown names and missing files raise, naming them."""
    from parallax.trainingdata.loaders import load_benchmark
    from parallax.trainingdata.prompts import build_prompt, render_prompt

    style = "plain" if cfg.trace == "serial" else "paper"
    probs = load_benchmark(name, limit=limit)
    texts = [render_prompt(tokenizer, build_prompt(p.question, style, cfg.spec)) for p in probs]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [Prompt(uid=p.uid, text=t, token_ids=i, ground_truth=p.answer, meta={**p.meta, "benchmark": name})
            for p, t, i in zip(probs, texts, ids)]


def _named_set(source: str) -> bool:
    from parallax.trainingdata.loaders import TRAJECTORY_SETS

    return source in TRAJECTORY_SETS


def serial_draws(stream: Iterator[list], share: float, seed: int) -> Iterator[list]:
    """`data.teacher_serial_per=draw`: each toy problem an SFT batch draws shows its serial trace as every
    trace kind with probability `share`, a coin of its own per draw (deterministic per seed and position,
    so a resumed run replays it), as `parallax.toyworld.generate` does once per problem otherwise."""
    coins = random.Random(seed)
    for batch in stream:
        yield [p.as_serial() if coins.random() < share else p for p in batch]


def batches(items: list, size: int, seed: int) -> Iterator[list]:
    """Endless shuffled mini-batches: each epoch is a new permutation (deterministic per seed)."""
    rng = random.Random(seed)
    epoch = list(items)
    while True:
        rng.shuffle(epoch)
        for i in range(0, len(epoch) - size + 1, size):
            yield epoch[i : i + size]


class StageStreams:
    """One shuffled batch stream per curriculum stage, and how many batches each has given.

    A stage's data is `stage.data` (a loader name or a file) or the run's `data.source`. The toy world
    gives SFT examples (with teacher traces) and RL prompts; a real benchmark name
    (gsm8k_train, dapo_math_17k, ...) gives RL prompts through the benchmark loaders (`parallax.trainingdata.loaders`);
    an SFT stage on a trajectories file (`.jsonl`, `.json`, `.parquet`: the builder's output, verl's SFT parquet)
    trains on its rows, an RL stage on a file takes its prompts and answers (verl's dataset parquet:
    the chat `prompt` as it is, `reward_model.ground_truth`); `parallax.trainingdata.trajectories` reads both,
    every bad row counted and reported by line (printed, and written to `run_dir/data_<stage>.json`).
    `consumed` is the data position a checkpoint stores; `fast_forward` replays it.
    """

    def __init__(self, cfg: DataConfig, train: list, tokenizer, seed: int, prompt_style: str = "raw",
                 run_dir=None, max_tokens: int | None = None, max_new_tokens: int = 0):
        self.cfg, self.train, self.tokenizer, self.seed = cfg, train, tokenizer, seed
        self.run_dir = run_dir
        # the model's context (rows past it are bad rows of a file) and the rollout's response budget
        self.max_tokens, self.max_new_tokens = max_tokens, max_new_tokens
        self.reports: dict[str, dict] = {}  # stage -> the trajectories file's LoadReport
        self._files: dict[str, list] = {}  # stage -> its file's examples (read once)
        self.prompt_style = prompt_style
        self.consumed: dict[str, int] = {}
        self._streams: dict[str, Iterator[list]] = {}
        self._sizes: dict[str, int] = {}

    def check(self, stage, batch_size: int) -> None:
        """Fail at setup, not mid-run, when a stage's data cannot be had."""
        source = stage.data or self.cfg.source
        if stage.kind == "sft" and source != "toyworld" and not is_file_source(source) and not _named_set(source):
            raise ValueError(f"stage {stage.name!r}: SFT needs teacher traces; data {source!r} has none "
                             "(use toyworld, a trajectories file (.jsonl/.json/.parquet), or build "
                             "Parallel-GSM8K with `python -m parallax.evaluation build-gsm8k`)")
        try:
            items = self._items(stage)
        except (ValueError, FileNotFoundError) as e:
            key = f"curriculum.stages.{stage.name}.data" if stage.data else "data.source"
            raise ValueError(f"{key}={source!r}: {e}") from None
        if len(items) < batch_size:
            raise ValueError(f"stage {stage.name!r}: batch {batch_size} > {len(items)} items of {source!r}")

    def _items(self, stage) -> list:
        source = stage.data or self.cfg.source
        if source == "toyworld":
            pool = held_for_rl(self.train, self.cfg.rl_holdout, stage.kind == "rl")
            if not pool:
                raise ValueError(f"data.rl_holdout={self.cfg.rl_holdout} leaves stage {stage.name!r} no toy problem "
                                 f"of {len(self.train)}")
            return pool if stage.kind == "sft" else to_prompts(pool, self.tokenizer)
        if stage.kind == "sft" and _named_set(source):
            from parallax.trainingdata.loaders import trajectory_file

            return self._file_examples(stage, str(trajectory_file(source)))
        if is_file_source(source):
            return self._file_examples(stage, source)
        return benchmark_prompts(source, self.cfg, self.tokenizer)

    def _file_examples(self, stage, path: str) -> list:
        import json
        import sys
        from pathlib import Path

        from parallax.trainingdata.trajectories import load_prompts, load_trajectories

        if stage.name in self.reports:
            return self._files[stage.name]
        if stage.kind == "sft":
            examples, report = load_trajectories(path, self.cfg.spec, self.cfg.trace, tokenizer=self.tokenizer,
                                                 max_tokens=self.max_tokens)
        else:
            room = None if self.max_tokens is None else self.max_tokens - self.max_new_tokens
            rows, report = load_prompts(path, self.cfg.spec, tokenizer=self.tokenizer, max_tokens=room)
            ids = self.tokenizer([r.prompt for r in rows], add_special_tokens=False)["input_ids"] if rows else []
            examples = [Prompt(uid=r.uid, text=r.prompt, token_ids=i, ground_truth=r.answer, meta={"line": r.line})
                        for r, i in zip(rows, ids)]
        print(f"[parallax] stage {stage.name!r} {stage.kind} data {report.summary()}", file=sys.stderr, flush=True)
        self.reports[stage.name] = report.to_dict()
        if self.run_dir is not None:
            Path(self.run_dir, f"data_{stage.name}.json").write_text(json.dumps(report.to_dict(), indent=1))
        if not examples:
            raise ValueError(f"stage {stage.name!r}: no usable row in {path} ({report.by_code()}; "
                             f"first: {report.bad[:1]})")
        self._files[stage.name] = examples
        return examples

    def next(self, stage, batch_size: int) -> list:
        key = f"{stage.name}/{batch_size}"
        if key not in self._streams:
            items = self._items(stage)
            self._sizes[key] = len(items)
            # Each stage its own order: two RL stages on one pool must not replay the same prompts.
            self._streams[key] = batches(items, batch_size, zlib.crc32(f"{self.seed}/{stage.name}".encode()))
            if (stage.kind == "sft" and (stage.data or self.cfg.source) == "toyworld"
                    and self.cfg.teacher_serial_per == "draw" and self.cfg.teacher_serial > 0):
                self._streams[key] = serial_draws(self._streams[key], self.cfg.teacher_serial,
                                                  zlib.crc32(f"{self.seed}/{stage.name}/teacher_serial".encode()))
        self.consumed[key] = self.consumed.get(key, 0) + 1
        return next(self._streams[key])

    def epoch(self, stage, batch_size: int) -> float:
        """Epochs of the stage's data used so far (the `data/epoch` metric)."""
        key = f"{stage.name}/{batch_size}"
        return self.consumed.get(key, 0) * batch_size / max(1, self._sizes.get(key, 1))

    def fast_forward(self, consumed: dict[str, int], stages: dict) -> None:
        for key, count in consumed.items():
            name, size = key.rsplit("/", 1)
            for _ in range(count):
                self.next(stages[name], int(size))
