"""The executor a tensor-parallel vLLM engine starts inside its rollout actor (issue 50, item 1), read from
vLLM's CPU build: its own `ParallelConfig`, resolved where a rollout actor resolves it -- in a task of a
Ray placement group."""

from __future__ import annotations

import pytest

from parallax.engines.vllm import executor_backend

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")  # tests/conftest.py turns this skip into a failure under PARALLAX_TIER=vllm


def test_a_tensor_parallel_engine_in_a_placement_group_gets_the_multiprocessing_executor(ray_cluster):
    """Inside a placement group vLLM's default for TP > 1 is its Ray executor, which refuses the rollout
    actor's one bundle of `tp` GPUs; the engine names "mp" (workers on the GPUs of its own bundle)."""
    ray = ray_cluster

    def resolved(cases: list[tuple[int, str | None]]) -> list[str]:
        """vLLM's executor for each (tensor_parallel_size, distributed_executor_backend), as its
        ParallelConfig decides it in this task (vLLM's own default where the backend is None)."""
        from vllm.config import ParallelConfig

        return [ParallelConfig(tensor_parallel_size=tp, distributed_executor_backend=b).distributed_executor_backend
                for tp, b in cases]

    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg = placement_group([{"CPU": 0.25}])
    ray.get(pg.ready(), timeout=60)
    try:
        task = ray.remote(num_cpus=0.25)(resolved).options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0))
        cases = [(2, None), (2, executor_backend(2)), (4, executor_backend(4)), (1, executor_backend(1))]
        got = ray.get(task.remote(cases), timeout=120)
    finally:
        remove_placement_group(pg)
    assert got[0] == "ray"  # vLLM's own pick there: the executor that stops a TP engine (parallax/engines/vllm.py)
    assert got[1:] == ["mp", "mp", "uni"]
