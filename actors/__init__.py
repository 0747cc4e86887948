"""Ray actors: the only place `ray.remote` makes an actor (`group.py`), around plain worker classes
(Parallax's two Ray tasks, `orchestrator.setup`'s rendezvous and `parallax.evaluation.builder`'s shards, are made
where they run).

* `rollout.py`: an engine (parallax/engines/) and, for the parallel modes, an executor (parallax/executors/);
* `reward_worker.py`: batch reward scoring (`rewards.scorer`);
* `learner.py`: a DeepSpeed ZeRO engine applying GRPO / SFT updates on the layouts' rows (parallax/layouts/);
* `algo.py`: the RL math: GRPO advantages (the driver's, per group), the clipped policy loss, KL and the
  chunked token logprobs, through verl's functions.

The learner and rollout workers' weight-sync methods (`open_sync`, `send_weights`, `receive_weights`,
`load_weights`, ...) are thin entry points; how weights reach an engine is `parallax/weightsync/`.
"""
