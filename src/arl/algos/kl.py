"""Per-token KL estimators between the policy and the frozen reference (docs/design.md sections 2 and 6).

The tokens are sampled from the policy pi; with x = log pi_ref - log pi (per token):

=========================  ===================================  ============================
name                       value                                property
=========================  ===================================  ============================
k1                         -x                                   unbiased, high variance
abs                        |x|
k2                         x^2 / 2                              low variance, biased
k3 (alias low_var_kl)      exp(x) - x - 1, clamped [-10, 10]    unbiased, >= 0, low variance
=========================  ===================================  ============================

(Schulman, "Approximating KL divergence", 2020.) Two placements:

- in the loss (``algo.kl.in_loss=true``, default): :func:`kl_penalty` aggregated like the policy
  loss, times ``algo.kl.coef``, is added to the loss (see :mod:`arl.algos.objective`);
- in the reward (``algo.kl.in_loss=false``): :func:`kl_in_reward` gives a per-sample penalty that
  the trainer subtracts from that turn sample's reward before advantages are computed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from arl.algos.registry import Contract, Registry

KLEstimator = Callable[[Tensor, Tensor], Tensor]

#: how :func:`kl_penalty` calls an estimator (a ``package.module:function`` is checked against it at start-up;
#: no kwargs: the loss and the reward placement both call it with the two log-probs alone)
CONTRACT = Contract(positional=("log_prob", "ref_log_prob"), returns="the per-token KL estimate (B, T)", kwargs=False)
ESTIMATORS: Registry[KLEstimator] = Registry("kl estimator", CONTRACT)
get = ESTIMATORS.get

#: log-ratio clamp before exponentiation (keeps exp finite and its gradient defined)
LOG_RATIO_CLAMP = 20.0
#: value clamp of the k3 estimator
K3_CLAMP = 10.0


@ESTIMATORS.register("k1")
def k1(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    """k1 = log pi - log pi_ref. Shapes (B, T) -> (B, T)."""
    return log_prob - ref_log_prob


@ESTIMATORS.register("abs")
def abs_kl(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    """abs = |log pi - log pi_ref|. Shapes (B, T) -> (B, T)."""
    return (log_prob - ref_log_prob).abs()


@ESTIMATORS.register("k2")
def k2(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    """k2 = (log pi - log pi_ref)^2 / 2. Shapes (B, T) -> (B, T)."""
    return 0.5 * (log_prob - ref_log_prob).square()


@ESTIMATORS.register("k3", "low_var_kl")
def k3(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    """k3 = exp(x) - x - 1 with x = log pi_ref - log pi, clamped to [-10, 10]. (B, T) -> (B, T).

    x is clamped to [-20, 20] first so exp never overflows (as verl's ``low_var_kl``).
    """
    x = (ref_log_prob - log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (torch.exp(x) - x - 1.0).clamp(-K3_CLAMP, K3_CLAMP)


def kl_penalty(log_prob: Tensor, ref_log_prob: Tensor, estimator: str) -> Tensor:
    """Per-token KL estimate by name (see the module table; or a ``package.module:function``).
    (B, T), (B, T) -> (B, T); an estimate of another shape raises ``ValueError`` naming the estimator."""
    out = ESTIMATORS.get(estimator)(log_prob, ref_log_prob)
    if not isinstance(out, Tensor) or out.shape != log_prob.shape:
        got = f"shape {tuple(out.shape)}" if isinstance(out, Tensor) else f"a {type(out).__name__}"
        raise ValueError(f"kl estimator {estimator!r} returned {got}; it must return {CONTRACT.returns} "
                         f"= {tuple(log_prob.shape)}")
    return out


def kl_in_reward(
    log_prob: Tensor,
    ref_log_prob: Tensor,
    response_mask: Tensor,
    coef: float,
    estimator: str,
) -> Tensor:
    """Per-sample KL penalty for the ``kl.in_loss=false`` placement.

    Returns ``coef * sum_t m_t kl_t`` of shape (B,), detached. The trainer subtracts it from the
    reward of that turn sample (``reward_i - penalty_i``) before advantages are computed, so it
    shapes the reward instead of adding a gradient term; the environment rewards logged as
    ``rollout/return_mean`` stay raw.

    Args:
        log_prob, ref_log_prob: (B, T) log-probs of the sampled tokens (policy at rollout time,
            reference).
        response_mask: (B, T) 1 on response tokens.
        coef: penalty coefficient (``algo.kl.coef``).
        estimator: a name of :data:`ESTIMATORS`.
    """
    with torch.no_grad():
        kl = kl_penalty(log_prob, ref_log_prob, estimator)
        return coef * (kl * response_mask.to(kl.dtype)).sum(dim=-1)
