"""Weight sync, in one home: how the learner's weights reach the rollout engines after every update.

After an update the driver's `EngineWeights.push` (`driver.py`) counts the next policy version -- the
run's only count of it -- and hands the learners' weights to every engine over one of two transports:

* collective (default): learner rank 0 and every engine worker form one torch.distributed group
  (`group.py`: NCCL when every member sees CUDA, gloo otherwise), formed on the first push and again
  after an engine was lost. Rank 0 makes the plan once (`plan.py`: names, dtypes -- the engines'
  own, so a bf16 engine gets bf16 -- shapes, buckets, tied aliases), every engine gets it in wire
  form, and each push broadcasts the weights bucket by bucket;
* object store (`rollout.weight_sync.method=object_store`, or when an engine was given learner rank
  0's GPU, where NCCL cannot form): rank 0's state dict goes into Ray's object store once, and every
  rollout actor pulls it.

On the engine side (`receive.py`) the weights are checked against the model's names and loaded: the
hf engine copies them into place, vLLM's workers feed them to their model's own loader. Each rollout
actor records the version it was handed; one that restarted holds version 0 and refuses to sample for
a later one until the next push reaches it.

Two levels (the layers contract in pyproject.toml): `plan`, `group` and `receive` need torch alone and
sit below `engines/` (the engines and the learner and rollout actors use them); `driver` sits above
`actors/`, beside `evaluation/`, and only the orchestrator (and bench/) import it.
"""
