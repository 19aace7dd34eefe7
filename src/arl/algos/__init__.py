"""Pure-torch RL algorithm components (docs/design.md section 2): small registered functions.

Submodules:

- :mod:`~arl.algos.registry`: ``Registry(name)`` (name -> function, errors list valid names);
- :mod:`~arl.algos.aggregation`: ``agg_loss`` and the four aggregation modes;
- :mod:`~arl.algos.policy_losses`: ppo_clip, gspo, cispo, sapo, reinforce; sequence masking;
  truncated IS weights;
- :mod:`~arl.algos.advantages`: grpo, rloo, gigpo (SAMPO's advantage), step returns;
- :mod:`~arl.algos.kl`: k1 / abs / k2 / k3 estimators, KL in the reward;
- :mod:`~arl.algos.filters`: none, dapo, stage_aware group filters;
- :mod:`~arl.algos.diagnostics`: IS-ratio and KL-attribution statistics;
- :mod:`~arl.algos.objective`: ``actor_loss`` composing the above;
- :mod:`~arl.algos.config`: ``validate_algo_config`` and builders from the ``algo`` config.

Nothing here imports Lightning, transformers or another ``arl`` subpackage.
"""

from arl.algos import (
    advantages,
    aggregation,
    config,
    diagnostics,
    filters,
    kl,
    objective,
    policy_losses,
    registry,
)
from arl.algos.config import (
    advantage_kwargs_from_algo,
    filter_kwargs_from_algo,
    objective_config_from_algo,
    validate_algo_config,
)
from arl.algos.objective import ObjectiveConfig, actor_loss
from arl.algos.policy_losses import PolicyLossConfig

__all__ = [
    "ObjectiveConfig",
    "PolicyLossConfig",
    "actor_loss",
    "advantage_kwargs_from_algo",
    "advantages",
    "aggregation",
    "config",
    "diagnostics",
    "filter_kwargs_from_algo",
    "filters",
    "kl",
    "objective",
    "objective_config_from_algo",
    "policy_losses",
    "registry",
    "validate_algo_config",
]
