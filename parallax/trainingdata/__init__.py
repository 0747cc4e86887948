"""Parallax's data: what a run trains and is evaluated on, read from files or made.

* :mod:`parallax.trainingdata.rows`, :mod:`parallax.trainingdata.fields` -- the rows of JSONL, JSON and parquet
  files (verl's datasets, rollout dumps) and the dotted fields inside them, for every loader and file tool;
* :mod:`parallax.trainingdata.loaders` -- benchmark loaders (GSM8K, MATH-500, AIME24/25, AMC23, DAPO-Math-17k,
  the toy world's held-out split) and the named teacher-trajectory sets, under the data directory;
* :mod:`parallax.trainingdata.prompts` -- the prompt templates (Parallel-R1's, Parason's rules, plain, raw);
* :mod:`parallax.trainingdata.trajectories` -- SFT examples (teacher traces) and RL prompts from a file, every
  bad row reported by its line;
* :mod:`parallax.trainingdata.convert` -- teacher traces converted between Parallel-R1 and Parason;
* :mod:`parallax.trainingdata.streams` -- the run's streams: the toy world's problems, prompts, one seeded batch
  stream per curriculum stage (`StageStreams`).

This package sits above `contract` (`Prompt`, `DataConfig`), `toyworld`, `rewards` and `formats`, below
the actors; `evaluation` keeps the metrics, reports, plots and its tools (the file tools `python -m
parallax.evaluation stats` and `score` among them). No torch, ray or hydra at import (`datasets` only for a hub name
or a parquet benchmark).
"""

from parallax.trainingdata.loaders import BENCHMARKS, EvalProblem, data_dir, load_benchmark, repair_form_feed
from parallax.trainingdata.prompts import PROMPT_STYLES, build_prompt

__all__ = ["BENCHMARKS", "PROMPT_STYLES", "EvalProblem", "build_prompt", "data_dir", "load_benchmark",
           "repair_form_feed"]
