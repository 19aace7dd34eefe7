"""Aggregation of a per-token loss matrix into a scalar (docs/design.md section 6).

Notation: ``L`` is the (B, T) loss matrix, ``m`` the (B, T) 0/1 mask, ``|y_i| = sum_t m_it``.

===========================  ==========================================================
mode                         value
===========================  ==========================================================
token-mean                   sum(L m) / N_tok
seq-mean-token-mean          sum_i [ sum_t L_it m_it / |y_i| ] / N_seq
seq-mean-token-sum           sum_i [ sum_t L_it m_it ] / N_seq
seq-mean-token-sum-norm      sum_i [ sum_t L_it m_it / H ] / N_seq   (Dr. GRPO, H = horizon)
===========================  ==========================================================

``N_tok`` is the number of masked tokens and ``N_seq`` the number of non-empty sequences
(``|y_i| > 0``). By default both are counted on the tensors given; pass ``global_tokens`` /
``global_seqs`` counted over the whole optimisation mini-batch (all micro-batches, all ranks)
and the micro-batch values *add up* to the mini-batch value, so the gradient does not depend on
how the mini-batch is split (:func:`normalisers` counts them). ``H`` defaults to the padded
length ``T``; configure it (the maximum response length) to keep it constant across batches.
"""

from __future__ import annotations

import torch
from torch import Tensor

AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)


def normalisers(response_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Token and sequence counts of a (B, T) mask: ``(N_tok, N_seq)`` as float scalar tensors.

    Sum these over all micro-batches (and all-reduce over ranks) to get the ``global_tokens`` /
    ``global_seqs`` of :func:`agg_loss`.
    """
    mask = response_mask.float()
    tokens = mask.sum()
    seqs = (mask.sum(dim=-1) > 0).float().sum()
    return tokens, seqs


def _as_denominator(value: Tensor | float, like: Tensor) -> Tensor:
    """A positive scalar denominator (an empty batch divides by 1 and yields 0, not NaN)."""
    return torch.as_tensor(value, dtype=like.dtype, device=like.device).clamp_min(1.0)


def agg_loss(
    loss_mat: Tensor,
    loss_mask: Tensor,
    loss_agg_mode: str,
    global_tokens: Tensor | float | None = None,
    global_seqs: Tensor | float | None = None,
    *,
    horizon: int | None,
) -> Tensor:
    """Aggregate a per-token loss.

    Args:
        loss_mat: (B, T) per-token values.
        loss_mask: (B, T) mask, 1 on the tokens that count (bool or float).
        loss_agg_mode: one of :data:`AGG_MODES`.
        global_tokens: masked-token count of the whole mini-batch (token-mean).
        global_seqs: non-empty-sequence count of the whole mini-batch (seq-mean-* modes).
        horizon: the constant H of ``seq-mean-token-sum-norm`` (the trainer passes ``algo.loss.horizon``
            resolved to the generation budget); None: the padded length T of the tensors given.

    Returns:
        A scalar tensor.
    """
    mask = loss_mask.to(loss_mat.dtype)
    # where() first: a non-finite value on a masked-out position (padding) must not leak as NaN
    masked = torch.where(mask != 0, loss_mat, torch.zeros_like(loss_mat)) * mask
    if loss_agg_mode == "token-mean":
        tokens = mask.sum() if global_tokens is None else global_tokens
        return masked.sum() / _as_denominator(tokens, loss_mat)

    if loss_agg_mode not in AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; valid: {', '.join(AGG_MODES)}")

    seq_tokens = mask.sum(dim=-1)  # (B,)
    seq_sums = masked.sum(dim=-1)  # (B,)
    if loss_agg_mode == "seq-mean-token-mean":
        seq_values = seq_sums / seq_tokens.clamp_min(1.0)
    elif loss_agg_mode == "seq-mean-token-sum":
        seq_values = seq_sums
    else:  # seq-mean-token-sum-norm
        h = loss_mat.shape[-1] if horizon is None else horizon
        if h <= 0:
            raise ValueError(f"horizon must be positive, got {h}")
        seq_values = seq_sums / h
    seqs = (seq_tokens > 0).to(loss_mat.dtype).sum() if global_seqs is None else global_seqs
    return seq_values.sum() / _as_denominator(seqs, loss_mat)
