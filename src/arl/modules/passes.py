"""Micro-batch passes that pair up over data-parallel ranks: what the RL update and behaviour
cloning share when one optimiser step is several forward/backward passes.

Every rank runs the same number of passes (:func:`uniform_count`), a rank with fewer micro-batches
padding with a zero-loss two-token forward (:func:`padding_logits`), so the collectives inside the
passes (DDP's gradient all-reduce, FSDP's all-gathers and reduce-scatters) pair up; under DDP the
gradients are reduced on the last pass only (:func:`backward_sync`).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from arl.distributed import ranks as dist_utils


def uniform_count(n: int, world: int) -> int:
    """The largest ``n`` over the ``world`` ranks (``n`` itself on one process): a collective."""
    return dist_utils.max_int(n) if world > 1 else n


def padding_logits(model, pad_id: int, device: torch.device) -> torch.Tensor:
    """A two-token forward of ``model``, (1, 2, V): the pass a rank runs when it has fewer
    micro-batches than another (its loss is multiplied by 0)."""
    ids = torch.full((1, 2), int(pad_id or 0), dtype=torch.long, device=device)
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=torch.arange(2, device=device)[None],
                use_cache=False)
    return out.logits


def backward_sync(trainer, last: bool):
    """DDP: accumulate micro-batch gradients locally and all-reduce on the ``last`` one only (the
    strategy's ``block_backward_sync``; a no-op context elsewhere)."""
    strategy = trainer.strategy if trainer is not None else None
    if not last and strategy is not None and hasattr(strategy, "block_backward_sync"):
        return strategy.block_backward_sync()
    return nullcontext()
