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
- :mod:`~arl.algos.clip_control`: the factor on the clip bounds that follows the training stage
  (schedule, adaptive controller) and its state across iterations;
- :mod:`~arl.algos.schema`: the ``algo`` config group defined once (typed :class:`AlgoConfig`,
  defaults, checks); ``validate_algo_config`` and ``algo_config``.

Nothing here imports Lightning, transformers or another ``arl`` subpackage.
"""

from arl.algos import (
    advantages,
    aggregation,
    clip_control,
    diagnostics,
    filters,
    kl,
    objective,
    policy_losses,
    registry,
    schema,
)
from arl.algos.objective import actor_loss
from arl.algos.schema import AlgoConfig, algo_config, validate_algo_config

__all__ = [
    "AlgoConfig",
    "actor_loss",
    "advantages",
    "aggregation",
    "algo_config",
    "clip_control",
    "diagnostics",
    "filters",
    "kl",
    "objective",
    "policy_losses",
    "registry",
    "schema",
    "validate_algo_config",
]
