"""The actor objective: policy loss + sequence masking + truncated IS + KL + entropy.

:func:`actor_loss` composes the registered pieces in this order:

1. ``loss_mat, m = policy_losses.get(cfg.loss.name)(..., **cfg.loss.kwargs)`` (a registered name or a
   ``package.module:function``; its result checked by :func:`~arl.algos.policy_losses.loss_output`);
2. sequence masking (``cfg.seq_mask``): the policy-loss mask drops negative-advantage
   low-ratio sequences; KL and entropy keep the full response mask;
3. rollout correction (``cfg.rollout_correction``): ``loss_mat *= w``, the importance weight of
   pi_old against the sampling policy at token, sequence or geometric level, truncated or masked at
   the cap (:func:`arl.algos.policy_losses.rollout_is_weights`: truncated IS, or decoupled PPO's
   behaviour weight for stale samples);
4. ``pg_loss = agg_loss(loss_mat, policy mask, cfg.loss.agg, ...)``;
5. ``+ kl.coef * agg_loss(kl_penalty(log_prob, ref_log_prob))`` when ``cfg.kl.in_loss``;
6. ``- entropy_coef * agg_loss(entropy)``.

``cfg`` is the typed ``algo`` group, :class:`arl.algos.schema.AlgoConfig`.

All terms share the normalisers: ``global_tokens`` / ``global_seqs`` counted on the *unmasked*
response mask of the whole mini-batch (default: of the tensors given). A masked sequence
therefore contributes zero but still counts in the denominator, exactly like a sample with zero
advantage, and the objective does not depend on how the mini-batch is split into micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor

from arl.algos import aggregation, kl, policy_losses
from arl.algos.schema import AlgoConfig


@dataclass(frozen=True)
class TokenBatch:
    """The (B, T) tensors of one (micro-)batch that :func:`actor_loss` reads.

    Attributes:
        log_prob: log pi of the sampled tokens, with gradient.
        old_log_prob: log pi_old (trainer forward before the update).
        advantages: the advantages broadcast over each sample's tokens.
        response_mask: 1 on the tokens to train.
        ref_log_prob: reference log-probs; required when ``kl.in_loss`` and ``kl.coef > 0``.
        rollout_log_prob: rollout-engine log-probs; required when ``rollout_correction.enabled``.
        entropy: per-token policy entropy; required when ``entropy_coef > 0``.
    """

    log_prob: Tensor
    old_log_prob: Tensor
    advantages: Tensor
    response_mask: Tensor
    ref_log_prob: Tensor | None = None
    rollout_log_prob: Tensor | None = None
    entropy: Tensor | None = None

    def rows(self, lo: int, hi: int) -> TokenBatch:
        """Rows ``lo:hi`` of every tensor (a micro-batch of this batch)."""
        return TokenBatch(**{f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[lo:hi]
                             for f in fields(self)})


def actor_loss(
    batch: TokenBatch,
    cfg: AlgoConfig,
    global_tokens: Tensor | float | None = None,
    global_seqs: Tensor | float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The scalar actor loss of one (micro-)batch and its metrics.

    Args:
        batch: the (B, T) tensors (:class:`TokenBatch`).
        cfg: the ``algo`` group (``cfg.loss.horizon``: H of ``seq-mean-token-sum-norm``, which the
            trainer sets to the generation budget; None falls back to the padded length of the
            tensors given, right only for a batch that is never split).
        global_tokens, global_seqs: normalisers of the whole mini-batch
            (:func:`arl.algos.aggregation.normalisers` summed over micro-batches and ranks).

    Returns:
        ``(loss, metrics)``; metrics are detached scalars: ``pg_loss``, ``kl_loss`` (unscaled,
        0 when not computed), ``entropy`` (0 when not given), ``clipfrac``, ``clipfrac_lower``,
        ``ppo_kl``, ``masked_seqs`` (sequences dropped by sequence masking), plus any extra
        metric of the policy loss. With global normalisers, ``pg_loss`` / ``kl_loss`` /
        ``entropy`` are this micro-batch's share (they add up over micro-batches).
    """
    log_prob, old_log_prob, advantages = batch.log_prob, batch.old_log_prob, batch.advantages
    ref_log_prob, rollout_log_prob, entropy = batch.ref_log_prob, batch.rollout_log_prob, batch.entropy
    mask = batch.response_mask.to(log_prob.dtype)
    local_tokens, local_seqs = aggregation.normalisers(mask)
    tokens = local_tokens if global_tokens is None else global_tokens
    seqs = local_seqs if global_seqs is None else global_seqs

    def aggregate(values: Tensor, values_mask: Tensor) -> Tensor:
        return aggregation.agg_loss(
            values,
            values_mask,
            cfg.loss.agg,
            global_tokens=tokens,
            global_seqs=seqs,
            horizon=cfg.loss.horizon,
        )

    result = policy_losses.get(cfg.loss.name)(
        log_prob=log_prob,
        old_log_prob=old_log_prob,
        advantages=advantages,
        response_mask=mask,
        cfg=cfg.loss,
        **cfg.loss.kwargs,
    )
    loss_mat, metrics = policy_losses.loss_output(result, cfg.loss.name, log_prob)

    pg_mask, masked_seqs = _sequence_mask(log_prob, old_log_prob, advantages, mask, cfg)
    loss_mat = _rollout_correction(loss_mat, old_log_prob, rollout_log_prob, mask, cfg)

    pg_loss = aggregate(loss_mat, pg_mask)
    loss = pg_loss

    kl_loss = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    if cfg.kl.in_loss and ref_log_prob is not None:
        kl_loss = aggregate(kl.kl_penalty(log_prob, ref_log_prob, cfg.kl.estimator), mask)
        loss = loss + cfg.kl.coef * kl_loss
    elif cfg.kl.in_loss and cfg.kl.coef > 0:
        raise ValueError("kl.in_loss with kl.coef > 0 needs ref_log_prob")

    entropy_value = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    if entropy is not None:
        entropy_value = aggregate(entropy, mask)
        loss = loss - cfg.entropy_coef * entropy_value
    elif cfg.entropy_coef != 0:
        raise ValueError("entropy_coef != 0 needs the per-token entropy")

    out = {key: value.detach() for key, value in metrics.items()}
    out.update(
        pg_loss=pg_loss.detach(),
        kl_loss=kl_loss.detach(),
        entropy=entropy_value.detach(),
        masked_seqs=masked_seqs,
    )
    return loss, out


def _sequence_mask(
    log_prob: Tensor, old_log_prob: Tensor, advantages: Tensor, mask: Tensor, cfg: AlgoConfig
) -> tuple[Tensor, Tensor]:
    """Step 2, sequence masking (``cfg.seq_mask``): ``(pg_mask, masked_seqs)``, the policy-loss mask
    (B, T), i.e. ``mask`` (B, T) without the dropped sequences, and the number of sequences dropped
    (a scalar); ``(mask, 0)`` when disabled."""
    if not cfg.seq_mask.enabled:
        return mask, torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    pg_mask = policy_losses.sequence_mask(log_prob, old_log_prob, advantages, mask, cfg.seq_mask.delta)
    dropped = (mask.sum(dim=-1) > 0) & (pg_mask.sum(dim=-1) == 0)
    return pg_mask, dropped.to(log_prob.dtype).sum()


def _rollout_correction(
    loss_mat: Tensor, old_log_prob: Tensor, rollout_log_prob: Tensor | None, mask: Tensor, cfg: AlgoConfig
) -> Tensor:
    """Step 3, the rollout correction (``cfg.rollout_correction``): ``loss_mat`` (B, T) times the
    importance weights of :func:`~arl.algos.policy_losses.rollout_is_weights`; ``loss_mat`` itself
    when disabled."""
    if not cfg.rollout_correction.enabled:
        return loss_mat
    if rollout_log_prob is None:
        raise ValueError("rollout_correction is enabled but rollout_log_prob was not given")
    rc = cfg.rollout_correction
    weights = policy_losses.rollout_is_weights(old_log_prob, rollout_log_prob, mask, rc.cap, rc.level, rc.mode)
    return loss_mat * weights
