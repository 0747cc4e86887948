"""Shared fixtures: a tiny model built once per session (and loaded per module), the real data directory,
one local Ray cluster."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# The tiers, chosen here and nowhere else. PARALLAX_TIER=vllm keeps only the `vllm`-marked tests (and
# a missing vLLM is then an error: the tier must run, never skip); PARALLAX_TIER=rest keeps everything
# else. Unset, every test is collected (the vLLM ones skip where vLLM is not installed). The tier is
# applied on top of any `-m` expression the user gives, never instead of it: the two compose. A test
# that shares a run with vLLM tests says so (`@pytest.mark.tier("vllm")`) and runs in their process.
TIERS = ("vllm", "rest")


def _tier_of(item) -> str:
    marker = item.get_closest_marker("tier")
    if marker is not None:
        if marker.args[0] not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: tier({marker.args[0]!r}): expected one of {', '.join(TIERS)}")
        return marker.args[0]
    return "vllm" if "vllm" in item.keywords else "rest"


def _tier() -> str | None:
    tier = os.environ.get("PARALLAX_TIER") or None
    if tier not in (None, *TIERS):
        raise pytest.UsageError(f"PARALLAX_TIER={tier!r}: expected one of {', '.join(TIERS)} (or unset)")
    return tier


def pytest_configure(config):
    if _tier() == "vllm":
        import vllm  # noqa: F401


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    from parallax import toyworld
    from parallax.tinylm import TinyModelConfig, build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny"), TinyModelConfig(), toyworld.corpus(500, 0)))


@pytest.fixture(scope="module")
def lm(tiny_model_path):
    """(model, tokenizer) of the tiny model in fp32, scored on one thread (deterministic sums)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield (AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval(),
           AutoTokenizer.from_pretrained(tiny_model_path))
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def real_data():
    """The data directory (`parallax.trainingdata.loaders.data_dir`), or a skip where its real files are missing."""
    from parallax.trainingdata.loaders import data_dir

    d = data_dir()
    if not (d / "gsm8k" / "test.jsonl").is_file():
        pytest.skip(f"real data not found under {d} (set PARALLAX_DATA_DIR)")
    return d


@pytest.fixture(scope="session")
def sft_sample(real_data):
    """The Parallel-GSM8K sample in verl's parquet schema (`prompt` chat, `output`, `reward_model`)."""
    path = real_data / "parallel_r1" / "gsm8k_parallel_sft_sample.parquet"
    if not path.is_file():
        pytest.skip(f"real sample not found: {path}")
    return path


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster for every Ray test (starting one costs ~7 s)."""
    import ray

    from orchestrator.setup import start_cluster
    from parallax.contract.config import ClusterConfig

    start_cluster(ClusterConfig(num_cpus=4, include_dashboard=False))
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def attach(ray_cluster) -> str:
    """`cluster.address=<the session cluster>`: an end-to-end run given this override joins the session's
    cluster instead of starting one of its own (~7 s each here, and as long again to stop). Each run is a
    Ray job of its own, in its own namespace: its actors and placement group go when its driver ends.
    Runs whose test is about start-up, the dashboard, the network, or a killed driver start their own."""
    return f"cluster.address={ray_cluster.get_runtime_context().gcs_address}"


@pytest.fixture(autouse=True)
def _cluster_left_running(request):
    """A test never ends the session's cluster: the tests after it would start a default one unseen."""
    running = "ray" in sys.modules and sys.modules["ray"].is_initialized()
    yield
    if running and not sys.modules["ray"].is_initialized():
        pytest.fail(f"{request.node.nodeid} shut down the session's Ray cluster")


RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "GLOO_SOCKET_IFNAME")


@pytest.fixture(autouse=True)
def _rendezvous_left_behind():
    """A learner built in this process (tests/actors/) sets its rendezvous in `os.environ`; it goes with the
    test. Left behind, every process started later inherits it: TRL's single process (bench_peer, bench_oracle)
    then listens on that port, which another process may hold by then (EADDRINUSE failed a CI)."""
    before = {k: os.environ.get(k) for k in RENDEZVOUS}
    yield
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """The tier's tests only (PARALLAX_TIER, above); each test module one pytest-xdist group (under
    `-n 2 --dist loadgroup`, should a run use it: a module-scoped run is built by one worker, never
    twice), unless the module names a group of its own (`xdist_group`: modules that share a session run);
    `gpu`-marked tests run only where CUDA is available (the device machine)."""
    for item in items:
        if not any(item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    tier = _tier()
    if tier is not None:
        keep = [it for it in items if _tier_of(it) == tier]
        dropped = [it for it in items if _tier_of(it) != tier]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def refused(monkeypatch, capsys, tmp_path):
    """`refused(*overrides)`: `python -m orchestrator OVERRIDES`, run in this process, must exit 2 before
    any Ray start; returns its stderr. One subprocess per kind of refusal stays in the suite (exit code
    and stream as a user sees them: tests/e2e/test_cli.py); the rest are checked here, in seconds."""
    import runpy

    import ray

    import orchestrator.trainer

    def no_ray(*_a, **_k):
        raise AssertionError("a Ray cluster was started or joined before the refusal")

    monkeypatch.setattr(ray, "init", no_ray)
    monkeypatch.setattr(orchestrator.trainer, "start_cluster", no_ray)

    def run(*overrides: str) -> str:
        if not any(o.startswith("hydra.run.dir=") for o in overrides):
            overrides = (*overrides, f"hydra.run.dir={tmp_path / f'refused_{len(list(tmp_path.iterdir()))}'}")
        # Hydra's own logging setup stays off in-process: it would take over pytest's root logger.
        argv = ["orchestrator", *overrides, "hydra/job_logging=none", "hydra/hydra_logging=none"]
        monkeypatch.setattr(sys, "argv", argv)
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            runpy.run_module("orchestrator", run_name="__main__")  # as `python -m orchestrator` does
        err = capsys.readouterr().err
        assert exit_.value.code == 2, err[-2000:]
        return err

    return run
