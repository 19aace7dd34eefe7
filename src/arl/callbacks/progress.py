"""One console line per RL iteration and per BC epoch: long work shows progress."""

from __future__ import annotations

import time

from lightning import Callback

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


class IterationLog(Callback):
    """Prints a line per RL iteration and the validation result when it comes."""

    def __init__(self, every: int = 1):
        self.every = max(1, every)
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        metrics = getattr(pl_module, "last_metrics", None)
        if metrics is None or not trainer.is_global_zero:
            return
        it = getattr(pl_module, "iteration", batch_idx + 1)
        if it % self.every:
            return
        total = getattr(trainer.datamodule, "iterations", "?")
        parts = [f"it {it}/{total}"]
        for key, short, fmt in _FIELDS:
            if key in metrics:
                parts.append(f"{short} {fmt.format(metrics[key])}")
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
