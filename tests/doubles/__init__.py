"""Stand-ins the tests (and the benchmarks, which put tests/ on their path) use and Parallax does not ship.

* `replay.py`: `Replay`, a logits processor that makes any model write a known script;
* `plans.py`: the weight-sync plan of a whole state dict, the reference the learner's plan is checked against.

Imported as `doubles.*`: under pytest tests/ is on sys.path (tests/conftest.py's folder)."""
