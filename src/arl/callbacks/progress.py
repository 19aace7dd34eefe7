"""One console line per RL iteration, and per twentieth of a BC fit and per BC epoch: long work
shows progress."""

from __future__ import annotations

import time

from lightning import Callback

from arl.callbacks.checkpoint import planned_iterations
from arl.utils.logging import console

_FIELDS = (
    ("rollout/success_rate", "succ", "{:.2f}"),
    ("rollout/valid_action_ratio", "valid", "{:.2f}"),
    ("rollout/return_mean", "ret", "{:+.2f}"),
    ("filter/kept_groups", "groups", "{:.0f}"),
    ("actor/pg_loss", "pg", "{:+.4f}"),
    ("actor/kl_loss", "kl", "{:.4f}"),
    ("actor/entropy", "ent", "{:.3f}"),
    ("actor/grad_norm", "gnorm", "{:.3f}"),
    ("actor/clipfrac", "clip", "{:.3f}"),
    ("perf/iteration_s", "s", "{:.1f}"),
)


BC_LINES = 20  # progress lines over a BC fit


class IterationLog(Callback):
    """Prints a line per RL iteration and the validation result when it comes; in a BC fit (a
    module without ``last_metrics``), a line every twentieth of its optimiser steps."""

    def __init__(self, every: int = 1):
        self.every = max(1, every)
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        metrics = getattr(pl_module, "last_metrics", None)
        if not trainer.is_global_zero:
            return
        if metrics is None:
            self._bc_step(trainer)
            return
        it = getattr(pl_module, "iteration", batch_idx + 1)
        if it % self.every:
            return
        total = planned_iterations(trainer) or "?"
        parts = [f"it {it}/{total}"]
        for key, short, fmt in _FIELDS:
            if key in metrics:
                parts.append(f"{short} {fmt.format(metrics[key])}")
        console.print(" | ".join(parts))

    def _bc_step(self, trainer) -> None:
        step, total = trainer.global_step, trainer.estimated_stepping_batches
        if not isinstance(total, int) or total <= 0 or step % max(1, total // BC_LINES) or step >= total:
            return
        loss = trainer.callback_metrics.get("bc/loss")
        elapsed = time.perf_counter() - self._t0
        parts = [f"bc step {step}/{total}"]
        if loss is not None:
            parts.append(f"loss {float(loss):.4f}")
        parts.append(f"{elapsed:.0f}s, about {elapsed * (total - step) / step:.0f}s left")
        console.print(" | ".join(parts))

    def on_validation_end(self, trainer, pl_module):
        val = getattr(pl_module, "last_val", None)
        if val and trainer.is_global_zero and not trainer.sanity_checking:
            it = getattr(pl_module, "iteration", 0)
            text = " | ".join(f"{k} {v:.3f}" for k, v in val.items())
            console.print(f"[bold]validation @ it {it}[/bold]: {text}")

    def on_train_epoch_end(self, trainer, pl_module):
        loss = trainer.callback_metrics.get("bc/loss")
        if loss is not None and trainer.is_global_zero:
            console.print(
                f"bc epoch {trainer.current_epoch + 1}/{trainer.max_epochs} | loss {float(loss):.4f} | "
                f"{time.perf_counter() - self._t0:.0f}s"
            )
