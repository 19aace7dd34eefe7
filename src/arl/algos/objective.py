"""The actor objective: policy loss + sequence masking + truncated IS + KL + entropy.

:func:`actor_loss` composes the registered pieces in this order:

1. ``loss_mat, m = policy_losses.get(cfg.loss_name)(...)``;
2. sequence masking (``cfg.seq_mask_delta``): the policy-loss mask drops negative-advantage
   low-ratio sequences; KL and entropy keep the full response mask;
3. truncated IS (``cfg.rollout_correction_cap``): ``loss_mat *= min(exp(old - rollout), cap)``;
4. ``pg_loss = agg_loss(loss_mat, policy mask, cfg.loss_agg, ...)``;
5. ``+ kl_coef * agg_loss(kl_penalty(log_prob, ref_log_prob))`` when ``cfg.kl_in_loss``;
6. ``- entropy_coeff * agg_loss(entropy)``.

All terms share the normalisers: ``global_tokens`` / ``global_seqs`` counted on the *unmasked*
response mask of the whole mini-batch (default: of the tensors given). A masked sequence
therefore contributes zero but still counts in the denominator, exactly like a sample with zero
advantage, and the objective does not depend on how the mini-batch is split into micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from arl.algos import aggregation, kl, policy_losses
from arl.algos.policy_losses import PolicyLossConfig


@dataclass
class ObjectiveConfig:
    """Settings of :func:`actor_loss` (built from ``algo.*`` by
    :func:`arl.algos.objective_config_from_algo`).

    Attributes:
        loss_name: a name of :data:`arl.algos.policy_losses.REGISTRY`.
        loss_agg: one of :data:`arl.algos.aggregation.AGG_MODES`.
        loss: clip / tau hyper-parameters.
        seq_mask_delta: sequence-masking threshold delta; None disables masking.
        rollout_correction_cap: truncated-IS cap; None disables the correction.
        kl_coef: weight of the KL term in the loss.
        kl_estimator: a name of :data:`arl.algos.kl.ESTIMATORS`.
        kl_in_loss: add the KL term to the loss (False: the trainer puts it in the reward).
        entropy_coeff: weight of the entropy bonus.
        horizon: H of ``seq-mean-token-sum-norm``, a constant (the trainer passes the generation
            budget, ``algo.loss.horizon``; None falls back to the padded length of the tensors
            given, which is only right for a batch that is never split).
    """

    loss_name: str = "ppo_clip"
    loss_agg: str = "token-mean"
    loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    seq_mask_delta: float | None = None
    rollout_correction_cap: float | None = None
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_in_loss: bool = True
    entropy_coeff: float = 0.0
    horizon: int | None = None


def actor_loss(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    cfg: ObjectiveConfig,
    ref_log_prob: Tensor | None = None,
    rollout_log_prob: Tensor | None = None,
    entropy: Tensor | None = None,
    global_tokens: Tensor | float | None = None,
    global_seqs: Tensor | float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The scalar actor loss of one (micro-)batch and its metrics.

    Args:
        log_prob: (B, T) log pi of the sampled tokens, with gradient.
        old_log_prob: (B, T) log pi_old (trainer forward before the update).
        advantages: (B, T) advantages broadcast over each sample's tokens.
        response_mask: (B, T) 1 on the tokens to train.
        cfg: the objective settings.
        ref_log_prob: (B, T) reference log-probs; required when ``kl_in_loss`` and
            ``kl_coef > 0``.
        rollout_log_prob: (B, T) rollout-engine log-probs; required when
            ``rollout_correction_cap`` is set.
        entropy: (B, T) per-token policy entropy; required when ``entropy_coeff > 0``.
        global_tokens, global_seqs: normalisers of the whole mini-batch
            (:func:`arl.algos.aggregation.normalisers` summed over micro-batches and ranks).

    Returns:
        ``(loss, metrics)``; metrics are detached scalars: ``pg_loss``, ``kl_loss`` (unscaled,
        0 when not computed), ``entropy`` (0 when not given), ``clipfrac``, ``clipfrac_lower``,
        ``ppo_kl``, ``masked_seqs`` (sequences dropped by sequence masking), plus any extra
        metric of the policy loss. With global normalisers, ``pg_loss`` / ``kl_loss`` /
        ``entropy`` are this micro-batch's share (they add up over micro-batches).
    """
    mask = response_mask.to(log_prob.dtype)
    local_tokens, local_seqs = aggregation.normalisers(mask)
    tokens = local_tokens if global_tokens is None else global_tokens
    seqs = local_seqs if global_seqs is None else global_seqs

    def aggregate(values: Tensor, values_mask: Tensor) -> Tensor:
        return aggregation.agg_loss(
            values,
            values_mask,
            cfg.loss_agg,
            global_tokens=tokens,
            global_seqs=seqs,
            horizon=cfg.horizon,
        )

    loss_mat, metrics = policy_losses.get(cfg.loss_name)(
        log_prob=log_prob,
        old_log_prob=old_log_prob,
        advantages=advantages,
        response_mask=mask,
        cfg=cfg.loss,
    )

    pg_mask = mask
    masked_seqs = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    if cfg.seq_mask_delta is not None:
        pg_mask = policy_losses.sequence_mask(log_prob, old_log_prob, advantages, mask, cfg.seq_mask_delta)
        dropped = (mask.sum(dim=-1) > 0) & (pg_mask.sum(dim=-1) == 0)
        masked_seqs = dropped.to(log_prob.dtype).sum()

    if cfg.rollout_correction_cap is not None:
        if rollout_log_prob is None:
            raise ValueError("rollout_correction_cap is set but rollout_log_prob was not given")
        loss_mat = loss_mat * policy_losses.truncated_is_weights(
            old_log_prob, rollout_log_prob, mask, cfg.rollout_correction_cap
        )

    pg_loss = aggregate(loss_mat, pg_mask)
    loss = pg_loss

    kl_loss = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    if cfg.kl_in_loss and ref_log_prob is not None:
        kl_loss = aggregate(kl.kl_penalty(log_prob, ref_log_prob, cfg.kl_estimator), mask)
        loss = loss + cfg.kl_coef * kl_loss
    elif cfg.kl_in_loss and cfg.kl_coef > 0:
        raise ValueError("kl_in_loss with kl_coef > 0 needs ref_log_prob")

    entropy_value = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    if entropy is not None:
        entropy_value = aggregate(entropy, mask)
        loss = loss - cfg.entropy_coeff * entropy_value
    elif cfg.entropy_coeff != 0:
        raise ValueError("entropy_coeff != 0 needs the per-token entropy")

    out = {key: value.detach() for key, value in metrics.items()}
    out.update(
        pg_loss=pg_loss.detach(),
        kl_loss=kl_loss.detach(),
        entropy=entropy_value.detach(),
        masked_seqs=masked_seqs,
    )
    return loss, out
