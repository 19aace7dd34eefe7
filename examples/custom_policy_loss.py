"""A policy loss from outside ARL, chosen by ``algo.loss.name=custom_policy_loss:soft_clip``: no fork, no
registration (docs/algorithms.md, "Your own part").

Token-level PPO whose clip is soft. The ratio r = pi / pi_old passes through

    s(r) = 1 + eps * tanh((r - 1) / eps),   eps = eps_high for r >= 1, eps_low for r < 1

(``algo.loss.clip_ratio_high`` / ``clip_ratio_low``, asymmetric as DAPO's clip-higher), and the loss is PPO's
pessimistic bound L = max(-A r, -A s(r)). s(1) = 1 and s'(1) = 1, and s saturates at 1 + eps_high and
1 - eps_low: where PPO's hard clip drops a token's gradient, the soft clip shrinks it smoothly, by
1 - tanh^2((r - 1) / eps). On-policy (r = 1) the gradient is REINFORCE's, as PPO's. Then the tokens of
positive advantage are weighted by ``positive_weight``, the lambda of W-REINFORCE (Zhu et al. 2025, "The
Surprising Effectiveness of Negative Reinforcement in LLM Reasoning": below 1 the update leans on the negative
samples). That setting is this loss's own: it arrives through ``algo.loss.kwargs`` and the start-up validation
checks it against the signature (a missing or unknown one stops the run before any model loads)::

    PYTHONPATH=examples python src/train.py algo=grpo algo.loss.name=custom_policy_loss:soft_clip \\
        +algo.loss.kwargs.positive_weight=0.5 debug=smoke

The function has the policy losses' signature (:data:`arl.algos.policy_losses.CONTRACT`): the (B, T) tensors
and ``cfg``, the ``algo.loss`` block, by keyword; it returns the (B, T) loss matrix, which ARL aggregates by
``algo.loss.agg`` (:func:`arl.algos.aggregation.agg_loss`, with the sequence masking, rollout correction, KL and
entropy terms of :func:`arl.algos.objective.actor_loss` around it), and its metrics, means over the response
tokens (:func:`arl.algos.policy_losses.masked_mean`) logged under ``actor/``: ``clipfrac`` (tokens on the
soft-clipped branch), ``clipfrac_lower`` (0: no dual clip), ``ppo_kl`` and ``token_weight`` (the mean weight,
``positive_weight`` on the positive-advantage tokens and 1 elsewhere).

The module also holds a KL estimator from outside, ``algo.kl.estimator=custom_policy_loss:reverse_kl``
(:func:`reverse_kl`): the KL term of the same loss, the other way round.
"""

from __future__ import annotations

import torch
from torch import Tensor

from arl.algos.kl import K3_CLAMP
from arl.algos.policy_losses import LOG_RATIO_CLAMP, masked_mean
from arl.algos.schema import LossConfig


def soft_ratio(ratio: Tensor, eps_low: float, eps_high: float) -> Tensor:
    """s(r) = 1 + eps tanh((r - 1) / eps), eps = eps_high for r >= 1 and eps_low below; an eps of 0 gives
    s = 1 (the hard clip's limit). Any shape -> the same shape."""
    eps = torch.full_like(ratio, eps_low).masked_fill(ratio >= 1.0, eps_high)
    return 1.0 + eps * torch.tanh((ratio - 1.0) / eps.clamp_min(1e-12))


def soft_clip(
    *,
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    cfg: LossConfig,
    positive_weight: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Soft-clipped token PPO, positive advantages weighted by ``positive_weight`` (module docstring).

    L = w * max(-A r, -A s(r)) with w = ``positive_weight`` where A > 0, else 1; log r is clamped to
    [-20, 20] as in ARL's losses. Shapes: all inputs (B, T); returns loss_mat (B, T) and the metrics.
    """
    if positive_weight < 0:
        raise ValueError(f"algo.loss.kwargs.positive_weight={positive_weight} must be >= 0")
    mask = response_mask
    ratio = torch.exp((log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    loss_unclipped = -advantages * ratio
    loss_soft = -advantages * soft_ratio(ratio, cfg.clip_ratio_low, cfg.clip_ratio_high)
    weight = torch.where(advantages > 0, torch.full_like(advantages, positive_weight), torch.ones_like(advantages))
    loss_mat = weight * torch.maximum(loss_unclipped, loss_soft)

    with torch.no_grad():
        metrics = {
            "clipfrac": masked_mean((loss_soft > loss_unclipped).float(), mask),
            "clipfrac_lower": torch.zeros((), dtype=log_prob.dtype, device=log_prob.device),
            "ppo_kl": masked_mean((old_log_prob - log_prob).detach(), mask),
            "token_weight": masked_mean(weight, mask),
        }
    return loss_mat, metrics


def reverse_kl(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    """Per-token estimate of the reverse KL(pi_ref || pi) from tokens sampled from pi: with
    u = pi_ref / pi, u log u - (u - 1) (Schulman 2020, "Approximating KL Divergence": its expectation
    under pi is KL(pi_ref || pi), and it is >= 0 token by token). Where ARL's k3 estimates KL(pi || pi_ref),
    which lets pi drop what pi_ref does, this one penalises pi most for dropping tokens pi_ref likes
    (mass-covering). log u is clamped to [-20, 20] and the value to [0, 10], as ARL's k3.

    The KL estimators' signature (:data:`arl.algos.kl.CONTRACT`): the two (B, T) log-probs by position ->
    (B, T). ``algo.kl.estimator=custom_policy_loss:reverse_kl`` uses it in the loss or, with
    ``algo.kl.in_loss=false``, in the reward.
    """
    log_u = (ref_log_prob - log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    u = torch.exp(log_u)
    return (u * log_u - (u - 1.0)).clamp(0.0, K3_CLAMP)
