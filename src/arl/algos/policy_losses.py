"""Per-token policy-gradient losses, sequence masking and truncated IS (docs/design.md section 2).

Notation: r_t = exp(log pi_t - log pi_old,t) token ratio, m_t response mask, |y_i| = sum_t m_t,
sg = stop-gradient, A advantages broadcast over a sample's tokens.

Every loss has the signature (:data:`CONTRACT`; a ``package.module:function`` from outside takes the
same, and ``algo.loss.kwargs`` as extra keywords) ::

    fn(*, log_prob, old_log_prob, advantages, response_mask, cfg) -> (loss_mat, metrics)

with ``cfg`` the ``algo.loss`` block (:class:`arl.algos.schema.LossConfig`: clip bounds, SAPO's
temperatures), (B, T) tensors in and a (B, T) loss matrix out (to be aggregated by
:func:`arl.algos.aggregation.agg_loss`; the values on masked-out positions are meaningless), and
``metrics`` a dict of detached scalar tensors with at least ``clipfrac``, ``clipfrac_lower`` and
``ppo_kl`` (means over the masked tokens of the tensors given).

On-policy (log pi == log pi_old) the gradient of ``ppo_clip``, ``gspo``, ``cispo`` and ``sapo``
w.r.t. log pi equals the REINFORCE gradient -A per token; they differ only off-policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from arl.algos.registry import Contract, Registry

if TYPE_CHECKING:  # the schema imports this module for the registry's names
    from arl.algos.schema import LossConfig

#: clamp of the token log-ratio before exponentiation
LOG_RATIO_CLAMP = 20.0
#: upper clamp of the GSPO per-token log sequence ratio
GSPO_LOG_RATIO_MAX = 10.0


PolicyLoss = Callable[..., tuple[Tensor, dict[str, Tensor]]]

#: how :func:`arl.algos.objective.actor_loss` calls a policy loss (a ``package.module:function`` is checked
#: against it at start-up); ``algo.loss.kwargs`` are passed as extra keywords
CONTRACT = Contract(
    keywords=("log_prob", "old_log_prob", "advantages", "response_mask", "cfg"),
    returns="(loss_mat (B, T), metrics: a dict of scalar tensors, with clipfrac, clipfrac_lower and ppo_kl)",
)
REGISTRY: Registry[PolicyLoss] = Registry("policy loss", CONTRACT)
get = REGISTRY.get


def loss_output(result: object, name: str, like: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """The ``(loss_mat, metrics)`` that policy loss ``name`` returned, checked: ``loss_mat`` a tensor of
    the shape of its (B, T) inputs (``like``), ``metrics`` a mapping; else a ``ValueError`` naming the loss."""
    ok = isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], Mapping)
    if not ok or not isinstance(result[0], Tensor) or result[0].shape != like.shape:
        got = (f"a loss matrix of shape {tuple(result[0].shape)}" if ok and isinstance(result[0], Tensor)
               else f"a {type(result).__name__}")
        raise ValueError(f"policy loss {name!r} returned {got}; it must return {CONTRACT.returns} with the "
                         f"(B, T) = {tuple(like.shape)} of its inputs")
    return result[0], dict(result[1])


def _zero_outside(values: Tensor, mask: Tensor) -> Tensor:
    """values where mask != 0, else 0 (a non-finite value on padding must not become NaN)."""
    return torch.where(mask != 0, values, torch.zeros_like(values))


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over ``mask`` (0 for an empty mask). Any shapes that broadcast."""
    mask = mask.to(values.dtype)
    return (_zero_outside(values, mask) * mask).sum() / mask.sum().clamp_min(1.0)


def _log_ratio(log_prob: Tensor, old_log_prob: Tensor) -> Tensor:
    """log r = log pi - log pi_old clamped to [-20, 20]. (B, T) -> (B, T)."""
    return (log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def _base_metrics(log_prob: Tensor, old_log_prob: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """``ppo_kl`` = mean over masked tokens of (log pi_old - log pi); detached."""
    return {"ppo_kl": masked_mean((old_log_prob - log_prob).detach(), mask)}


def sequence_log_ratio(log_prob: Tensor, old_log_prob: Tensor, response_mask: Tensor) -> Tensor:
    """log s_i = (1/|y_i|) sum_t m_t (log pi - log pi_old). (B, T) -> (B,); 0 for empty rows."""
    mask = response_mask.to(log_prob.dtype)
    lengths = mask.sum(dim=-1).clamp_min(1.0)
    return (_zero_outside(log_prob - old_log_prob, mask) * mask).sum(dim=-1) / lengths


#: how ``gspo`` forms its sequence ratio (``algo.loss.seq_ratio``)
SEQ_RATIOS: tuple[str, ...] = ("geometric", "outlier_weighted")


def outlier_weighted_log_ratio(log_prob: Tensor, old_log_prob: Tensor, response_mask: Tensor, beta: float) -> Tensor:
    """log s_i = sum_t w_it log r_it with w_it = m_t exp(beta |log r_it|) / sum_t' m_t' exp(beta |log r_it'|),
    the mean of the row's token log-ratios weighted by a softmax of their size (``beta`` per nat): a
    token far off-policy weighs exp(beta d) times one that is d nats closer, so one outlier in a long
    response is not diluted by the rest. ``beta`` = 0 is :func:`sequence_log_ratio` to the bit (every
    weight 1 / |y_i|, summed in the same order); a large ``beta`` tends to the log-ratio of the row's
    furthest token. Computed stably (the row's largest beta |log r| subtracted before ``exp``) and
    without gradient. (B, T) -> (B,); 0 for empty rows."""
    with torch.no_grad():
        mask = response_mask.to(log_prob.dtype)
        log_ratio = _zero_outside(log_prob - old_log_prob, mask)
        scores = beta * log_ratio.abs()  # >= 0; 0 outside the mask
        weights = mask * torch.exp(scores - scores.amax(dim=-1, keepdim=True))  # the row's largest: exp(0) = 1
        return (log_ratio * weights).sum(dim=-1) / weights.sum(dim=-1).clamp_min(1.0)


def _max_token_dev(log_prob: Tensor, old_log_prob: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per row the largest and the smallest token log-ratio over the response, (B,) each (0 for an
    empty row); no gradient."""
    with torch.no_grad():
        log_ratio = _zero_outside(log_prob - old_log_prob, mask)
        inside = mask != 0
        high = torch.where(inside, log_ratio, torch.full_like(log_ratio, -torch.inf)).amax(dim=-1)
        low = torch.where(inside, log_ratio, torch.full_like(log_ratio, torch.inf)).amin(dim=-1)
        empty = ~inside.any(dim=-1)
        return torch.where(empty, 0.0, high), torch.where(empty, 0.0, low)


def _past_token_bound(high: Tensor, low: Tensor, advantages: Tensor, token_bound: float) -> Tensor:
    """The tokens whose row's furthest token ratio is past ``token_bound`` = eps_tok on the side the
    token's advantage pushes: A > 0 and max_t r_t > 1 + eps_tok, or A < 0 and min_t r_t < 1 - eps_tok
    (never below for eps_tok >= 1). ``high`` / ``low``: the rows' largest / smallest log r, (B,);
    ``advantages`` (B, T); returns a (B, T) bool."""
    above = math.log1p(token_bound)  # log(1 + eps_tok)
    below = math.log1p(-token_bound) if token_bound < 1.0 else -math.inf  # log(1 - eps_tok)
    return ((advantages > 0) & (high > above).unsqueeze(-1)) | ((advantages < 0) & (low < below).unsqueeze(-1))


@REGISTRY.register("ppo_clip")
def ppo_clip(
    *,
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    cfg: LossConfig,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Token-level PPO clip with asymmetric bounds and dual clip (Schulman 2017; Ye 2020).

    L = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)); for A < 0 additionally
    L = min(L, -A c), c = ``clip_ratio_c``. log r is clamped to [-20, 20].

    Shapes: all inputs (B, T); returns loss_mat (B, T). Metrics: ``clipfrac`` (tokens where the
    clipped branch is active), ``clipfrac_lower`` (tokens where the dual clip is active), ``ppo_kl``.
    """
    mask = response_mask
    ratio = torch.exp(_log_ratio(log_prob, old_log_prob))
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * ratio.clamp(1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high)
    loss_ppo = torch.maximum(loss_unclipped, loss_clipped)
    loss_dual = -advantages * cfg.clip_ratio_c
    loss_mat = torch.where(advantages < 0, torch.minimum(loss_ppo, loss_dual), loss_ppo)

    metrics = _base_metrics(log_prob, old_log_prob, mask)
    with torch.no_grad():
        metrics["clipfrac"] = masked_mean((loss_clipped > loss_unclipped).float(), mask)
        metrics["clipfrac_lower"] = masked_mean(((loss_ppo > loss_dual) & (advantages < 0)).float(), mask)
    return loss_mat, metrics


@REGISTRY.register("gspo")
def gspo(
    *,
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    cfg: LossConfig,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO: clipped sequence-level ratio (Zheng et al., Qwen 2025).

    log s_i = (1/|y_i|) sum_t m_t (log pi - log pi_old) (the length-normalised sequence ratio;
    ``cfg.seq_ratio`` = ``outlier_weighted``: :func:`outlier_weighted_log_ratio` with
    ``cfg.outlier_beta``); per token log s_it = sg(log s_i) + log pi_t - sg(log pi_t), clamped
    above at 10, so the value is s_i on every token and the gradient is s_i * grad log pi_t;
    L = max(-A s_it, -A clip(s_it, 1 - eps_low, 1 + eps_high)). With ``cfg.token_bound`` = eps_tok,
    a token whose row's furthest token ratio is past the bound on its advantage's side
    (A > 0: max_t r_t > 1 + eps_tok; A < 0: min_t r_t < 1 - eps_tok) keeps its value and loses its
    gradient, as a clipped one.

    Shapes: all inputs (B, T); returns loss_mat (B, T). Metrics: ``clipfrac`` (share of tokens in
    clipped sequences, by the sequence ratio or the token bound), ``clipfrac_lower`` = 0 (no dual
    clip), ``token_bound_frac`` (share of tokens clipped by the token bound; with it set),
    ``seq_ratio_max_token_dev`` (mean over non-empty rows of max_t |log r_t|), ``ppo_kl``.
    """
    mask = response_mask
    if cfg.seq_ratio == "outlier_weighted":
        log_seq_ratio = outlier_weighted_log_ratio(log_prob, old_log_prob, mask, cfg.outlier_beta)  # (B,)
    else:
        log_seq_ratio = sequence_log_ratio(log_prob, old_log_prob, mask).detach()  # (B,)
    log_token_seq_ratio = log_seq_ratio.unsqueeze(-1) + log_prob - log_prob.detach()
    seq_ratio = torch.exp(log_token_seq_ratio.clamp(max=GSPO_LOG_RATIO_MAX))
    loss_unclipped = -advantages * seq_ratio
    loss_clipped = -advantages * seq_ratio.clamp(1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high)
    loss_mat = torch.maximum(loss_unclipped, loss_clipped)
    clipped = loss_clipped > loss_unclipped

    metrics = _base_metrics(log_prob, old_log_prob, mask)
    high, low = _max_token_dev(log_prob, old_log_prob, mask)
    if cfg.token_bound is not None:
        past = _past_token_bound(high, low, advantages, cfg.token_bound)
        loss_mat = torch.where(past, loss_mat.detach(), loss_mat)
        clipped = clipped | past
        metrics["token_bound_frac"] = masked_mean(past.float(), mask)
    with torch.no_grad():
        metrics["clipfrac"] = masked_mean(clipped.float(), mask)
        metrics["clipfrac_lower"] = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
        rows = (mask.sum(dim=-1) > 0).to(log_prob.dtype)
        metrics["seq_ratio_max_token_dev"] = (torch.maximum(high, -low) * rows).sum() / rows.sum().clamp_min(1.0)
    return loss_mat, metrics


@REGISTRY.register("cispo")
def cispo(
    *,
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    cfg: LossConfig,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO: clipped IS weight times REINFORCE (MiniMax-M1, 2025).

    L = -sg(clip(r, 1 - eps_low, 1 + eps_high)) A log pi. No token is ever dropped from the
    gradient: clipping bounds the weight, not the update. With eps_low >= 1 there is no lower
    bound (the paper's setting).

    Shapes: all inputs (B, T); returns loss_mat (B, T). Metrics: ``clipfrac`` (tokens whose weight
    was truncated, either side), ``clipfrac_lower`` = 0, ``ppo_kl``.
    """
    mask = response_mask
    with torch.no_grad():
        ratio = torch.exp(_log_ratio(log_prob, old_log_prob))
        weight = ratio.clamp(1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high)
        weight = _zero_outside(weight, mask)  # no NaN weight on padding (it would reach the grad)
    loss_mat = -weight * advantages * log_prob

    metrics = _base_metrics(log_prob, old_log_prob, mask)
    with torch.no_grad():
        metrics["clipfrac"] = masked_mean((weight != ratio).float(), mask)
        metrics["clipfrac_lower"] = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    return loss_mat, metrics


@REGISTRY.register("sapo")
def sapo(
    *,
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    cfg: LossConfig,
) -> tuple[Tensor, dict[str, Tensor]]:
    """SAPO: soft adaptive gate instead of a hard clip (Qwen 2025).

    tau = tau_pos if A > 0 else tau_neg; f(r) = (4 / tau) sigmoid(tau (r - 1)); L = -f(r) A.
    f'(r) = 4 sigmoid(tau (r-1)) (1 - sigmoid(tau (r-1))), so f'(1) = 1: on-policy the gradient is
    the REINFORCE gradient, and it decays smoothly as r leaves 1 (faster for larger tau).

    Shapes: all inputs (B, T); returns loss_mat (B, T). Metrics: ``clipfrac`` = ``clipfrac_lower``
    = 0 (no hard clip), ``gate_weight`` (mean of f'(r) over masked tokens: 1 = unattenuated),
    ``ppo_kl``.
    """
    mask = response_mask
    ratio = torch.exp(_log_ratio(log_prob, old_log_prob))
    tau = torch.where(
        advantages > 0,
        torch.as_tensor(cfg.tau_pos, dtype=ratio.dtype, device=ratio.device),
        torch.as_tensor(cfg.tau_neg, dtype=ratio.dtype, device=ratio.device),
    )
    gate_arg = tau * (ratio - 1.0)
    loss_mat = -(4.0 / tau) * torch.sigmoid(gate_arg) * advantages

    metrics = _base_metrics(log_prob, old_log_prob, mask)
    with torch.no_grad():
        sig = torch.sigmoid(gate_arg)
        zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
        metrics["clipfrac"] = zero
        metrics["clipfrac_lower"] = zero.clone()
        metrics["gate_weight"] = masked_mean(4.0 * sig * (1.0 - sig), mask)
    return loss_mat, metrics


@REGISTRY.register("reinforce")
def reinforce(
    *,
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    cfg: LossConfig,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Plain REINFORCE: L = -A log pi (no ratio, no clip; ``cfg`` unused).

    Shapes: all inputs (B, T); returns loss_mat (B, T). Metrics: ``clipfrac`` =
    ``clipfrac_lower`` = 0, ``ppo_kl`` (from ``old_log_prob``, for monitoring).
    """
    del cfg
    loss_mat = -advantages * log_prob
    metrics = _base_metrics(log_prob, old_log_prob, response_mask)
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    metrics["clipfrac"] = zero
    metrics["clipfrac_lower"] = zero.clone()
    return loss_mat, metrics


def sequence_mask(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    delta: float,
) -> Tensor:
    """Sequence masking of negative-advantage, low-ratio sequences (ARLArena).

    Sequence i is dropped when its mean advantage over its response tokens is negative AND
    (1/|y_i|) sum_t m_t (log pi_old - log pi) > delta (equivalently s_i < exp(-delta)): the
    policy already moved away from it, and pushing further down is what collapses tolerant
    clipping. Empty sequences stay (all zero).

    Shapes: all inputs (B, T); returns the (B, T) float mask = response_mask with dropped rows set
    to 0 (dtype of ``log_prob``, no gradient).
    """
    with torch.no_grad():
        mask = response_mask.to(log_prob.dtype)
        lengths = mask.sum(dim=-1).clamp_min(1.0)
        mean_adv = (advantages * mask).sum(dim=-1) / lengths  # (B,)
        mean_drift = ((old_log_prob - log_prob) * mask).sum(dim=-1) / lengths  # (B,)
        drop = (mean_adv < 0) & (mean_drift > delta)
        return mask * (~drop).to(mask.dtype).unsqueeze(-1)


#: where the rollout importance weight is formed (``algo.rollout_correction.level``)
IS_LEVELS: tuple[str, ...] = ("token", "sequence", "geometric")
#: what a weight above the cap becomes (``algo.rollout_correction.mode``)
IS_MODES: tuple[str, ...] = ("truncate", "mask")


def rollout_is_weights(
    old_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor, cap: float, level: str, mode: str
) -> Tensor:
    """Importance weights of pi_old against the policy that sampled the tokens (pi_rollout), detached.

    With pi_old recomputed by the trainer this is the rollout correction: for the engine-vs-trainer
    mismatch truncated IS (Yao et al. 2025), and for stale samples decoupled PPO's behaviour weight
    pi_prox / pi_behav (Fu et al. 2025, AReaL), pi_old being the proximal policy, the learner's
    weights before the update. With log rho_t = log pi_old,t - log pi_rollout,t (clamped to
    [-20, 20]):

    - ``level``: ``token`` w_t = rho_t; ``sequence`` w = exp(sum_t m_t log rho_t), the sequence's
      likelihood ratio, on every token of the row; ``geometric`` w = exp(mean_t log rho_t), its
      per-token geometric mean (the scale of GSPO's sequence ratio, which SAMPO uses);
    - ``mode``: ``truncate`` min(w, cap) (truncated IS); ``mask`` w where w <= cap, else 0 (AReaL's
      behaviour-weight cap: a token, or a row at sequence levels, past the cap takes no gradient; it
      still counts in the loss's normaliser).

    Positions outside ``response_mask`` get weight 0. Shapes: all inputs (B, T); returns (B, T).
    """
    if level not in IS_LEVELS:
        raise ValueError(f"level={level!r} is not valid; valid: {', '.join(IS_LEVELS)}")
    if mode not in IS_MODES:
        raise ValueError(f"mode={mode!r} is not valid; valid: {', '.join(IS_MODES)}")
    with torch.no_grad():
        mask = response_mask.to(old_log_prob.dtype)
        log_rho = (old_log_prob - rollout_log_prob) * mask
        if level == "sequence":
            log_rho = log_rho.sum(dim=-1, keepdim=True).expand_as(log_rho)
        elif level == "geometric":
            log_rho = (log_rho.sum(dim=-1, keepdim=True) / mask.sum(dim=-1, keepdim=True).clamp_min(1.0)).expand_as(log_rho)
        weights = torch.exp(log_rho.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
        weights = weights.clamp(max=cap) if mode == "truncate" else torch.where(weights <= cap, weights, 0.0)
        return weights * mask
