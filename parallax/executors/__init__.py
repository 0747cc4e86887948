"""The executors of `<Parallel>` blocks: the parallel formats run for real, every branch its own engine request.

* `tracker.py`: the tag state machine (fork, join, forced tags, caps) both executors drive;
* `record.py`: the execution record built from the segments each request emitted;
* `base.py`: the bookkeeping both executors share (trajectories, chains, groups, caps, fork/join);
* `kv.py`: the KV executor, one decode loop that forks the prefix KV and merges branch KV at a join
  (hf engine), over `decode_batch.py`'s batch of sequences;
* `requests.py`: the request executor, whole engine requests that stop where it acts (any engine).

Both executors take an optional logits processor (`base.Processor`): the tests' replay double
(`tests/doubles/replay.py`) makes any model write a known script through it.

What the records mean for the learner: `parallax.contract.batch.ExecutionRecord`.
"""
