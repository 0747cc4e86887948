"""The start-up warning for a pipeline whose CPU generation and updates would oversubscribe the cores."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from orchestrator.setup import pipeline_threads_warning
from parallax.contract.config import register_configs, validate

CONF = Path(__file__).resolve().parents[2] / "conf"
register_configs()


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return validate(compose("config", overrides=[*overrides, "run_dir=/tmp/x"]))


@pytest.mark.parametrize("overrides,cores,warns", [
    ((), 2, False),  # synchronous: the phases take turns, 2 threads each is right
    (("trainer.max_staleness=1",), 2, True),  # 2 + 2 threads at once on 2 cores
    (("trainer.max_staleness=1",), 4, False),
    (("trainer.max_staleness=1", "rollout.torch_threads=1", "learner.torch_threads=1"), 2, False),
    (("trainer.max_staleness=2", "learner.num_actors=2", "rollout.torch_threads=1", "learner.torch_threads=1"),
     2, True),
    (("trainer.max_staleness=1", "cluster.address=auto"), 2, False),  # a cluster: cores are not this machine's
])
def test_the_pipeline_warns_when_its_threads_exceed_the_cores(overrides, cores, warns):
    said = pipeline_threads_warning(_cfg(*overrides), cores)
    assert (said is not None) == warns
    if warns:
        assert f"on {cores} cores" in said and "rollout.torch_threads=1 learner.torch_threads=1" in said
