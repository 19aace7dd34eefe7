"""BehaviourCloningModule: supervised fine-tuning on expert turns, loss on response tokens only."""

from __future__ import annotations

from typing import Any, Callable

import torch
from lightning import LightningModule

from arl.modules.forward import forward_log_probs
from arl.utils.fsdp import data_parallel_mesh, fully_shard_model


class BehaviourCloningModule(LightningModule):
    """Maximise log p(expert response | prompt), token-mean over response tokens.

    Args:
        policy: the causal LM.
        optimizer: a partial optimiser taking ``params``.
        warmup_steps: linear warm-up, then cosine decay to ``min_lr_ratio`` over ``total_steps``.
        sharding: ``trainer.sharding`` for the FSDP2 lane (``ModelParallelStrategy``).
    """

    def __init__(
        self, policy, optimizer: Callable, warmup_steps: int = 0, total_steps: int = 1000, min_lr_ratio: float = 0.1,
        sharding: dict[str, Any] | None = None,
    ):
        super().__init__()
        self.policy = policy
        self.sharding = dict(sharding) if sharding else None
        self.optimizer_factory = optimizer
        self.warmup_steps = warmup_steps
        self.total_steps = max(total_steps, 1)
        self.min_lr_ratio = min_lr_ratio

    def configure_model(self) -> None:
        """FSDP2 (``ModelParallelStrategy``): shard the policy on the data-parallel mesh."""
        mesh = data_parallel_mesh(self, self.sharding)
        if mesh is not None:
            fully_shard_model(self.policy, self.sharding, mesh)

    def configure_optimizers(self):
        opt = self.optimizer_factory(params=[p for p in self.policy.parameters() if p.requires_grad])

        def factor(step: int) -> float:
            if step < self.warmup_steps:
                return (step + 1) / (self.warmup_steps + 1)
            progress = min(1.0, (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps))
            cosine = 0.5 * (1 + torch.cos(torch.tensor(progress * torch.pi))).item()
            return self.min_lr_ratio + (1 - self.min_lr_ratio) * cosine

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def _loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        log_probs, _ = forward_log_probs(self.policy, batch)
        mask = batch["response_mask"]
        tokens = mask.sum().clamp_min(1)
        loss = -(log_probs * mask).sum() / tokens
        return loss, tokens

    def training_step(self, batch, batch_idx: int):
        loss, tokens = self._loss(batch)
        self.log("bc/loss", loss, on_step=True, prog_bar=True, batch_size=int(tokens))
        self.log("bc/lr", self.optimizers().param_groups[0]["lr"], on_step=True)
        return loss

    def validation_step(self, batch, batch_idx: int):
        loss, tokens = self._loss(batch)
        self.log("bc/val_loss", loss, on_epoch=True, batch_size=int(tokens))
