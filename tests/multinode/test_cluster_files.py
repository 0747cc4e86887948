"""The cluster/ launch files: the Ray cluster launcher config against Ray's own schema, the KubeRay
RayJob's entrypoint composed as the config it names, and a dry run of slurm.sh with stand-ins for
scontrol, srun, ray and python that record what the script would run."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from contract.config import register_configs, validate

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides + ["run_dir=/tmp/x"])
    return validate(cfg)


def _orchestrator_overrides(command: str) -> list[str]:
    words = shlex.split(command)
    i = words.index("orchestrator")
    assert words[i - 2:i] == ["python", "-m"], command
    return words[i + 1:]


def test_ray_cluster_yaml_matches_rays_schema():
    import jsonschema
    import ray

    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    config = yaml.safe_load((ROOT / "cluster" / "ray_cluster.yaml").read_text())
    jsonschema.validate(config, schema)
    assert config["head_node_type"] in config["available_node_types"]
    assert any("--dashboard-host=127.0.0.1" in c for c in config["head_start_ray_commands"])


def test_a_broken_cluster_yaml_is_refused_by_the_schema():
    import jsonschema
    import ray

    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    config = yaml.safe_load((ROOT / "cluster" / "ray_cluster.yaml").read_text())
    config["max_workers"] = "four"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config, schema)


def test_rayjob_entrypoint_composes_and_validates():
    job = yaml.safe_load((ROOT / "cluster" / "rayjob.yaml").read_text())
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    spec = job["spec"]
    assert spec["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "127.0.0.1"
    cfg = _compose(_orchestrator_overrides(spec["entrypoint"]))
    assert cfg.cluster.address == "auto" and cfg.rollout.engine == "vllm"


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_slurm_script_dry_run_starts_head_workers_then_the_run(tmp_path):
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    record = f'echo "$(basename "$0") $*" >> {calls}\n'
    _stub(bin_dir, "scontrol", 'printf "node-a\\nnode-b\\nnode-c\\n"\n')
    # srun -w NODE CMD...: record which node runs what, then run the command (hostname / ray stubs)
    _stub(bin_dir, "srun", record + 'while [[ $1 == --* || $1 == -w ]]; do [[ $1 == -w ]] && shift; shift; done; "$@"\n')
    _stub(bin_dir, "hostname", 'echo 10.0.0.1\n')
    _stub(bin_dir, "ray", record)
    _stub(bin_dir, "python", record)
    _stub(bin_dir, "sleep", "")
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_NODELIST="node-[a-c]")
    out = subprocess.run(["bash", str(ROOT / "cluster" / "slurm.sh"), "+experiment=smoke", "learner.num_actors=2"],
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    lines = calls.read_text().splitlines()
    heads = [x for x in lines if x.startswith("ray start --head")]
    workers = [x for x in lines if x.startswith("ray start --address")]
    runs = [x for x in lines if x.startswith("python -m orchestrator")]
    assert len(heads) == 1 and "--node-ip-address=10.0.0.1" in heads[0] and "--port=6379" in heads[0]
    assert "--dashboard-host=127.0.0.1" in heads[0]
    assert workers == ["ray start --address=10.0.0.1:6379 --block"] * 2
    assert runs == ["python -m orchestrator cluster.address=10.0.0.1:6379 +experiment=smoke learner.num_actors=2"]
    assert next(x for x in lines if x.startswith("srun")).split()[-1] == "--ip-address"  # hostname on the head
    assert "-w node-a" in next(x for x in lines if x.startswith("srun") and "--head" in x)
    # the overrides it passes compose as a run's config
    assert _compose(_orchestrator_overrides(runs[0])).cluster.address == "10.0.0.1:6379"
