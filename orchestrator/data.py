"""Prompts, SFT examples and the learner's padded tensors.

Pure functions between the dataset, the tokenizer and the batch contract. The driver owns
no tensor code beyond calling these.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator

import torch

from orchestrator.batch import Prompt, SFTBatch, TrainBatch, Trajectory
from orchestrator.config import DataConfig


def load_problems(cfg: DataConfig) -> tuple[list, list]:
    """Train and held-out problems for the configured source."""
    if cfg.source == "toyworld":
        import toyworld

        levels = cfg.difficulty if isinstance(cfg.difficulty, int) else tuple(int(d) for d in cfg.difficulty)
        return toyworld.make_splits(cfg.n_train, cfg.n_test, cfg.seed, levels, family=cfg.family,
                                    teacher_error=cfg.teacher_error, teacher_no_answer=cfg.teacher_no_answer,
                                    teacher_serial=cfg.teacher_serial)
    raise ValueError(f"data.source={cfg.source!r} is not available yet; valid: toyworld")


def tokenizer_corpus(cfg: DataConfig) -> list[str]:
    """Text the tiny tokenizer is trained on (the toy world's prompts and all trace kinds)."""
    import toyworld

    return toyworld.corpus(2000, cfg.seed)


def to_prompts(problems: list, tokenizer) -> list[Prompt]:
    ids = tokenizer([p.prompt for p in problems], add_special_tokens=False)["input_ids"]
    return [Prompt(uid=p.uid, text=p.prompt, token_ids=i, ground_truth=p.answer,
                   meta={"family": p.family, "difficulty": p.difficulty})
            for p, i in zip(problems, ids)]


def batches(items: list, size: int, seed: int) -> Iterator[list]:
    """Endless shuffled mini-batches: each epoch is a new permutation (deterministic per seed)."""
    rng = random.Random(seed)
    epoch = list(items)
    while True:
        rng.shuffle(epoch)
        for i in range(0, len(epoch) - size + 1, size):
            yield epoch[i : i + size]


def _pad(rows: list[list], value, dtype) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=dtype)
    return out


def sft_batch(problems: list, trace: str, tokenizer) -> SFTBatch:
    """Prompt + teacher trace + EOS; the loss covers the trace and EOS only (completion-only)."""
    prompts = tokenizer([p.prompt for p in problems], add_special_tokens=False)["input_ids"]
    targets = tokenizer([p.traces[trace] for p in problems], add_special_tokens=False)["input_ids"]
    rows = [p + t + [tokenizer.eos_token_id] for p, t in zip(prompts, targets)]
    loss = [[0.0] * len(p) + [1.0] * (len(t) + 1) for p, t in zip(prompts, targets)]
    ids = _pad(rows, tokenizer.pad_token_id, torch.long)
    mask = _pad([[1] * len(r) for r in rows], 0, torch.long)
    return SFTBatch(ids, mask, _pad(loss, 0.0, torch.float32))


def pack_bins(lengths: list[int], capacity: int) -> list[list[int]]:
    """Item indices grouped into rows whose lengths sum to at most `capacity`; deterministic.

    First-fit decreasing gives the fewest rows it can; the same items dealt again, longest first,
    each to the emptiest of that many rows (ties: the first; one more row while a row overflows),
    give even rows. Every row is padded to the widest, so the layout with fewer cells (rows x
    widest row) wins, FFD on a tie. An item longer than `capacity` gets a row of its own (first),
    never truncated. Items keep decreasing-length order within a row.

    >>> pack_bins([3, 5, 2, 4], 6)  # FFD: 5 | 4 + 2 | 3 (3 x 6 cells); dealt: 5 | 4 | 3 + 2 (3 x 5)
    [[1], [3], [0, 2]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable: ties by index
    fits = [i for i in order if lengths[i] <= capacity]
    ffd: list[list[int]] = []
    room: list[int] = []
    for i in fits:
        k = next((k for k, r in enumerate(room) if lengths[i] <= r), len(ffd))
        if k == len(ffd):
            ffd.append([])
            room.append(capacity)
        ffd[k].append(i)
        room[k] -= lengths[i]
    for n_rows in range(len(ffd), len(fits) + 1):  # one item per row always fits
        dealt: list[list[int]] = [[] for _ in range(n_rows)]
        fill = [0] * n_rows
        for i in fits:
            k = fill.index(min(fill))
            dealt[k].append(i)
            fill[k] += lengths[i]
        if not fill or max(fill) <= capacity:
            break

    def cells(rows: list[list[int]]) -> int:
        return len(rows) * max((sum(lengths[i] for i in r) for r in rows), default=0)

    rows = dealt if cells(dealt) < cells(ffd) else ffd
    return [[i] for i in order if lengths[i] > capacity] + rows


def pack_sft_batch(batch: SFTBatch, pack_length: int) -> SFTBatch:
    """The examples of a right-padded SFT batch concatenated into rows of at most `pack_length` tokens.

    Each example keeps exactly the attention it had alone: it becomes its own segments of the row
    (one segment for a causal example; a structured example's segments, renumbered after those of
    the examples before it), no segment of another example sees them, and its position ids are
    its own (0.. for a causal example). The loss mask moves with the tokens, so the completion
    token count and the token-sum loss are unchanged. Rows are padded to the longest packed row.
    The result always carries the layout tensors (see actors/masks.py), so it is scored with the
    segment mask: block-diagonal causal attention for causal examples.
    """
    lengths = batch.attention_mask.sum(-1).tolist()  # real tokens are a prefix of each row
    pos, seg, vis = batch.structure()
    if seg is None:  # causal examples: one segment, positions 0..n-1
        B, L = batch.input_ids.shape
        pos = torch.arange(L).expand(B, L)
        seg = torch.where(batch.attention_mask.bool(), 0, -1)
        vis = torch.ones(B, 1, 1, dtype=torch.bool)
    n_seg = (seg.amax(-1) + 1).tolist()  # segments of each example
    bins = pack_bins(lengths, pack_length)
    R, width = len(bins), max(sum(lengths[i] for i in b) for b in bins)
    S = max(sum(n_seg[i] for i in b) for b in bins)
    ids = torch.zeros(R, width, dtype=batch.input_ids.dtype)  # padding ids are never seen nor scored
    loss = torch.zeros(R, width, dtype=batch.loss_mask.dtype)
    pos_out = torch.zeros(R, width, dtype=torch.long)
    seg_out = torch.full((R, width), -1, dtype=torch.long)
    vis_out = torch.zeros(R, S, S, dtype=torch.bool)  # block diagonal: one block per example
    for r, members in enumerate(bins):  # Python work per example, never per token
        at, s0 = 0, 0
        for i in members:
            n, k = lengths[i], n_seg[i]
            ids[r, at : at + n] = batch.input_ids[i, :n]
            loss[r, at : at + n] = batch.loss_mask[i, :n]
            pos_out[r, at : at + n] = pos[i, :n]
            seg_out[r, at : at + n] = seg[i, :n] + s0
            vis_out[r, s0 : s0 + k, s0 : s0 + k] = vis[i, :k, :k]
            at, s0 = at + n, s0 + k
    return SFTBatch(ids, (seg_out >= 0).long(), loss, pos_out, seg_out, vis_out)


def train_batch(trajs: list[Trajectory], advantages: list[float], pad_id: int) -> TrainBatch:
    """Right-padded prompt+response rows with the engine's logprobs and broadcast advantages.

    Response token j of a row sits at column len(prompt) + j; `old_logprobs` and the learner's
    `token_logprobs` use the same alignment (column = the token being scored).
    """
    rows = [t.prompt_ids + t.response_ids for t in trajs]
    # Only sampled tokens are trained on: tags an executor forced carry no sampling logprob.
    resp = [[0.0] * len(t.prompt_ids) + ([1.0] * len(t.response_ids) if t.record is None else
                                         [float(x) for x in t.record.sampled[len(t.prompt_ids):]]) for t in trajs]
    old = [[0.0] * len(t.prompt_ids) + list(t.logprobs) for t in trajs]
    adv = [[0.0] * len(t.prompt_ids) + [a] * len(t.response_ids) for t, a in zip(trajs, advantages)]
    return TrainBatch(
        input_ids=_pad(rows, pad_id, torch.long),
        attention_mask=_pad([[1] * len(r) for r in rows], 0, torch.long),
        response_mask=_pad(resp, 0.0, torch.float32),
        old_logprobs=_pad(old, 0.0, torch.float32),
        advantages=_pad(adv, 0.0, torch.float32),
    )


class StageStreams:
    """One shuffled batch stream per curriculum stage, and how many batches each has given.

    A stage's data is `stage.data` (a loader name) or the run's `data.source`. The toy world
    gives SFT examples (with teacher traces) and RL prompts; a real benchmark name
    (gsm8k_train, dapo_math_17k, ...) gives RL prompts through the `evaluation` loaders.
    `consumed` is the data position a checkpoint stores; `fast_forward` replays it.
    """

    def __init__(self, cfg: DataConfig, train: list, tokenizer, seed: int, prompt_style: str = "raw"):
        self.cfg, self.train, self.tokenizer, self.seed = cfg, train, tokenizer, seed
        self.prompt_style = prompt_style
        self.consumed: dict[str, int] = {}
        self._streams: dict[str, Iterator[list]] = {}
        self._sizes: dict[str, int] = {}

    def check(self, stage, batch_size: int) -> None:
        """Fail at setup, not mid-run, when a stage's data cannot be had."""
        source = stage.data or self.cfg.source
        if stage.kind == "sft" and source != "toyworld":
            raise ValueError(f"stage {stage.name!r}: SFT needs teacher traces; data {source!r} has none "
                             "(use toyworld, or build Parallel-GSM8K with `python -m evaluation build-gsm8k`)")
        items = self._items(stage)
        if len(items) < batch_size:
            raise ValueError(f"stage {stage.name!r}: batch {batch_size} > {len(items)} items of {source!r}")

    def _items(self, stage) -> list:
        source = stage.data or self.cfg.source
        if source == "toyworld":
            return self.train if stage.kind == "sft" else to_prompts(self.train, self.tokenizer)
        from evaluation import build_prompt, load_benchmark

        fmt = "parason" if self.cfg.trace == "parason" else "parallel_r1"
        style = "plain" if self.cfg.trace == "serial" else "parallel"
        probs = load_benchmark(source)
        texts = [build_prompt(p.question, style, fmt) for p in probs]
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        return [Prompt(uid=p.uid, text=t, token_ids=i, ground_truth=p.answer, meta=dict(p.meta))
                for p, t, i in zip(probs, texts, ids)]

    def next(self, stage, batch_size: int) -> list:
        key = f"{stage.name}/{batch_size}"
        if key not in self._streams:
            items = self._items(stage)
            self._sizes[key] = len(items)
            # Each stage its own order: two RL stages on one pool must not replay the same prompts.
            self._streams[key] = batches(items, batch_size, zlib.crc32(f"{self.seed}/{stage.name}".encode()))
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
