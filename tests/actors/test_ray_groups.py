"""Real Ray on CPU: placement, named actor groups, weight sync, data-parallel DeepSpeed learners."""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest
import torch

from parallax.contract.config import LearnerConfig, ParallaxConfig, RolloutConfig
from rewards.types import RewardGroup

pytestmark = pytest.mark.slow


def _cfg(**learner) -> ParallaxConfig:
    cfg = ParallaxConfig()
    cfg.rollout = RolloutConfig(num_cpus=0.25, torch_threads=1, n=2, max_new_tokens=8)
    cfg.learner = dataclasses.replace(LearnerConfig(num_cpus=0.25, torch_threads=1, micro_batch_size=2), **learner)
    cfg.reward.num_cpus = 0.25
    return cfg


def _sft_batch(model_path: str):
    from transformers import AutoTokenizer

    from parallax import toyworld
    from parallax.layouts.causal import sft_batch

    tok = AutoTokenizer.from_pretrained(model_path)
    return sft_batch(toyworld.generate("mixed", 8, seed=3), "parallel_r1", tok)


@pytest.fixture(scope="module")
def groups(ray_cluster, tiny_model_path):
    from ray.util import remove_placement_group

    from orchestrator.setup import build_groups

    g = build_groups(_cfg(), tiny_model_path, "test-groups")
    yield g
    for group in (g.rollout, g.reward, g.learner):
        for a in group.actors:
            ray_cluster.kill(a)
    remove_placement_group(g.placement_group)


def test_groups_are_named_and_placed(ray_cluster, groups):
    from ray.util.placement_group import placement_group_table

    for role in ("rollout_0", "reward_0", "learner_0"):
        assert ray_cluster.get_actor(f"parallax/test-groups/{role}") is not None
    table = placement_group_table(groups.placement_group)
    assert table["state"] == "CREATED" and len(table["bundles"]) == 3


def test_the_reward_actor_counts_the_models_tokens(ray_cluster, groups):
    """PA-GRPO's latency T is the critical path in the model's tokens: a fork on four candidates is shorter
    than checking them one after another (51 against 68 tiny tokens), though in the format's words (a tag
    1, `3*7=21` 1) it is longer (25 against 15), which taught RL to stop forking where it pays."""
    from parallax import toyworld
    from rewards.registry import RewardSpec

    p = toyworld.generate("trial", 1, seed=0, difficulty=3)[0]
    texts = [p.traces["parason"], p.traces["serial"]]
    spec = RewardSpec("pa_grpo", {"alpha": 0.1, "beta_sub": 0.0, "beta_trial": 0.0})
    batch = ray_cluster.get(groups.reward.actors[0].score.remote([RewardGroup(texts, p.answer)],
                                                                 spec=spec))
    fork_t, serial_t = (s.components["latency_T"] for s in batch.scores[0])
    assert batch.correct == [[True, True]]
    assert fork_t < serial_t and serial_t > 40, (fork_t, serial_t)  # tokens: a word count is 15 serial
    assert batch.rewards[0][0] > batch.rewards[0][1]


def test_actors_start_without_what_they_never_use(ray_cluster, groups):
    """Start-up is paid at every run and every restart: a reward actor gets the tokenizer's Rust core and
    loads neither transformers nor torch (~2.8 s of CPU)."""
    loaded = ray_cluster.get(groups.reward.actors[0].__ray_call__.remote(
        lambda w: [m for m in ("transformers", "torch") if m in sys.modules]))
    assert loaded == [], loaded


@pytest.mark.parametrize("method", ["collective", "object_store", "cpu_handoff"])
def test_weight_sync_makes_rollout_equal_learner(ray_cluster, groups, tiny_model_path, method):
    """Every path leaves the engine equal to the learner. `cpu_handoff` (the engine on the learner's node binds
    its parameters to the buffers the rank casts into, `rollout.weight_sync.cpu_handoff`) pushes three times:
    the rank's two sets of buffers in turn, the first one again on the third; and a push staged but not yet
    handed over writes the set the engine does not hold, so the engine's weights stay those it was handed."""
    import dataclasses
    import os

    from orchestrator.weights import CollectiveSync, make_weight_sync
    from parallax.contract.engine import WeightSyncConfig
    from parallax.weightsync.handoff import shm_name

    sync = {"collective": groups.sync, "object_store": make_weight_sync(WeightSyncConfig(method="object_store")),
            "cpu_handoff": CollectiveSync(dataclasses.replace(groups.sync.cfg, cpu_handoff=True), groups.sync.store),
            }[method]
    try:
        for version in (7, 8, 9)[: 3 if method == "cpu_handoff" else 1]:
            before = ray_cluster.get(groups.rollout.actors[0].get_weights.remote())
            stats = ray_cluster.get(groups.learner.async_sft_step(_sft_batch(tiny_model_path), lr=1e-2))
            assert all(torch.isfinite(torch.tensor(s["sft/loss"])) for s in stats)
            figures = sync.push(groups.learner, groups.rollout, version=version)
            assert ray_cluster.get(groups.rollout.actors[0].__ray_call__.remote(lambda w: w.version)) == version
            learner = ray_cluster.get(groups.learner.async_state_dict())
            after = ray_cluster.get(groups.rollout.actors[0].get_weights.remote())
            changed = [k for k in learner if not torch.equal(before[k], learner[k])]
            assert changed, "the SFT step changed no parameter"
            for k, v in learner.items():
                assert torch.equal(after[k], v), k
            # the tied lm_head is embed_tokens: the collective path sends it once, the object store twice
            unique = sum(v.numel() * v.element_size() for k, v in learner.items() if k != "lm_head.weight")
            total = sum(v.numel() * v.element_size() for v in learner.values())
            assert figures["sync/bytes"] == (total if method == "object_store" else unique)
        if method == "cpu_handoff":
            assert sync.transports == {"rollout_0": "handoff"} and figures["sync/handoff_bytes"] == unique
            assert ray_cluster.get(groups.rollout.actors[0].__ray_call__.remote(lambda w: w.engine._bound))
            # both sets were handed over, so their names are gone from /dev/shm (nothing left when the run ends)
            names = [shm_name(h) for h in ray_cluster.get(groups.learner.actors[0].__ray_call__.remote(
                lambda w: [h for s in w._sets for h in s[1]]))]
            assert names and all(names) and not [n for n in names if os.path.exists("/dev/shm" + n)], names
            ray_cluster.get(groups.learner.async_sft_step(_sft_batch(tiny_model_path), lr=1e-2))
            ray_cluster.get([a.send_weights.remote(stage=True) for a in groups.learner.actors])  # not handed over
            held = ray_cluster.get(groups.rollout.actors[0].get_weights.remote())
            assert all(torch.equal(held[k], after[k]) for k in after)  # the engine's set was not written
    finally:
        if method == "cpu_handoff":  # the learner left the fixture's group for this one: the next push forms it anew
            groups.sync.reset(groups.learner, groups.rollout)


def test_a_bf16_engine_gets_the_fp32_learners_weights_cast_and_sent_in_half_the_bytes(ray_cluster, tiny_model_path):
    """`rollout.dtype=bfloat16` beside fp32 learners: the engine holds bf16 weights, each push sends them
    in bf16 (half the bytes) and leaves them equal to the learner's master weights cast to bf16."""
    from ray.util import remove_placement_group

    from orchestrator.setup import build_groups

    cfg = _cfg()
    cfg.rollout.dtype = "bfloat16"
    g = build_groups(cfg, tiny_model_path, "test-bf16-engine")
    try:
        assert ray_cluster.get(g.rollout.actors[0].weights_dtype.remote()) == "bfloat16"
        ray_cluster.get(g.learner.async_sft_step(_sft_batch(tiny_model_path), lr=1e-2))
        figures = g.sync.push(g.learner, g.rollout, version=1)
        learner = ray_cluster.get(g.learner.async_state_dict())
        engine = ray_cluster.get(g.rollout.actors[0].get_weights.remote())
        for k, v in learner.items():
            assert v.dtype == torch.float32 and engine[k].dtype == torch.bfloat16, k
            assert torch.equal(engine[k], v.to(torch.bfloat16)), k
        unique = sum(v.numel() for k, v in learner.items() if k != "lm_head.weight")
        assert figures["sync/bytes"] == 2 * unique
    finally:
        for group in (g.rollout, g.reward, g.learner):
            for a in group.actors:
                ray_cluster.kill(a)
        remove_placement_group(g.placement_group)


def test_reward_actor_scores_groups(ray_cluster, groups):
    out = ray_cluster.get(groups.reward.actors[0].score.remote([RewardGroup(["x #### 4", "x #### 5"], "4")]))
    assert out.correct == [[True, False]]


def _learners(ray_cluster, model_path, world: int, stage: int, **learner):
    from actors.group import BundleSpec, LearnerGroup, reserve
    from actors.learner import LearnerWorker
    from orchestrator.setup import _rendezvous, store_address

    cfg = _cfg(num_actors=world, zero_stage=stage, **learner).learner
    pg, _off = reserve([BundleSpec("learner", world, 0.25, 0.0)], "PACK", name=f"dp{world}-z{stage}")
    addr, (port, _), tmp = ray_cluster.get(_rendezvous.remote())
    init = store_address(True, addr, port, tmp, f"dp{world}-z{stage}")
    return LearnerGroup("learner", LearnerWorker, world, pg, 0, 0.25, 0.0,
                        lambda i: {"cfg": cfg, "model_path": model_path, "dtype": "float32", "rank": i,
                                   "world_size": world, "init_method": init, "master_port": port},
                        f"dp{world}-z{stage}"), pg


def test_two_zero3_learners_match_one_learner(ray_cluster, tiny_model_path, tmp_path):
    """Two ZeRO-3 ranks against one ZeRO-1 rank. Export: ZeRO-3 gathers one bucket's parameters at a
    time (never the whole model), and its weights -- the state dict, and what the collective sync
    sends -- equal ZeRO-1's bit for bit. Data parallel over gloo: 2 ranks x half the batch == 1 rank x
    the whole batch."""
    from doubles.plans import plan_for  # tests/ is on sys.path
    from ray.util import remove_placement_group

    from parallax.weightsync.plan import plan_from_wire
    from parallax.weightsync.sync_group import SyncGroup

    def _walk(worker, bucket_bytes):
        """On a learner (defined here: Ray pickles it by value): its export plan, and per bucket the
        piece's names and the parameters whole meanwhile."""
        plan = worker._plan(bucket_bytes)
        seen = []
        for piece in worker._pieces(plan):
            whole = {n for n, p in worker.engine.module.named_parameters() if p.numel() > 0}
            seen.append((set(piece), whole))
        return plan, seen, {n for n, p in worker.engine.module.named_parameters() if p.numel() > 0}

    def _break_sync(worker):
        """Rank 0's sync group fails after its first bucket, as when an engine dies mid-send."""
        class Lost:
            def send(self, plan, pieces, copy=False, delta=False):
                next(iter(pieces))
                raise ConnectionError("receiver lost")

            def close(self):
                pass

        worker._sync = Lost()

    bucket = 64 << 10  # the tiny model (~3.4 MB) takes many buckets
    batch = _sft_batch(tiny_model_path)
    exports, received, stats, results = {}, {}, {}, {}
    for world, stage in ((1, 1), (2, 3)):
        group, pg = _learners(ray_cluster, tiny_model_path, world, stage)
        exports[stage] = ray_cluster.get(group.async_call("state_dict"))  # every rank's answer
        if stage == 3:
            walks = ray_cluster.get([a.__ray_call__.remote(_walk, bucket) for a in group.actors])
        address = f"file://{tmp_path}/sync-z{stage}"
        opened = group.async_call("open_sync", address, 2, "gloo", 60.0, bucket)  # the sync group is 2 wide
        receiver = SyncGroup(address, 1, 2, "gloo", 60.0)  # this process is the engine
        plan = plan_from_wire(ray_cluster.get(opened)[0])
        sending = group.async_call("send_weights")
        got = dict(receiver.receive(plan))
        received[stage] = {k: v.clone() for k, v in got.items()}
        sent = ray_cluster.get(sending)
        assert sent[1:] == [None] * (world - 1) and sent[0]["sync/buckets"] == len(plan.buckets) > 1
        receiver.close()
        if stage == 3:  # a receiver lost mid-send: rank 0 still walks every bucket, the ranks stay in step
            ray_cluster.get(group.actors[0].__ray_call__.remote(_break_sync))
            failed = group.async_call("send_weights")
            with pytest.raises(ray_cluster.exceptions.RayTaskError, match="receiver lost"):
                ray_cluster.get(failed[0], timeout=120)
            assert ray_cluster.get(failed[1], timeout=120) is None
            again = ray_cluster.get(group.async_call("state_dict"), timeout=120)
            assert all(torch.equal(again[0][k], v) for k, v in exports[3][0].items()) and again[1] == {}
        stats[world] = ray_cluster.get(group.async_sft_step(batch, lr=1e-3))
        results[world] = ray_cluster.get(group.async_state_dict())
        for a in group.actors:
            ray_cluster.kill(a)
        remove_placement_group(pg)

    full = exports[1][0]
    assert exports[3][1] == {}  # rank 0 serves the weights
    assert list(exports[3][0]) == list(full)
    assert all(torch.equal(exports[3][0][k], v) for k, v in full.items())
    assert set(received[3]) == set(received[1]) == set(full)
    assert all(torch.equal(received[3][k], full[k]) and torch.equal(received[1][k], full[k]) for k in full)

    (plan0, seen0, rest0), (plan1, seen1, rest1) = walks
    assert plan0 == plan1 == plan_for(full, bucket)  # from metadata alone, the plan of the whole state
    assert rest0 == rest1 == set()  # outside a piece, every parameter stays partitioned
    for (names, whole0), (_, whole1) in zip(seen0, seen1):
        assert whole0 == whole1 == {n for n in names if n != "lm_head.weight"}  # that bucket's, no more

    # The all-reduced gradient is the full batch's: same global norm and same summed loss.
    norm1, norm2 = stats[1][0]["sft/grad_norm"], [s["sft/grad_norm"] for s in stats[2]]
    assert norm2 == pytest.approx([norm1, norm1], rel=1e-5)
    assert sum(s["sft/loss"] for s in stats[2]) == pytest.approx(stats[1][0]["sft/loss"], rel=1e-5)
    # Adam's first step is ~lr * sign(g): tiny float differences in near-zero gradients move a
    # few weights by a fraction of lr, so compare parameters at a tolerance well below lr.
    diff = max((results[1][k] - results[2][k]).abs().max().item() for k in results[1])
    assert diff < 1e-4, diff
    assert any(not torch.equal(results[1][k], full[k]) for k in full), "the SFT step changed nothing"


def test_two_zero1_ranks_step_the_tag_rows_as_one_rank_does(ray_cluster, tiny_model_path):
    """`learner.sft_tag_lr_mult` over 2 ZeRO-1 ranks: each rank amplifies its own fragment of the fp32
    master rows, and both ranks' weights -- and the masters -- end equal to one rank's."""
    from ray.util import remove_placement_group

    from actors.learner import tag_ids

    def _rows(worker, ids):
        from deepspeed.utils import safe_get_full_fp32_param

        w = worker.engine.module.get_input_embeddings().weight
        return w.detach()[ids].clone(), safe_get_full_fp32_param(w)[ids].clone()  # collective: every rank calls

    ids, batch, rows = tag_ids(tiny_model_path), _sft_batch(tiny_model_path), {}
    for world in (1, 2):
        group, pg = _learners(ray_cluster, tiny_model_path, world, 1, sft_tag_lr_mult=20.0)
        ray_cluster.get(group.async_sft_step(batch, lr=1e-3))
        rows[world] = ray_cluster.get([a.__ray_call__.remote(_rows, ids) for a in group.actors])
        for a in group.actors:
            ray_cluster.kill(a)
        remove_placement_group(pg)
    (one, master), = rows[1]
    assert torch.equal(one, master)
    for weights, masters in rows[2]:
        assert torch.equal(weights, masters) and torch.equal(weights, rows[2][0][0])  # ranks agree
        assert (weights - one).abs().max() < 20 * 1e-4  # as the existing 2-vs-1 check, at 20 x lr


def test_a_restarted_actor_gets_its_large_constructor_arguments_again(ray_cluster):
    """Ray keeps an argument over 100 KB (SmolLM2's tokenizer, a reward actor's) in the object store and
    freed it once the constructor ran: the actor's restart then failed ("deleted by the reference counting
    protocol") and the run stopped, where a restart was promised. The group holds every argument of a
    restartable actor: killed, the actor comes back with the same 1 MiB argument."""
    import signal
    import time

    from ray.util import remove_placement_group

    from actors.group import ActorGroup, BundleSpec, reserve

    class Holder:
        def __init__(self, blob: bytes):
            self.blob = blob

        def pid(self) -> int:
            return os.getpid()

        def digest(self) -> str:
            import hashlib

            return hashlib.sha256(self.blob).hexdigest()

    blob = os.urandom(1 << 20)
    pg, _ = reserve([BundleSpec("holder", 1, 0.1, 0.0)], "PACK", name="restart-args")
    group = ActorGroup("holder", Holder, 1, pg, 0, 0.1, 0.0, lambda i: {"blob": blob}, "restart-args",
                       max_restarts=1)
    try:
        (actor,) = group.actors
        old = ray_cluster.get(actor.pid.remote(), timeout=120)
        time.sleep(1)  # as a loss minutes into a run: Ray has freed what it no longer counts (fails without the hold)
        os.kill(old, signal.SIGKILL)
        deadline, answer = time.monotonic() + 120, None
        while answer is None:
            try:
                answer = ray_cluster.get(actor.pid.remote(), timeout=30)
            except ray_cluster.exceptions.ActorUnavailableError:  # restarting
                assert time.monotonic() < deadline, "the actor did not come back"
                time.sleep(0.5)
        import hashlib

        assert answer != old and ray_cluster.get(actor.digest.remote()) == hashlib.sha256(blob).hexdigest()
    finally:
        for a in group.actors:
            ray_cluster.kill(a, no_restart=True)
        remove_placement_group(pg)
