"""The contract below the driver: batch types and typed configs (the RL math lives by the learner: actors/algo.py).

Imported by the actors, rewards-facing workers, evaluation and the driver alike; it imports
nothing above it (see tests/test_architecture.py).

* `batch.py`: the typed batches between actors (`Prompt`, `Trajectory`, `ExecutionRecord`,
  `TrainBatch`, ...);
* `config.py`: the Hydra schemas, one dataclass per config group, and their checks.
"""
