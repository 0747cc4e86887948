"""A multi-node Ray cluster simulated on this machine (ray.cluster_utils): a head and two nodes with
distinct custom resources. Prints {"address": ...} once every node is up, and shuts the cluster
down when its stdin closes.

    python tests/multinode/sim_cluster.py   # then: python -m orchestrator cluster.address=ADDRESS ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

NODES = {"head": {"num_cpus": 1, "resources": {"head_node": 1}},
         "rollout": {"num_cpus": 2, "resources": {"rollout_node": 1}},
         "learner": {"num_cpus": 2, "resources": {"learner_node": 1}}}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from orchestrator.setup import bind_loopback

    bind_loopback()  # every node on 127.0.0.1, as a local run
    from ray.cluster_utils import Cluster

    mem = 300 << 20
    cluster = Cluster(initialize_head=True, head_node_args={**NODES["head"], "object_store_memory": mem,
                                                             "include_dashboard": False})
    for name in ("rollout", "learner"):
        cluster.add_node(**NODES[name], object_store_memory=mem)
    cluster.wait_for_nodes()
    print(json.dumps({"address": cluster.address}), flush=True)
    sys.stdin.read()
    cluster.shutdown()


if __name__ == "__main__":
    main()
