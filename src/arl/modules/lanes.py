"""The data-parallel lanes of the RL update: everything every rank must do alike, in one object.

Under DDP or FSDP each rank holds a share of the iteration's rows; one optimiser step is several
micro-batch passes. For the step to equal one process's on all the rows, and for the collectives
inside the passes to pair up, the ranks must agree on five things, which :class:`Lanes` owns so
that the update (:meth:`arl.modules.rl_module.AgenticRLModule._update`) reads as the paper writes it:

1. the loss normalisers of a mini-batch (response tokens, non-empty sequences), summed over ranks
   (:meth:`Lanes.normalisers`);
2. which rows each rank computes: its own, or with ``rl.balance_tokens`` the rows dealt out by
   their token counts (:meth:`Lanes.deal`, :func:`arl.modules.balance.rebalance`);
3. the same number of micro-batch passes on every rank, a rank with fewer padding with a zero-loss
   forward, the gradients all-reduced on the last pass only (:meth:`Lanes.passes`,
   :mod:`arl.modules.passes`);
4. the backward of a global-normalised loss scaled by the world size, since DDP and FSDP average
   the gradients over ranks (:meth:`Lanes.backward`);
5. the step: clipped by the global gradient norm, and skipped on every rank when any rank's loss
   or the norm is not finite (:meth:`Lanes.step`).

On one process each of these is the plain thing (sums are the values, one lane, no scaling).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from arl.datamodules.batches import index_batch, micro_batches
from arl.distributed import ranks as dist_utils
from arl.modules.balance import imbalance, rebalance
from arl.modules.passes import backward_sync, padding_logits, uniform_count

Rows = dict[str, torch.Tensor]


@dataclass
class Lanes:
    """The ranks of one update. ``module``: the LightningModule (its trainer's strategy, its
    ``manual_backward``); ``policy``: the trained model (padding passes); ``world``: the
    data-parallel size; ``micro_token_budget``, ``balance_tokens``, ``grad_clip``: the update's settings."""

    module: Any
    policy: Any
    world: int
    pad_id: int
    micro_token_budget: int
    balance_tokens: bool
    grad_clip: float

    @property
    def device(self) -> torch.device:
        return self.module.device

    def total(self, value: torch.Tensor | float) -> torch.Tensor:
        """``value`` summed over the ranks (itself on one process), a float tensor."""
        value = torch.as_tensor(value, dtype=torch.float32, device=self.device)
        return dist_utils.all_reduce_(value, "sum") if self.world > 1 else value

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any rank."""
        return bool(dist_utils.max_int(int(flag))) if self.world > 1 else flag

    def normalisers(self, data: Rows | None, mb_idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss normalisers of one mini-batch (the rows ``mb_idx``, (m,), of ``data``), summed
        over ranks: response tokens and non-empty sequences, two scalars (a rank without rows adds 0)."""
        if data is None or not len(mb_idx):
            zero = torch.zeros((), device=self.device)
            return self.total(zero), self.total(zero)
        mask = data["response_mask"][mb_idx]
        return self.total(mask.sum()), self.total((mask.sum(-1) > 0).sum().float())

    def deal(self, data: Rows | None, mb_idx: torch.Tensor, balance: dict[str, list[float]]) -> tuple[Rows | None, torch.Tensor]:
        """The rows this rank computes for one mini-batch (the rows ``mb_idx``, (m,), of ``data``),
        as ``(rows, their indices)``: ``data`` and ``mb_idx`` themselves, or with ``balance_tokens``
        on several ranks the rows dealt to this rank by tokens (a collective; the deal's
        max-over-mean load before and after is appended to ``balance``)."""
        if not self.balance_tokens or self.world <= 1:
            return data, mb_idx
        rows = index_batch(data, mb_idx) if data is not None and len(mb_idx) else None
        if rows is not None:  # turn rows index the sender's turn table: no use on another rank, and the update reads none
            rows.pop("turn_row", None)
        rows, deal = rebalance(rows, self.device, {"input_ids": self.pad_id or 0})
        balance["perf/rank_tokens_max_over_mean"].append(imbalance(deal.loads_after()))
        balance["perf/rank_tokens_max_over_mean_unbalanced"].append(imbalance(deal.loads_before()))
        n = 0 if rows is None else int(rows["attention_mask"].shape[0])
        return rows, torch.arange(n, device=self.device)

    def passes(self, rows: Rows | None, idx: torch.Tensor, backward: bool = True) -> Iterator[Rows | None]:
        """The micro-batches of ``rows`` (the rows ``idx``, by ``micro_token_budget``), then None for
        each padding pass, so that every rank runs the same number; with ``backward``, each pass runs
        inside DDP's ``block_backward_sync`` but the last (the gradients are all-reduced once)."""
        micros = list(micro_batches(rows, idx, self.micro_token_budget)) if rows is not None and len(idx) else []
        count = uniform_count(len(micros), self.world)
        trainer = self.module._trainer if backward else None
        for j in range(count):
            with backward_sync(trainer, last=j == count - 1):
                yield micros[j] if j < len(micros) else None

    def padding_pass(self, model=None) -> torch.Tensor:
        """A zero loss over a two-token forward of ``model`` (default: the policy): the pass of a rank
        without a micro-batch, or in place of a non-finite loss, so that no NaN reaches the gradients."""
        return padding_logits(model or self.policy, self.pad_id, self.device).float().sum() * 0.0

    def backward(self, loss: torch.Tensor) -> None:
        """Backward of a loss normalised over all ranks: DDP and FSDP average the gradients over the
        ``world`` ranks, so the loss is scaled by it first."""
        self.module.manual_backward(loss * self.world)

    def clip_grad_norm(self, params: list[torch.Tensor]) -> torch.Tensor:
        """Clip the gradients of ``params`` to ``grad_clip``; returns the global norm before clipping."""
        trainer = self.module._trainer
        root = trainer.strategy.model if trainer is not None else None
        if root is not None and type(root).__name__ == "FullyShardedDataParallel":  # FSDP1: norms over shards
            return root.clip_grad_norm_(self.grad_clip)
        norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip)
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP2: a DTensor

    def step(self, opt, sched, params: list[torch.Tensor], finite: bool) -> float | None:
        """Clip and step the optimiser and the LR schedule; returns the gradient norm before
        clipping. ``finite``: this rank's losses were finite. When any rank's was not, or the norm
        is not finite, the step is skipped on every rank (the gradients dropped) and None returned."""
        finite = not self.any(not finite)
        grad_norm = self.clip_grad_norm(params) if finite else torch.tensor(float("nan"))
        if not finite or not torch.isfinite(grad_norm):
            opt.zero_grad(set_to_none=True)
            return None
        opt.step()
        sched.step()
        return float(grad_norm)
