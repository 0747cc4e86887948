"""Ray actors: the only place `ray.remote` is applied (`group.py`), around plain worker classes.

* `rollout.py`: an engine (engines/) and, for the parallel modes, an executor (parallel/);
* `reward_worker.py`: batch reward scoring (`rewards.scorer`);
* `learner.py`: a DeepSpeed ZeRO engine applying GRPO / SFT updates on the layouts' rows (layouts/);
* `weight_sync.py`: learner weights to the rollout engines after every update (the collective group
  of engines/collective.py, or the object store).
"""
