"""Shared fixtures: a tiny model built once per session (and loaded per module), one local Ray cluster."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config):
    """Under PARALLAX_REQUIRE_VLLM=1 (CI, the README's vLLM command) a missing vLLM is an error:
    the vLLM tier must run, never skip."""
    if os.environ.get("PARALLAX_REQUIRE_VLLM"):
        import vllm  # noqa: F401


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    import toyworld
    from tinylm import TinyModelConfig, build_tiny_model

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
def ray_cluster():
    """One local Ray cluster for every Ray test (starting one costs ~7 s)."""
    import ray

    from contract.config import ClusterConfig
    from orchestrator.setup import start_cluster

    start_cluster(ClusterConfig(num_cpus=4, include_dashboard=False))
    yield ray
    ray.shutdown()


def pytest_collection_modifyitems(config, items):
    """`gpu`-marked tests run only where CUDA is available (the device machine)."""
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
