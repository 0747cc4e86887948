"""Sampling seeds: how a run derives the seed of every generation, in one place, so that no two streams
meet.

* An RL step samples with `step_seed(step, trainer.seed)`: the step, plus a stride times the run's seed
  (seed 0: the step alone; runs with other seeds never share a stream for runs under ~7.9M steps).
* Held-out evaluation samples with `EVAL_SEED` at every stage, so stages differ by their weights only.
* A generation split over rollout actors gives actor i `chunk_seed(seed, i)`.
* A sub-stream of one generation -- a dynamic-sampling round, a request executor's round, one request of
  a batch -- is `substream(seed, kind, index)`: splitmix64 of the three, in [2**32, 2**53). It lies above
  every step and evaluation seed, and two sub-streams meet only by a 64-bit hash collision. (The streams
  used to be `seed + 1_000_003 * round` and `seed + i`: round 1 of step 0 was the evaluation's stream,
  and request i of step t was request i - 1 of step t + 1.)
"""

from __future__ import annotations

EVAL_SEED = 1_000_003
RUN_STRIDE = 7_919_993

# the kinds of sub-stream (any distinct small ints)
DYNAMIC_ROUND = 1  # orchestrator: a dynamic-sampling round's fresh prompts
EXECUTOR_ROUND = 2  # parallax/executors/requests.py: one round of forked requests
REQUEST = 3  # engines: one request of a batch (vLLM on CUDA seeds each request)

_MASK = (1 << 64) - 1
_LOW, _HIGH = 1 << 32, 1 << 53  # sub-streams: above every step seed; times CHUNKS, still a 63-bit seed
CHUNKS = 1009


def step_seed(step: int, run_seed: int) -> int:
    """The sampling seed of RL step `step` of a run with trainer.seed `run_seed`."""
    return step + RUN_STRIDE * run_seed


def chunk_seed(seed: int, chunk: int) -> int:
    """The seed rollout actor `chunk` (< CHUNKS) samples its share of a generation with."""
    if not 0 <= chunk < CHUNKS:
        raise ValueError(f"chunk {chunk}: a generation splits over at most {CHUNKS} rollout actors")
    return seed * CHUNKS + chunk


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def substream(seed: int, kind: int, index: int) -> int:
    """The seed of sub-stream `index` of `kind` under `seed`: index 0 is `seed` itself (a call's first
    round or request keeps the call's stream); every other index is deterministic, in [2**32, 2**53)."""
    if seed < 0 or index < 0:
        raise ValueError(f"seeds and indices are non-negative, got seed={seed}, index={index}")
    if index == 0:
        return seed
    h = _splitmix64(_splitmix64(_splitmix64(seed & _MASK) ^ kind) ^ index)
    return _LOW + h % (_HIGH - _LOW)
