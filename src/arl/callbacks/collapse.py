"""Collapse detector: spot a training collapse from the per-iteration metrics and react.

Three detectors, each configurable and each disabled by setting its threshold to ``null``:

* **grad-norm spike**: ``actor/grad_norm`` above ``grad_norm_factor`` x the median of the last
  ``window`` good iterations (once ``min_history`` of them exist).
* **KL spike**: ``kl_key`` (``actor/kl_loss`` by default; ``actor/ppo_kl`` also works) above the
  absolute ``kl_threshold``.
* **valid-action drop**: ``rollout/valid_action_ratio`` below ``valid_drop`` x its running maximum,
  once that maximum reached ``valid_min_peak`` (a drop from near zero is noise, not a collapse).

On an event the callback logs ``collapse/events`` (the running count) and ``collapse/<kind>``
at the iteration, prints a console line, and then, by ``action``:

* ``log``: nothing more;
* ``stop``: ``trainer.should_stop = True`` (the run ends after this iteration, checkpoints and
  the HF export as usual);
* ``rollback``: restore the policy weights, the optimiser and the LR-scheduler state of the last
  good iteration and continue with the next iteration (new rollouts; the iteration counter and
  the task-seed stream go on). After ``max_rollbacks`` rollbacks it stops the run instead.

The "last good" state is an in-memory snapshot taken at the end of every iteration that raised
no event (``snapshot_every`` iterations; on CPU memory, one shard per rank under FSDP via
``torch.distributed.checkpoint.state_dict``). It is the state ``last.ckpt`` held after that
iteration; keeping it in memory makes the rollback immediate and independent of the checkpoint
format (single file or sharded folder) and of ``rl.ckpt_every``. The cost is one copy of the
weights and optimiser state in host memory. The metrics are global over ranks (the module
reduces them), so every rank takes the same decision.
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any

import torch
from lightning import Callback

from arl.utils.logging import console

ACTIONS = ("log", "stop", "rollback")


class CollapseDetector(Callback):
    def __init__(
        self,
        action: str = "log",
        grad_norm_factor: float | None = 10.0,
        window: int = 20,
        min_history: int = 3,
        kl_key: str = "actor/kl_loss",
        kl_threshold: float | None = 1.0,
        valid_drop: float | None = 0.5,
        valid_min_peak: float = 0.2,
        max_rollbacks: int = 3,
        snapshot_every: int = 1,
    ):
        if action not in ACTIONS:
            raise ValueError(f"callbacks.collapse.action={action!r} is not valid; valid choices: {', '.join(ACTIONS)}")
        self.action = action
        self.grad_norm_factor = grad_norm_factor
        self.window = max(1, int(window))
        self.min_history = max(1, int(min_history))
        self.kl_key = kl_key
        self.kl_threshold = kl_threshold
        self.valid_drop = valid_drop
        self.valid_min_peak = valid_min_peak
        self.max_rollbacks = max_rollbacks
        self.snapshot_every = max(1, int(snapshot_every))
        self.grad_norms: deque[float] = deque(maxlen=self.window)
        self.valid_peak = 0.0
        self.events = 0
        self.rollbacks = 0
        self.history: list[dict[str, Any]] = []  # the events: iteration, kinds, action taken
        self._snapshot: dict[str, Any] | None = None

    # ------------------------------------------------------------------ detection (pure)
    def check(self, metrics: dict[str, float]) -> list[tuple[str, str]]:
        """The events ``metrics`` raise, as (kind, reason); updates no state."""
        events = []
        g = metrics.get("actor/grad_norm")
        if self.grad_norm_factor is not None and g is not None and len(self.grad_norms) >= self.min_history:
            median = statistics.median(self.grad_norms)
            if not _finite(g) or g > self.grad_norm_factor * median:
                events.append(("grad_norm", f"grad_norm {g:.4g} > {self.grad_norm_factor:g} x median {median:.4g}"))
        k = metrics.get(self.kl_key)
        if self.kl_threshold is not None and k is not None and (not _finite(k) or k > self.kl_threshold):
            events.append(("kl", f"{self.kl_key} {k:.4g} > {self.kl_threshold:g}"))
        v = metrics.get("rollout/valid_action_ratio")
        if (self.valid_drop is not None and v is not None and self.valid_peak >= self.valid_min_peak
                and v < self.valid_drop * self.valid_peak):
            events.append(("valid_action",
                           f"valid_action_ratio {v:.3f} < {self.valid_drop:g} x peak {self.valid_peak:.3f}"))
        return events

    def observe(self, metrics: dict[str, float]) -> None:
        """Add a good iteration's metrics to the running statistics."""
        g = metrics.get("actor/grad_norm")
        if g is not None and _finite(g):
            self.grad_norms.append(float(g))
        v = metrics.get("rollout/valid_action_ratio")
        if v is not None and _finite(v):
            self.valid_peak = max(self.valid_peak, float(v))

    # ------------------------------------------------------------------ Lightning hooks
    def on_train_start(self, trainer, pl_module):
        if self.action == "rollback" and self._snapshot is None:
            self._take_snapshot(trainer, pl_module)  # the state the run starts from

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        metrics = getattr(pl_module, "last_metrics", None) or {}
        it = int(getattr(pl_module, "iteration", trainer.global_step))
        events = self.check(metrics)
        if not events:
            self.observe(metrics)
            if self.action == "rollback" and it % self.snapshot_every == 0:
                self._take_snapshot(trainer, pl_module)
            return
        self.events += 1
        kinds = [k for k, _ in events]
        action = self.action
        if action == "rollback" and (self._snapshot is None or self.rollbacks >= self.max_rollbacks):
            action = "stop"
        reasons = "; ".join(r for _, r in events)
        if trainer.is_global_zero:
            detail = f" (to iteration {self._snapshot['iteration']})" if action == "rollback" else ""
            console.print(f"[bold red]collapse[/bold red] at iteration {it}: {reasons} -> {action}{detail}")
        logged = {"collapse/events": float(self.events), **{f"collapse/{k}": 1.0 for k in kinds}}
        for logger in trainer.loggers:
            logger.log_metrics(logged, step=it)
        self.history.append({"iteration": it, "kinds": kinds, "action": action})
        if action == "stop":
            trainer.should_stop = True
        elif action == "rollback":
            self._restore_snapshot(trainer, pl_module)
            self.rollbacks += 1

    # ------------------------------------------------------------------ snapshot
    def _take_snapshot(self, trainer, pl_module) -> None:
        # optional: torch.distributed submodule, absent on some builds
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        optimizers = [o.optimizer if hasattr(o, "optimizer") else o for o in trainer.optimizers]
        model_sd, optim_sd = get_state_dict(pl_module.policy, optimizers, options=StateDictOptions(cpu_offload=True))
        self._snapshot = {
            "iteration": int(getattr(pl_module, "iteration", trainer.global_step)),
            "model": _detach_copy(model_sd),
            "optimizer": _detach_copy(optim_sd),
            "schedulers": [c.scheduler.state_dict() for c in trainer.lr_scheduler_configs],
        }

    def _restore_snapshot(self, trainer, pl_module) -> None:
        # optional: torch.distributed submodule, absent on some builds
        from torch.distributed.checkpoint.state_dict import set_state_dict

        snap = self._snapshot
        optimizers = [o.optimizer if hasattr(o, "optimizer") else o for o in trainer.optimizers]
        set_state_dict(pl_module.policy, optimizers, model_state_dict=snap["model"], optim_state_dict=snap["optimizer"])
        for config, state in zip(trainer.lr_scheduler_configs, snap["schedulers"]):
            config.scheduler.load_state_dict(state)
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)

    # ------------------------------------------------------------------ checkpoint state
    def state_dict(self) -> dict[str, Any]:
        return {
            "grad_norms": list(self.grad_norms),
            "valid_peak": self.valid_peak,
            "events": self.events,
            "rollbacks": self.rollbacks,
            "history": list(self.history),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.grad_norms = deque(state_dict.get("grad_norms", []), maxlen=self.window)
        self.valid_peak = float(state_dict.get("valid_peak", 0.0))
        self.events = int(state_dict.get("events", 0))
        self.rollbacks = int(state_dict.get("rollbacks", 0))
        self.history = list(state_dict.get("history", []))


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")  # noqa: PLR0124 - x == x is False for NaN only


def _detach_copy(tree):
    if isinstance(tree, torch.Tensor):
        return tree.detach().clone()
    if isinstance(tree, dict):
        return {k: _detach_copy(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_detach_copy(v) for v in tree)
    return tree
