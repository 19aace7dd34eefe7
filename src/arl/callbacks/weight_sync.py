"""After every update, load the trainer's weights into the rollout engine.

With the transformers engine on one process or under DDP, the engine holds the trained module
itself and this costs nothing; engines that keep their own copy (vLLM, or the HF engine's
unsharded copy under FSDP) reload from the state dict here. Under FSDP the full weights are
gathered first (a collective: every rank calls it and syncs its own engine).

The sync also runs when training starts, so a resumed run (whose weights came from the
checkpoint) and a rolled-back run never sample with stale engine weights.
"""

from __future__ import annotations

import time

from lightning import Callback

from arl.utils.fsdp import SHARDED_STRATEGIES, GatheredWeights, full_state_dict


def sync_engine(engine, trainer, pl_module) -> None:
    """Load ``pl_module.policy``'s current weights into ``engine`` (gathered when sharded)."""
    policy = pl_module.policy
    if trainer is not None and type(trainer.strategy).__name__ in SHARDED_STRATEGIES:
        engine.sync(GatheredWeights(full_state_dict(policy, root=trainer.strategy.model)))
    elif getattr(engine, "model", None) is not policy:
        engine.sync(policy)


class WeightSync(Callback):
    def __init__(self, engine):
        self.engine = engine
        self.seconds = 0.0

    def on_train_start(self, trainer, pl_module):
        sync_engine(self.engine, trainer, pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        """The rollout is done (the batch is here): let an engine with a sleep mode free its
        accelerator memory for the update; the sync after the update wakes it."""
        sleep = getattr(self.engine, "sleep", None)
        if callable(sleep):
            sleep()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        t0 = time.perf_counter()
        sync_engine(self.engine, trainer, pl_module)
        self.seconds = time.perf_counter() - t0
        for logger in trainer.loggers:
            logger.log_metrics({"perf/sync_s": self.seconds}, step=getattr(pl_module, "iteration", trainer.global_step))
