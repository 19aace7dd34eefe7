"""Re-share the CPU cores among ARL processes during a fit (see :mod:`arl.distributed.threads`)."""

from __future__ import annotations

from lightning import Callback

from arl.distributed.threads import rebalance


class ThreadRebalance(Callback):
    """Before each training and validation batch: adopt the current share of the cores.

    A no-op unless the entry point configured ``threads: auto``; the registry is read at most
    every few seconds, so the check costs nothing measurable per batch.
    """

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        rebalance()

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        rebalance()
