"""The launchers as the paper run needs them (issue 50, item 6): code shipped the Ray way (a job's working
directory) or in the image cluster/Dockerfile builds, never cloned from a placeholder; the data's place in
one setting, PARALLAX_DATA_DIR, set by each; the head's object store large enough for the packed model."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
# Qwen3-4B-Base's safetensors (bf16, 4.02 B parameters): what the driver packs into the object store once
PAPER_MODEL_BYTES = 8.05e9


def _submit_words() -> list[str]:
    text = (CLUSTER / "ray_cluster.yaml").read_text()
    return shlex.split(next(line.split("Run:", 1)[1] for line in text.splitlines() if line.startswith("# Run:")))


def test_the_ray_cluster_run_is_a_job_whose_working_directory_is_the_checkout():
    words = _submit_words()
    assert words[:3] == ["ray", "job", "submit"] and "--" in words, words
    env_file = ROOT / words[words.index("--runtime-env") + 1]
    env = yaml.safe_load(env_file.read_text())
    from ray.runtime_env import RuntimeEnv

    RuntimeEnv(**env)  # Ray's own validation of the fields
    assert env["working_dir"] == "." and ".git" in env["excludes"]
    assert env["env_vars"]["PARALLAX_DATA_DIR"] == "data"  # data/ of the working directory
    text = (CLUSTER / "ray_cluster.yaml").read_text()
    assert "example.invalid" not in text and "git clone" not in text


def test_the_rayjob_runs_the_image_the_dockerfile_builds_and_names_the_data():
    job = yaml.safe_load((CLUSTER / "rayjob.yaml").read_text())
    docker = (CLUSTER / "Dockerfile").read_text()
    assert "pip install" in docker and "requirements/constraints-gpu.txt" in docker and '".[gpu]"' in docker
    data = re.search(r"^ENV PARALLAX_DATA_DIR=(\S+)$", docker, re.MULTILINE).group(1)
    env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert env["env_vars"]["PARALLAX_DATA_DIR"] == data  # where the image put the data
    assert "cluster/Dockerfile" in (CLUSTER / "rayjob.yaml").read_text()


def _bytes(quantity: str) -> float:
    units = {"Gi": 2**30, "Mi": 2**20, "G": 1e9, "M": 1e6}
    for unit, size in units.items():
        if quantity.endswith(unit):
            return float(quantity.removesuffix(unit)) * size
    return float(quantity)


def test_the_heads_object_store_holds_the_packed_paper_model():
    """The driver puts the model's files into the head's object store (cluster.shared_fs=false): 8 Gi of
    /dev/shm could not hold Qwen3-4B's 8.05 GB beside anything else."""
    head = yaml.safe_load((CLUSTER / "rayjob.yaml").read_text())["spec"]["rayClusterSpec"]["headGroupSpec"]
    store = float(head["rayStartParams"]["object-store-memory"])
    pod = head["template"]["spec"]
    shm = next(_bytes(v["emptyDir"]["sizeLimit"]) for v in pod["volumes"] if v["name"] == "shm")
    memory = _bytes(pod["containers"][0]["resources"]["limits"]["memory"])
    assert 2 * PAPER_MODEL_BYTES <= store <= shm < memory, (store, shm, memory)
    cluster = yaml.safe_load((CLUSTER / "ray_cluster.yaml").read_text())
    start = next(c for c in cluster["head_start_ray_commands"] if "ray start --head" in c)
    store = float(re.search(r"--object-store-memory=(\d+)", start).group(1))
    assert 2 * PAPER_MODEL_BYTES <= store <= 32 * 2**30  # m6i.4xlarge: 64 GiB, /dev/shm half of it
