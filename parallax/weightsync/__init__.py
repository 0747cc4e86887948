"""Weight sync's wire protocol: how the learner's weights reach a rollout engine after every update.

The driver's side, `orchestrator/weights.py` (`EngineWeights`), counts the policy version and picks the
transport; this package is what the learner and the engines run on either end of it:

* collective (default): learner rank 0 and every engine worker form one torch.distributed group
  (`sync_group.py`: NCCL when every member sees CUDA, gloo otherwise). Rank 0 makes the plan once
  (`plan.py`: names, dtypes -- the engines' own, so a bf16 engine gets bf16 -- shapes, buckets, tied
  aliases), every engine gets it in wire form, and each push broadcasts the weights bucket by bucket;
* the same-device hand-off (`handoff.py`): an engine on a learner rank's own GPU maps the buckets that
  rank staged (CUDA IPC; shared memory on CPU);
* object store (`rollout.weight_sync.method=object_store`): rank 0's state dict through Ray's object
  store, loaded by every rollout actor (no code here beyond `receive.py`'s loading).

On the engine side (`receive.py`) the weights are checked against the model's names and loaded: the
hf engine copies them into place, vLLM's workers feed them to their model's own loader.

One level (the layers contract in pyproject.toml): everything here needs torch alone and sits below
`parallax/engines/`, which uses it with the learner and rollout actors; nothing here imports an actor.
"""
