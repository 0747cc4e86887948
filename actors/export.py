"""The learner's weight export: the bucket plan, the pieces walked in step on every rank (one bucket gathered
at a time under ZeRO-3), the full state dict, and the push to the engines over the weight-sync group or by the
same-device hand-off (`parallax.weightsync`). A mixin of `actors.learner.LearnerWorker`, which holds the
DeepSpeed engine (`self.engine`), its LoRA view (`self.lora`), `self.cfg`, `self.rank` and `self.device`."""

from __future__ import annotations

import torch


class WeightExport:
    # Export goes bucket by bucket: under ZeRO-3 only one bucket's parameters are gathered at a time
    # (a Qwen3-4B rank never holds the whole model at once), and ZeRO-0/1/2, whose parameters are whole
    # on every rank, take the same path. Every rank walks the same buckets (the gathers are collective).
    EXPORT_BUCKET_BYTES = 256 << 20

    def _named_weights(self) -> list[tuple[str, torch.Tensor]]:
        """The state dict's names and the module's own tensors (a tied weight: one object, two names);
        under LoRA the plain model's names and frozen base tensors, which `_pieces` merges."""
        if self.lora is not None:
            return self.lora.named
        return list(self.engine.module.state_dict(keep_vars=True).items())

    def _plan(self, bucket_bytes: int, dtype: str | None = None):
        """The export's buckets and aliases from metadata alone (ZeRO-3's full shapes): no gather; floating
        tensors in `dtype` (the engines' weight dtype) where given."""
        from parallax.weightsync.plan import plan_named

        return plan_named(self._named_weights(), bucket_bytes, dtype)

    def _pieces(self, plan):
        """Per bucket of `plan`, in order, on every rank: {name: full tensor} while only that bucket's
        parameters are gathered (ZeRO-3); the tensors are valid until the next piece is asked for."""
        import deepspeed

        named = dict(self._named_weights())
        merged = self.lora.merged if self.lora is not None else (lambda t: t)  # LoRA: one bucket merged at a time
        for bucket in plan.buckets:
            tensors = [named[m.name] for m in bucket.tensors]
            partitioned = [t for t in tensors if hasattr(t, "ds_id")]
            with deepspeed.zero.GatheredParameters(partitioned, enabled=bool(partitioned)):
                yield {m.name: merged(named[m.name]) for m in bucket.tensors}

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Full CPU weights, in the module's state-dict order (a tied name shares its source's tensor).
        Every rank must call it (ZeRO-3 gathers bucket by bucket); rank 0 returns them, the others {}."""
        plan = self._plan(self.EXPORT_BUCKET_BYTES)
        out: dict[str, torch.Tensor] = {}
        pieces = self._pieces(plan)
        try:
            for piece in pieces:
                if self.rank == 0:
                    out |= {k: v.detach().to("cpu", copy=True) for k, v in piece.items()}
        finally:  # every rank walks every bucket (the gathers are collective), whatever failed here
            for _ in pieces:
                pass
        if self.rank != 0:
            return {}
        out |= {alias: out[src] for alias, src in plan.aliases}
        return {name: out[name] for name, _ in self._named_weights()}

    def open_sync(self, address: str | None, world_size: int, backend: str, timeout_s: float,
                  bucket_bytes: int, dtype: str | None = None, abandonable: bool = True,
                  delta: bool = False) -> dict | None:
        """Join the weight-sync group as its rank 0 (learner rank 0 only; every rank keeps the bucket
        plan, which `send_weights` walks in step; `address` None: no group, the plan only). Returns the
        plan every receiver follows, in wire form (`parallax.weightsync.plan`). `dtype`: the engines' weight dtype,
        which the weights are sent in. `abandonable=False`: called in this process, not as a Ray task (a
        benchmark: no Ray needed). `delta`: each push after the first sends only what changed where that is
        fewer bytes (`parallax.weightsync.sync_group`)."""
        from parallax.weightsync.plan import plan_to_wire
        from parallax.weightsync.sync_group import SyncGroup

        self._sync_plan, self._sync_delta = self._plan(bucket_bytes, dtype), delta
        self._staged, self._handles, self._unlinked, self._sets = [], [], set(), None  # a new plan: new buffers
        if self.rank != 0:
            return None
        self.close_sync()
        if address is None:  # no group: every engine takes its weights from its own learner rank (hand-off)
            return plan_to_wire(self._sync_plan)

        def join():
            return SyncGroup(address, 0, world_size, backend, timeout_s)

        if abandonable:  # the rendezvous waits for every member: the driver cancels this task when one dies
            from actors.faults import abandonable as leavable

            self._sync = leavable(join, "weight-sync rendezvous")
        else:
            self._sync = join()
        return plan_to_wire(self._sync_plan)

    def close_sync(self) -> None:
        """Leave the weight-sync group (rank 0; a new group forms after an engine was lost)."""
        if getattr(self, "_sync", None) is not None:
            self._sync.close()
        self._sync = None

    def send_weights(self, stage: bool = False) -> dict | None:
        """Broadcast the current weights over the sync group, bucket by bucket (rank 0 sends; every rank
        joins each bucket's ZeRO-3 gather). Under ZeRO-3 a bucket is copied out before its gather ends.
        `stage`: also pack each bucket into a buffer of this rank's own, shared with the engine on its
        device (`parallax.weightsync.handoff`) and kept until `release_staged`; "handles" holds their handles,
        and "kept" says they are this rank's CPU sets, which serve the next pushes, with their names already
        removed (`release_staged`: no release to wait for).
        Rank 0 and a staging rank return their figures, any other None."""
        import time

        from parallax.weightsync.handoff import share
        from parallax.weightsync.plan import pack

        t = time.perf_counter()
        plan = self._sync_plan
        pieces = self._pieces(plan)
        # On CPU two sets of staged buffers serve every push of this plan in turn: a CPU engine binds its
        # parameters to the set it was handed (no copy) and the driver waits for it before the next push, so
        # this push writes the set no engine reads. On a GPU they are freed once the engines have copied them
        # (`release_staged`), as the learner's memory is the update's.
        keep = False
        if stage and torch.device(self.device).type == "cpu":
            if getattr(self, "_sets", None) is None:
                self._sets, self._turn = [([], [], set()), ([], [], set())], 0
            self._turn += 1
            self._staged, self._handles, self._unlinked = self._sets[self._turn % 2]
            keep = len(self._staged) == len(plan.buckets)
            if not keep:
                self._staged.clear()
                self._handles.clear()
                self._unlinked.clear()
        else:
            self._staged, self._handles, self._unlinked = [], [], set()

        def walked():  # the pieces in plan order, each staged on its way
            for i, (bucket, piece) in enumerate(zip(plan.buckets, pieces)):
                if keep:
                    pack(bucket, piece, out=self._staged[i])
                elif stage:
                    self._staged.append(pack(bucket, piece, str(self.device), view=False))
                    self._handles.append(share(self._staged[-1]))
                yield piece

        group = getattr(self, "_sync", None) if self.rank == 0 else None
        sent = 0
        try:
            if group is not None:
                sent = group.send(plan, walked(), copy=self.cfg.zero_stage == 3, delta=self._sync_delta)
            else:
                for _ in walked():
                    pass
        finally:  # every bucket's gather, as the other ranks do, even when a receiver failed mid-send:
            for _ in pieces:  # else their next gather pairs with this rank's next one, out of step
                pass
        if self.rank != 0 and not stage:
            return None
        return {"sync/bytes": float(sent), "sync/dense_bytes": float(plan.nbytes),
                "sync/buckets": float(len(plan.buckets)),
                "timing/sync_send": time.perf_counter() - t, "handles": list(self._handles) if stage else [],
                "kept": keep and len(self._unlinked) == len(self._handles)}

    def release_staged(self) -> None:
        """Free the buffers `send_weights(stage=True)` shared (every engine has loaded from them). On CPU they
        are kept for the push after next (shared memory the engines keep mapped, and bound to until the next
        push; `open_sync` drops them), and their names are removed now that every engine has mapped them: the
        memory lives while a process maps it and is freed with the last, however the processes end (a Ray
        worker's children, torch's shared-memory manager among them, die with it, and names left behind
        filled /dev/shm)."""
        if torch.device(self.device).type != "cpu":
            self._staged, self._handles = [], []
            return
        from parallax.weightsync.handoff import unlink

        unlink([h for h in self._handles if h not in self._unlinked])
        self._unlinked.update(self._handles)
