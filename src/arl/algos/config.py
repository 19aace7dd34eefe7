"""Validation of the ``algo`` config group and conversion to the objects of :mod:`arl.algos`.

The schema (``configs/algo/base.yaml`` holds every key with its default)::

    name: str
    loss: {name, agg, horizon, clip_ratio_low, clip_ratio_high, clip_ratio_c, tau_pos, tau_neg}
    seq_mask: {enabled, delta}
    rollout_correction: {enabled, cap}
    advantage: {name, gamma, step_weight, norm, norm_by_std, cross_steps, invalid_penalty}
    filter: {name, max_rollout_rounds, cold_start, fill_last_round, valid_ratio_threshold}
    kl: {coef, estimator, in_loss}
    entropy_coeff: float

:func:`validate_algo_config` checks names, types and ranges, and that no key is missing or
unknown, and raises one ``ValueError`` listing every problem, each naming its key
(``algo.loss.name='nope' is not valid; valid: cispo, gspo, ppo_clip, reinforce, sapo``).
It accepts any mapping (a dict or an OmegaConf ``DictConfig``); it imports no config library.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from arl.algos import advantages, aggregation, filters, kl, policy_losses
from arl.algos.objective import ObjectiveConfig
from arl.algos.policy_losses import PolicyLossConfig

Check = Callable[[Any], "str | None"]  # returns an error description or None


def _is_mapping(x: Any) -> bool:
    return isinstance(x, Mapping) or (hasattr(x, "keys") and hasattr(x, "__getitem__"))


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _one_of(choices: tuple[str, ...]) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, str) and value in choices:
            return None
        return f"is not valid; valid: {', '.join(choices)}"

    return check


def _number(low: float | None = None, high: float | None = None, *, low_open: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if not _is_number(value):
            return "must be a finite number"
        if low is not None and (value <= low if low_open else value < low):
            return f"is out of range: must be {'>' if low_open else '>='} {low}"
        if high is not None and value > high:
            return f"is out of range: must be <= {high}"
        return None

    return check


def _integer(low: int) -> Check:
    def check(value: Any) -> str | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return "must be an integer"
        if value < low:
            return f"is out of range: must be >= {low}"
        return None

    return check


def _optional(check: Check) -> Check:
    def optional(value: Any) -> str | None:
        return None if value is None else check(value)

    return optional


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def _non_empty_str(value: Any) -> str | None:
    return None if isinstance(value, str) and value else "must be a non-empty string"


SCHEMA: dict[str, Any] = {
    "name": _non_empty_str,
    "loss": {
        "name": _one_of(policy_losses.REGISTRY.names()),
        "agg": _one_of(aggregation.AGG_MODES),
        "horizon": _optional(_integer(1)),
        "clip_ratio_low": _number(0.0),
        "clip_ratio_high": _number(0.0),
        "clip_ratio_c": _number(1.0, low_open=True),
        "tau_pos": _number(0.0, low_open=True),
        "tau_neg": _number(0.0, low_open=True),
    },
    "seq_mask": {"enabled": _boolean, "delta": _number(0.0)},
    "rollout_correction": {"enabled": _boolean, "cap": _number(1.0)},
    "advantage": {
        "name": _one_of(advantages.ESTIMATORS.names()),
        "gamma": _number(0.0, 1.0),
        "step_weight": _number(0.0),
        "norm": _one_of(advantages.NORM_MODES),
        "norm_by_std": _boolean,
        "cross_steps": _boolean,
        "invalid_penalty": _number(None, 0.0),
    },
    "filter": {
        "name": _one_of(filters.FILTERS.names()),
        "max_rollout_rounds": _integer(1),
        "cold_start": _integer(0),
        "fill_last_round": _boolean,
        "valid_ratio_threshold": _number(0.0, 1.0),
    },
    "kl": {
        "coef": _number(0.0),
        "estimator": _one_of(kl.ESTIMATORS.names()),
        "in_loss": _boolean,
    },
    "entropy_coeff": _number(),
}


def _check(node: Any, schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    if not _is_mapping(node):
        errors.append(f"{path} must be a mapping, got {node!r}")
        return
    for key in node:
        if key not in schema:
            errors.append(f"{path}.{key} is not a known key; valid keys: {', '.join(schema)}")
    for key, rule in schema.items():
        where = f"{path}.{key}"
        if key not in node:
            errors.append(f"{where} is missing")
            continue
        value = node[key]
        if isinstance(rule, Mapping):
            _check(value, rule, where, errors)
        else:
            problem = rule(value)
            if problem is not None:
                errors.append(f"{where}={value!r} {problem}")


def validate_algo_config(algo: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming every missing, unknown, misspelt or out-of-range key.

    Ranges: clip ratios >= 0, clip_ratio_c > 1, tau > 0, seq_mask.delta >= 0, cap >= 1,
    gamma in [0, 1], step_weight >= 0, invalid_penalty <= 0, max_rollout_rounds an integer >= 1,
    cold_start an integer >= 0, valid_ratio_threshold in [0, 1], kl.coef >= 0; flags must be booleans.
    """
    errors: list[str] = []
    _check(algo, SCHEMA, "algo", errors)
    if errors:
        raise ValueError("invalid algo config:\n  - " + "\n  - ".join(errors))


def objective_config_from_algo(algo: Mapping[str, Any]) -> ObjectiveConfig:
    """Validate ``algo`` and build the :class:`ObjectiveConfig` of :func:`actor_loss`."""
    validate_algo_config(algo)
    loss = algo["loss"]
    return ObjectiveConfig(
        loss_name=loss["name"],
        loss_agg=loss["agg"],
        loss=PolicyLossConfig(
            clip_ratio_low=float(loss["clip_ratio_low"]),
            clip_ratio_high=float(loss["clip_ratio_high"]),
            clip_ratio_c=float(loss["clip_ratio_c"]),
            tau_pos=float(loss["tau_pos"]),
            tau_neg=float(loss["tau_neg"]),
        ),
        seq_mask_delta=float(algo["seq_mask"]["delta"]) if algo["seq_mask"]["enabled"] else None,
        rollout_correction_cap=(
            float(algo["rollout_correction"]["cap"]) if algo["rollout_correction"]["enabled"] else None
        ),
        kl_coef=float(algo["kl"]["coef"]),
        kl_estimator=algo["kl"]["estimator"],
        kl_in_loss=bool(algo["kl"]["in_loss"]),
        entropy_coeff=float(algo["entropy_coeff"]),
        horizon=None if loss.get("horizon") is None else int(loss["horizon"]),
    )


def advantage_kwargs_from_algo(algo: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(name, kwargs)`` for ``advantages.get(name)(<tensors>, **kwargs)`` from ``algo.advantage``."""
    block = {k: algo["advantage"][k] for k in algo["advantage"]}
    name = block.pop("name")
    return name, advantages.estimator_kwargs(name, block)


def filter_kwargs_from_algo(algo: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(name, kwargs)`` for ``filters.get(name)(returns=, group_ids=, valid_ratio=, **kwargs)``.

    The trainer's keys (``max_rollout_rounds``, ``cold_start``, ``fill_last_round``: the
    re-rollout top-up) are not passed to the filter.
    """
    block = {k: algo["filter"][k] for k in algo["filter"] if k not in filters.TRAINER_KEYS}
    name = algo["filter"]["name"]
    return name, filters.filter_kwargs(name, block)
