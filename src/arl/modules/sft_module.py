"""BehaviourCloningModule: supervised fine-tuning on expert turns, loss on response tokens only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from lightning import LightningModule

from arl.datamodules.batches import micro_batches
from arl.distributed import ranks as dist_utils
from arl.distributed.fsdp import data_parallel_mesh, fully_shard_model
from arl.modules.forward import CHUNK_TOKENS, forward_greedy_hits, forward_log_probs
from arl.modules.passes import backward_sync, padding_logits, uniform_count

VAL_METRICS = ("bc/val_loss", "bc/val_token_accuracy", "bc/val_exact_match")


class BehaviourCloningModule(LightningModule):
    """Maximise log p(expert response | prompt), token-mean over response tokens.

    Args:
        policy: the causal LM.
        optimizer: a partial optimiser taking ``params``.
        warmup_steps: linear warm-up, then cosine decay to ``min_lr_ratio`` over ``total_steps``.
        sharding: ``trainer.sharding`` for the FSDP2 lane (``ModelParallelStrategy``).
        logit_chunk_tokens: scored positions projected onto the vocabulary at once
            (``model.logit_chunk_tokens``; :mod:`arl.modules.forward`).
        micro_token_budget: padded tokens of one forward/backward pass (``bc.micro_token_budget``):
            a batch is cut into micro-batches under it (:func:`arl.datamodules.batches.micro_batches`)
            whose gradients add up to the batch's; the step does not depend on the budget.
    """

    def __init__(
        self, policy, optimizer: Callable, warmup_steps: int = 0, total_steps: int = 1000, min_lr_ratio: float = 0.1,
        sharding: dict[str, Any] | None = None, logit_chunk_tokens: int = CHUNK_TOKENS,
        micro_token_budget: int = 16384,
    ):
        super().__init__()
        self.automatic_optimization = False  # several forward/backward passes per optimiser step
        self.micro_token_budget = int(micro_token_budget)
        self.policy = policy
        self.logit_chunk_tokens = int(logit_chunk_tokens)  # model.logit_chunk_tokens (arl.modules.forward)
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

    def _world_size(self) -> int:
        return self.trainer.world_size if self._trainer is not None else 1

    def training_step(self, batch, batch_idx: int):
        """One optimiser step on the token mean over the response tokens of the *global* batch
        (``loss_tokens``, all ranks together; this rank's own when absent): each rank's sum over
        its share divided by that count, times the number of ranks, since DDP and FSDP average
        gradients over ranks. The share is cut into micro-batches under ``micro_token_budget``,
        each one forward and backward (every rank runs as many passes as the rank with the most,
        padding with zero-loss ones: :mod:`arl.modules.passes`). Sharded or not, and whatever the
        budget, the step is the one a single process takes on the whole batch."""
        opt, sched = self.optimizers(), self.lr_schedulers()
        world = self._world_size()
        rows = {k: v for k, v in batch.items() if k != "loss_tokens"}
        normaliser = batch.get("loss_tokens")
        if normaliser is None:
            normaliser = rows["response_mask"].sum()
        idx = torch.arange(rows["input_ids"].shape[0], device=rows["input_ids"].device)
        micros = list(micro_batches(rows, idx, self.micro_token_budget))
        count = uniform_count(len(micros), world)
        opt.zero_grad(set_to_none=True)
        loss_sum, tokens = torch.zeros((), device=self.device), 0
        for j in range(count):
            with backward_sync(self._trainer, last=j == count - 1):
                if j < len(micros):
                    log_probs, _ = forward_log_probs(self.policy, micros[j], chunk_tokens=self.logit_chunk_tokens)
                    loss, n = response_nll(log_probs, micros[j]["response_mask"], normaliser)
                    loss_sum, tokens = loss_sum + loss.detach(), tokens + n
                else:
                    loss = padding_logits(self.policy, 0, self.device).float().sum() * 0.0
                self.manual_backward(loss * world)
        lr = opt.param_groups[0]["lr"]  # the rate this step takes
        opt.step()
        sched.step()
        self.log("bc/loss", loss_sum, on_step=True, prog_bar=True, batch_size=max(tokens, 1),
                 sync_dist=world > 1, reduce_fx="sum")
        self.log("bc/lr", lr, on_step=True)

    def on_validation_epoch_start(self) -> None:
        # weighted sums, then weights, on the device: adding a batch's metrics needs no host sync
        self._val_sums = torch.zeros(2 * len(VAL_METRICS), dtype=torch.float64, device=self.device)

    def validation_step(self, batch, batch_idx: int):
        """Held-out loss, and how much of the held-out answers greedy decoding would reproduce, on
        this rank's share of the held-out samples (``SFTDataModule.val_dataloader``): summed here,
        combined over ranks at the end of the validation."""
        log_probs, hits = forward_greedy_hits(self.policy, batch, chunk_tokens=self.logit_chunk_tokens)
        metrics, weights = validation_metrics(log_probs, hits, batch["response_mask"])
        for k, name in enumerate(VAL_METRICS):
            self._val_sums[k] += metrics[name].double() * weights[name]
            self._val_sums[len(VAL_METRICS) + k] += weights[name]

    def on_validation_epoch_end(self) -> None:
        """Each metric over the whole held-out set: the ranks' weighted sums added, divided by
        their weights added (a metric with no weight anywhere is not logged)."""
        sums = dist_utils.all_reduce_(self._val_sums, "sum")  # this rank's own on one process
        n = len(VAL_METRICS)
        for k, name in enumerate(VAL_METRICS):
            if sums[n + k] > 0:
                self.log(name, float(sums[k] / sums[n + k]), on_epoch=True, sync_dist=False)


def response_nll(
    log_probs: torch.Tensor, response_mask: torch.Tensor, normaliser: torch.Tensor | float | None = None
) -> tuple[torch.Tensor, int]:
    """Token-mean negative log-likelihood of the response tokens, and their count.

    Args:
        log_probs: (B, L) log-prob of each token; response_mask: (B, L), 1 on the tokens scored.
        normaliser: what the summed NLL is divided by (the global batch's response tokens when a
            rank holds a share of it); None: this batch's response tokens.
    Returns:
        the loss (0-dim; 0 without response tokens) and the number of response tokens here.
    """
    mask = response_mask.float()
    tokens = int(mask.sum())
    denom = max(tokens, 1) if normaliser is None else max(float(normaliser), 1.0)
    return -(log_probs * mask).sum() / denom, tokens


def validation_metrics(
    log_probs: torch.Tensor, hits: torch.Tensor, response_mask: torch.Tensor
) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
    """BC validation metrics of one batch, with the counts they average over.

    Args:
        log_probs: (B, L) log-prob of each token; hits: (B, L) bool, the greedy token is this one;
            response_mask: (B, L), 1 on the response tokens scored.
    Returns:
        ``bc/val_loss`` (token-mean negative log-likelihood), ``bc/val_token_accuracy`` (response
        tokens greedy decoding gets right) and ``bc/val_exact_match`` (samples whose every response
        token is a hit: greedy decoding from the prompt writes the expert's answer verbatim, the
        closest a loss gets to greedy success), and for each its weight: response tokens for the
        first two, samples with a response for the last.
    """
    loss, tokens = response_nll(log_probs, response_mask)
    mask = response_mask.bool()
    exact = (hits | ~mask).all(dim=1)[mask.any(dim=1)].float()
    metrics = {
        "bc/val_loss": loss,
        "bc/val_token_accuracy": (hits & mask).sum().float() / max(tokens, 1),
        "bc/val_exact_match": exact.mean() if exact.numel() else exact.new_zeros(()),
    }
    return metrics, {"bc/val_loss": tokens, "bc/val_token_accuracy": tokens, "bc/val_exact_match": int(exact.numel())}
