"""Importance-ratio and KL-attribution statistics, the paper's diagnosis (docs/design.md section 8, ``is/``).

All functions are read-only (no gradient) and return detached scalar tensors; the trainer adds
the ``is/`` prefix. Values are computed on the tensors given (one micro-batch on one rank).
"""

from __future__ import annotations

import torch
from torch import Tensor

from arl.algos.policy_losses import LOG_RATIO_CLAMP, masked_mean, sequence_log_ratio

#: quantiles reported for the sequence-level ratio s_i
SEQ_RATIO_QUANTILES: tuple[tuple[str, float], ...] = (
    ("seq_ratio_p05", 0.05),
    ("seq_ratio_p50", 0.50),
    ("seq_ratio_p95", 0.95),
)


def _k3(log_p: Tensor, log_q: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(q || p) from samples of q: exp(x) - x - 1, x = log p - log q."""
    x = (log_p - log_q).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.exp(x) - x - 1.0


@torch.no_grad()
def _seq_ratio_quantiles(seq_ratio: Tensor, non_empty: Tensor, dtype: torch.dtype) -> dict[str, Tensor]:
    """The :data:`SEQ_RATIO_QUANTILES` of the sequence ratios ``seq_ratio`` (B,) of the non-empty
    sequences (``non_empty``, (B,) bool); ones when every sequence is empty."""
    if bool(non_empty.any()):
        q = torch.tensor([p for _, p in SEQ_RATIO_QUANTILES], dtype=torch.float32, device=seq_ratio.device)
        values = torch.quantile(seq_ratio[non_empty].float(), q).to(dtype)
    else:
        values = torch.ones(len(SEQ_RATIO_QUANTILES), dtype=dtype, device=seq_ratio.device)
    return {name: value for (name, _), value in zip(SEQ_RATIO_QUANTILES, values, strict=True)}


def is_stats(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_low: float,
    clip_high: float,
) -> dict[str, Tensor]:
    """Where the importance ratios sit relative to the clip range, and who carries the KL.

    Args:
        log_prob, old_log_prob, advantages, response_mask: (B, T).
        clip_low, clip_high: eps_low, eps_high of the clip range [1 - eps_low, 1 + eps_high].

    Returns (scalar tensors):
        tokens_above_pos / tokens_below_pos / tokens_above_neg / tokens_below_neg: fraction of
            all response tokens whose token ratio r_t is > 1 + clip_high / < 1 - clip_low, among
            tokens with A > 0 (pos) / A < 0 (neg).
        seq_ratio_p05 / p50 / p95: quantiles of the sequence ratio
            s_i = exp((1/|y_i|) sum_t m_t log r_t) over non-empty sequences.
        neg_lowratio_kl_frac: share of the total k3 estimate of KL(pi_old || pi) (summed over
            response tokens) contributed by sequences with mean advantage < 0 and s_i < 1; 0 when
            the total is 0.
    """
    mask = response_mask.to(log_prob.dtype)
    log_ratio = (log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    sides = {"above": ratio > 1.0 + clip_high, "below": ratio < 1.0 - clip_low}
    signs = {"pos": advantages > 0, "neg": advantages < 0}
    out = {f"tokens_{side}_{sign}": masked_mean((outside & with_sign).to(mask.dtype), mask)
           for sign, with_sign in signs.items() for side, outside in sides.items()}

    lengths = mask.sum(dim=-1)
    non_empty = lengths > 0
    seq_ratio = torch.exp(sequence_log_ratio(log_prob, old_log_prob, mask))  # (B,)
    out.update(_seq_ratio_quantiles(seq_ratio, non_empty, log_prob.dtype))

    token_kl = _k3(log_prob, old_log_prob) * mask  # samples from pi_old: KL(pi_old || pi)
    seq_kl = token_kl.sum(dim=-1)
    mean_adv = (advantages * mask).sum(dim=-1) / lengths.clamp_min(1.0)
    neg_low = non_empty & (mean_adv < 0) & (seq_ratio < 1.0)
    total = seq_kl.sum()
    share = seq_kl[neg_low].sum() / total.clamp_min(torch.finfo(total.dtype).tiny)
    out["neg_lowratio_kl_frac"] = torch.where(total > 0, share, torch.zeros_like(share))
    return out


@torch.no_grad()
def logprob_gap(a: Tensor, b: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Gap between two log-prob tensors of the same sampled tokens, e.g. trainer vs rollout.

    ``b`` must be the log-probs of the distribution that sampled the tokens (the rollout engine),
    ``a`` the other one (the trainer's ``old_log_prob``).

    Returns (scalar tensors) ``mean_abs_diff`` = mean |a - b| over masked tokens,
    ``max_abs_diff`` = the largest |a - b| over masked tokens (0 without any), and ``k3`` =
    mean over masked tokens of exp(a - b) - (a - b) - 1, the k3 estimate of KL(b || a).
    Shapes: a, b, mask (B, T).
    """
    m = mask.to(a.dtype)
    diff = (a - b).abs()
    return {
        "mean_abs_diff": masked_mean(diff, m),
        "max_abs_diff": (diff * m).amax() if diff.numel() else diff.new_zeros(()),
        "k3": masked_mean(_k3(a, b), m),
    }
