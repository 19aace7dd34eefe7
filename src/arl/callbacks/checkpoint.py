"""``last.ckpt`` after every RL iteration (or every ``every``), so a kill loses at most that many.

A Lightning checkpoint of the RL stage holds everything a resumed run needs: policy and reference
weights (``state_dict``), optimiser and LR-scheduler states, the loop counters (``global_step``,
batch progress), the module's ``arl`` state (iteration, skipped steps), the callbacks' states
(best-model tracking, collapse detector), and the DataModule's state (iteration, base seed, and
every rank's python/numpy/torch RNG states).

When the iteration is followed by a validation (``iteration % val_every == 0``) the checkpoint is
written at the end of that validation instead, so it holds the validated state and the RNG
exactly as the next iteration will find it. The file is written next to its final name and
renamed into place (rank 0), so a kill during the write leaves the previous ``last.ckpt`` intact.
Under FSDP with sharded checkpoints ``last.ckpt`` is a folder (one shard file per rank plus
``meta.pt``).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from lightning.pytorch.callbacks import Checkpoint


class IterationCheckpoint(Checkpoint):
    """Write ``<dirpath>/<filename>`` every ``every`` RL iterations and after the last one.

    Args:
        dirpath: the checkpoint folder (``<run>/checkpoints``).
        every: iterations between checkpoints (``rl.ckpt_every``); 0 disables.
        val_every: ``rl.val_every``: iterations followed by a validation save after it.
        filename: the checkpoint's name.
    """

    def __init__(self, dirpath: str, every: int = 1, val_every: int | None = None, filename: str = "last.ckpt"):
        self.dirpath = Path(dirpath)
        self.every = int(every)
        self.val_every = int(val_every) if val_every else None
        self.filename = filename
        self.last_saved_iteration: int | None = None

    @property
    def path(self) -> Path:
        return self.dirpath / self.filename

    def _due(self, trainer, pl_module) -> bool:
        if self.every <= 0:
            return False
        it = int(getattr(pl_module, "iteration", trainer.global_step))
        total = planned_iterations(trainer)
        return it > 0 and it != self.last_saved_iteration and (it % self.every == 0 or (total is not None and it >= total))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        it = int(getattr(pl_module, "iteration", trainer.global_step))
        if self.val_every and it % self.val_every == 0:
            return  # a validation follows: save at its end
        if self._due(trainer, pl_module):
            self.save(trainer, pl_module)

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        if self._due(trainer, pl_module):
            self.save(trainer, pl_module)

    def save(self, trainer, pl_module) -> Path:
        """Write the checkpoint (every rank calls this: the state dicts are collectives)."""
        t0 = time.perf_counter()
        final = self.path
        tmp = final.with_name(final.name + ".tmp")
        if trainer.is_global_zero:
            self.dirpath.mkdir(parents=True, exist_ok=True)
            _remove(tmp)
        trainer.strategy.barrier("arl_ckpt_prepare")
        trainer.save_checkpoint(tmp, weights_only=False)
        trainer.strategy.barrier("arl_ckpt_written")
        if trainer.is_global_zero:
            if tmp.is_dir() and final.exists():  # a sharded checkpoint: folders do not replace atomically
                old = final.with_name(final.name + ".old")
                _remove(old)
                os.replace(final, old)
                os.replace(tmp, final)
                _remove(old)
            else:
                os.replace(tmp, final)
        trainer.strategy.barrier("arl_ckpt_renamed")
        self.last_saved_iteration = int(getattr(pl_module, "iteration", trainer.global_step))
        for logger in trainer.loggers:
            logger.log_metrics({"perf/checkpoint_s": time.perf_counter() - t0}, step=self.last_saved_iteration)
        return final

    def state_dict(self):
        return {"last_saved_iteration": self.last_saved_iteration}

    def load_state_dict(self, state_dict):
        self.last_saved_iteration = state_dict.get("last_saved_iteration")


def planned_iterations(trainer) -> int | None:
    """The RL stage's iteration count (the rollout DataModule's plan), None for a fit without one."""
    dm = getattr(trainer, "datamodule", None)
    total = getattr(getattr(dm, "plan", None), "iterations", None)
    return int(total) if isinstance(total, int) else None


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
