"""The cluster/ launch files: the Ray cluster launcher config against Ray's own schema, the KubeRay
RayJob's entrypoint composed as the config it names, and a dry run of slurm.sh with stand-ins for
scontrol, srun, ray and python that record what the script would run."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from parallax.contract.config import register_configs, validate

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
    # the job submitter reaches the dashboard through the head Service: it binds the pod's interfaces
    assert spec["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "0.0.0.0"
    cfg = _compose(_orchestrator_overrides(spec["entrypoint"]))
    assert cfg.cluster.address == "auto" and cfg.rollout.engine == "vllm"


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _slurm_dry_run(tmp_path, *args: str, python: str = "", rc: int = 0) -> list[str]:
    """slurm.sh with stand-ins for scontrol, srun, hostname, ray, python (`python`: more of its body) and
    sleep: the commands it ran (`rc`: the script's exit code)."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    record = f'echo "$(basename "$0") $*" >> {calls}\n'
    _stub(bin_dir, "scontrol", record + 'if [[ $1 == show ]]; then printf "node-a\\nnode-b\\nnode-c\\n"; fi\n')
    # srun -w NODE CMD...: record which node runs what, then run the command (hostname / ray stubs)
    _stub(bin_dir, "srun",
          record + 'while [[ $1 == --* || $1 == -w ]]; do [[ $1 == -w ]] && shift; shift; done; "$@"\n')
    _stub(bin_dir, "hostname", 'echo 10.0.0.1\n')
    _stub(bin_dir, "ray", record)
    _stub(bin_dir, "python", record + python)
    _stub(bin_dir, "sleep", "")
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_NODELIST="node-[a-c]", SLURM_JOB_ID="42")
    out = subprocess.run(["bash", str(ROOT / "cluster" / "slurm.sh"), *args],
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == rc, out.stderr
    return calls.read_text().splitlines()


def test_slurm_script_dry_run_starts_head_workers_then_the_run(tmp_path):
    lines = _slurm_dry_run(tmp_path, "+experiment=smoke", "learner.num_actors=2")
    heads = [x for x in lines if x.startswith("ray start --head")]
    workers = [x for x in lines if x.startswith("ray start --address")]
    runs = [x for x in lines if x.startswith("python -m orchestrator")]
    assert len(heads) == 1 and "--node-ip-address=10.0.0.1" in heads[0] and "--port=6379" in heads[0]
    assert "--dashboard-host=127.0.0.1" in heads[0]
    assert workers == ["ray start --address=10.0.0.1:6379 --block"] * 2
    assert runs == [("python -m orchestrator cluster.address=10.0.0.1:6379 cluster.shared_fs=true "
                     "hydra.run.dir=runs/slurm-42 resume=auto +experiment=smoke learner.num_actors=2")]
    assert next(x for x in lines if x.startswith("srun")).split()[-1] == "--ip-address"  # hostname on the head
    assert "-w node-a" in next(x for x in lines if x.startswith("srun") and "--head" in x)
    # the overrides it passes compose as a run's config
    assert _compose(_orchestrator_overrides(runs[0])).cluster.address == "10.0.0.1:6379"
    assert not any(x.startswith("scontrol requeue") for x in lines)  # the run ended by itself: no requeue


def test_slurm_script_names_the_data_and_asks_for_the_nodes_memory(tmp_path, monkeypatch):
    """Every launcher says where the data is (PARALLAX_DATA_DIR, which the paper experiment's SFT stage
    reads), and asks for the memory the driver and the actors need (issue 50, item 6)."""
    monkeypatch.delenv("PARALLAX_DATA_DIR", raising=False)
    lines = _slurm_dry_run(tmp_path, python=f'echo "data=$PARALLAX_DATA_DIR" >> {tmp_path / "calls.log"}\n')
    assert f"data={Path.cwd() / 'data'}" in lines, lines
    assert re.search(r"^#SBATCH --mem=0$", (ROOT / "cluster" / "slurm.sh").read_text(), re.MULTILINE)


def test_slurm_script_passes_the_time_limit_signal_to_the_driver_and_requeues_on_75(tmp_path):
    """Slurm's `--signal=B:USR1@300` reaches the batch shell only: the script hands it to the driver, and
    when the driver saved and exited 75 (orchestrator/stops.py) it requeues the job, which resumes."""
    text = (ROOT / "cluster" / "slurm.sh").read_text()
    assert "#SBATCH --signal=B:USR1@300" in text and "#SBATCH --requeue" in text
    driver = ('trap \'echo "driver USR1" >> ' + str(tmp_path / "calls.log") + '; exit 75\' USR1\n'
              'kill -USR1 $PPID\n'  # as Slurm would, 300 s before the time limit: to the batch shell
              'while :; do read -t 0.1 || true; done\n')
    lines = _slurm_dry_run(tmp_path, "+experiment=smoke", python=driver, rc=75)
    assert "scontrol requeue 42" in lines and lines.index("driver USR1") < lines.index("scontrol requeue 42"), lines


# ---- each launcher runs the paper experiment, set for its platform, on resources that place it -----------

def _bundles(cfg) -> list[tuple[float, float]]:
    """(CPUs, GPUs) of every bundle the run reserves (orchestrator/setup.py build_groups)."""
    from orchestrator.setup import bundle_specs

    return [(b.num_cpus, b.num_gpus) for b in bundle_specs(cfg) for _ in range(b.count)]


def _places(bundles, nodes: list[tuple[float, float]]) -> bool:
    """Whether every bundle fits on some node (first fit, largest GPU asks first)."""
    free = [list(n) for n in nodes]
    for cpus, gpus in sorted(bundles, key=lambda b: (-b[1], -b[0])):
        node = next((n for n in free if n[0] >= cpus and n[1] >= gpus), None)
        if node is None:
            return False
        node[0] -= cpus
        node[1] -= gpus
    return True


def _ray_cluster(tmp_path):
    text = (ROOT / "cluster" / "ray_cluster.yaml").read_text()
    run = next(line.split("Run:", 1)[1] for line in text.splitlines() if line.startswith("# Run:"))
    config = yaml.safe_load(text)
    types = config["available_node_types"]
    nodes = [(types[config["head_node_type"]]["resources"]["CPU"], types[config["head_node_type"]]["resources"]["GPU"])]
    for name, t in types.items():
        if name != config["head_node_type"]:
            nodes += [(t["resources"]["CPU"], t["resources"].get("GPU", 0))] * t["min_workers"]
    return run.split(" -- ", 1)[1], nodes, False  # the job's entrypoint, after `ray job submit ... --`; no shared fs


def _rayjob(tmp_path):
    job = yaml.safe_load((ROOT / "cluster" / "rayjob.yaml").read_text())["spec"]
    head = job["rayClusterSpec"]["headGroupSpec"]
    groups = [(head["template"]["spec"], 1), *((g["template"]["spec"], g["replicas"])
                                                for g in job["rayClusterSpec"]["workerGroupSpecs"])]
    nodes = []
    for spec, replicas in groups:
        # Ray's object store lives in /dev/shm: a pod has it only as a mounted memory volume
        shm = {v["name"] for v in spec["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"}
        for c in spec["containers"]:
            assert any(m["mountPath"] == "/dev/shm" and m["name"] in shm for m in c["volumeMounts"]), c["name"]
            limits = c["resources"]["limits"]
            nodes += [(float(limits["cpu"]), float(limits.get("nvidia.com/gpu", 0)))] * replicas
    return job["entrypoint"], nodes, False


def _slurm(tmp_path):
    text = (ROOT / "cluster" / "slurm.sh").read_text()
    sb = dict(line.removeprefix("#SBATCH --").partition("=")[::2]
              for line in text.splitlines() if line.startswith("#SBATCH --"))
    run = next(x for x in _slurm_dry_run(tmp_path) if x.startswith("python -m orchestrator"))  # no arguments
    return run, [(float(sb["cpus-per-task"]), float(sb["gpus-per-node"]))] * int(sb["nodes"]), True


@pytest.mark.parametrize("launcher", [_ray_cluster, _rayjob, _slurm], ids=["ray_cluster", "rayjob", "slurm"])
def test_every_launcher_runs_the_paper_experiment_set_for_its_platform(tmp_path, launcher):
    command, nodes, shared = launcher(tmp_path)
    overrides = _orchestrator_overrides(command)
    assert "+experiment=paper/parallel_r1_seen" in overrides, command  # not the toy world
    cfg = _compose(overrides)
    assert cfg.model.path and cfg.rollout.engine == "vllm" and cfg.learner.num_gpus == 1
    # an engine on each learner's GPU: the run reserves the learners' GPUs and no other
    assert cfg.rollout.colocate and cfg.rollout.num_actors == cfg.learner.num_actors
    assert sum(g for _, g in _bundles(cfg)) == cfg.learner.num_actors * cfg.learner.num_gpus
    assert cfg.cluster.shared_fs is shared  # cloud nodes and pods share no filesystem; a SLURM cluster does
    assert _places(_bundles(cfg), nodes), (_bundles(cfg), nodes)
    assert not _places(_bundles(cfg), nodes[:-1]), "the check must be able to fail: one node fewer"
