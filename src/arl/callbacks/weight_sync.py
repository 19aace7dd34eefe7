"""After every update, load the trainer's weights into the rollout engine.

With the transformers engine the engine holds the trained module itself and this costs nothing;
engines that keep their own copy (vLLM) reload from the state dict here.
"""

from __future__ import annotations

import time

from lightning import Callback


class WeightSync(Callback):
    def __init__(self, engine):
        self.engine = engine
        self.seconds = 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        t0 = time.perf_counter()
        self.engine.sync(pl_module.policy)
        self.seconds = time.perf_counter() - t0
        for logger in trainer.loggers:
            logger.log_metrics({"perf/sync_s": self.seconds}, step=getattr(pl_module, "iteration", trainer.global_step))
