"""Stand-ins the tests (and the benchmarks, which put tests/ on their path) use and Parallax does not ship.

* `replay.py`: `Replay`, a logits processor that makes any model write a known script.

Imported as `doubles.*`: under pytest tests/ is on sys.path (tests/conftest.py's folder)."""
