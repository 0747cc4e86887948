"""The same-device hand-off (issue 50, item 2): a learner rank stages the plan's buckets in buffers of its
own and shares them; another process on the device maps them and loads the weights bit for bit, no copy
on the way. On CPU the buffers are shared memory by name (the same code path as CUDA IPC, which the
`gpu` test runs); `handoff_pairs` picks which engine takes it from which rank."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from parallax.weightsync.handoff import handoff_pairs, share, unlink
from parallax.weightsync.plan import pack, plan_named, plan_to_wire

ROOT = Path(__file__).resolve().parents[2]

# The receiving process: the handles and the plan on stdin, the weights it loaded (pickled) on stdout.
RECEIVER = r"""
import pickle, sys, torch
from parallax.weightsync.handoff import receive_shared
handles, wire, device = pickle.loads(sys.stdin.buffer.read())
if device == "cuda":
    torch.cuda.set_device(0)
got = {}
n = receive_shared(handles, wire, lambda weights, plan: got.update((k, v.cpu().clone()) for k, v in weights))
sys.stdout.buffer.write(pickle.dumps((n, got)))
"""


def _handed_over(state: dict, device: str) -> tuple[int, dict, int]:
    import pickle

    plan = plan_named(state.items(), bucket_bytes=600)
    bufs = [pack(b, {k: v.to(device) for k, v in state.items()}, device, view=False) for b in plan.buckets]
    handles = [share(b) for b in bufs]  # the learner keeps `bufs` until the receiver has loaded
    out = subprocess.run([sys.executable, "-c", RECEIVER], input=pickle.dumps((handles, plan_to_wire(plan), device)),
                         capture_output=True, cwd=ROOT, timeout=120, check=False)
    unlink(handles)  # loaded: the names go, as the learner's after a hand-off (nothing left in /dev/shm)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    n, got = pickle.loads(out.stdout)
    return n, got, plan.nbytes


def test_another_process_loads_the_staged_buckets_bit_for_bit_on_cpu(state):
    n, got, nbytes = _handed_over(state, "cpu")
    assert n == nbytes and set(got) == set(state)
    assert all(torch.equal(got[k], v) for k, v in state.items())  # the tied head too, from its source


@pytest.mark.gpu
def test_cuda_ipc_hands_the_buckets_to_another_process_on_the_gpu(state):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    n, got, nbytes = _handed_over(state, "cuda")
    assert n == nbytes and all(torch.equal(got[k], v) for k, v in state.items())


def test_an_engine_takes_the_hand_off_only_from_a_rank_on_its_own_one_gpu():
    a, b = "ab" * 28, "cd" * 28  # two nodes
    learners = [{"node": a, "gpus": ["0"]}, {"node": a, "gpus": ["1"]}, {"node": b, "gpus": ["0"]}]
    engines = [({"node": a, "gpus": ["1"]}, 1),  # on rank 1's GPU: from rank 1
               ({"node": b, "gpus": ["0"]}, 1),  # rank 2's, on the other node
               ({"node": a, "gpus": ["2"]}, 1),  # a GPU of its own: the collective
               ({"node": a, "gpus": ["0", "2"]}, 2),  # TP-2, one of its GPUs rank 0's: not a hand-off
               ({"node": b, "gpus": ["1"]}, 1),  # GPU 1 of the other node, no learner there
               ({"node": a, "gpus": []}, 1)]  # CPU
    assert handoff_pairs(learners, engines) == {0: 1, 1: 2}
    assert handoff_pairs([{"node": a, "gpus": []}], [({"node": a, "gpus": []}, 1)]) == {}  # CPU runs: none


def test_a_cpu_engine_takes_the_hand_off_from_the_first_cpu_rank_on_its_node_when_asked():
    """`rollout.weight_sync.cpu_handoff`: shared memory reaches any process on the node, so an engine of one
    worker and no GPU takes the weights from the first learner rank there that has no GPU either."""
    a, b, c = "ab" * 28, "cd" * 28, "ef" * 28
    learners = [{"node": b, "gpus": ["0"]}, {"node": a, "gpus": []}, {"node": a, "gpus": []}, {"node": b, "gpus": []}]
    engines = [({"node": a, "gpus": []}, 1),  # rank 1, the first CPU rank on node a
               ({"node": b, "gpus": []}, 1),  # rank 3: rank 0 there has a GPU
               ({"node": c, "gpus": []}, 1),  # no learner on its node: the collective
               ({"node": a, "gpus": []}, 2),  # two workers: the collective
               ({"node": b, "gpus": ["0"]}, 1)]  # on rank 0's GPU: the GPU hand-off
    assert handoff_pairs(learners, engines, cpu=True) == {0: 1, 1: 3, 4: 0}
    assert handoff_pairs(learners, engines) == {4: 0}
