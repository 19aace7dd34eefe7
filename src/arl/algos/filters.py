"""Group filters: which groups of a rollout round reach the update (docs/design.md sections 2 and 7).

Inputs are per episode: ``returns`` (E,) raw episode returns (undiscounted sum of environment
rewards, no format penalty) and ``group_ids`` (E,). A filter keeps or drops whole groups::

    get(name)(returns=, group_ids=, valid_ratio=None, **settings) -> FilterResult

with the settings from the ``algo.filter`` block (:class:`arl.algos.schema.FilterConfig`, where
their defaults live); :func:`group_filter` binds them, and the DataModule calls the result. A
``package.module:function`` from outside takes the same (:data:`CONTRACT`): the data, the
``algo.filter`` keys it names as parameters, and ``algo.filter.kwargs`` as extra keywords.

A group is *constant* when max(returns) - min(returns) <= atol over its episodes (atol = 0:
exact equality). A group of one episode is constant.

- ``none``: keep every group.
- ``dapo`` (DAPO dynamic sampling, Yu et al., ByteDance 2025): drop the constant groups; their
  GRPO advantage is zero, so they only dilute the batch.
- ``stage_aware``: like ``dapo``, except that while the round's valid-format ratio
  ``valid_ratio`` is below ``valid_ratio_threshold`` it also keeps *all-failure*
  groups, defined as constant groups whose common return is <= 0 (no episode earned a positive
  return). Their turns still differ by the format penalty, which is the signal early training
  needs. With ``valid_ratio=None`` it behaves exactly like ``dapo``.

Re-rollout top-up is the rollout DataModule's job (as the official agent trainers'
``filter_groups``): it calls the filter on each round's episodes, before any advantage is computed
(the returns are raw, so no filter needs one), and fills the batch with kept groups for at most
``max_rollout_rounds`` rounds; the last round fills what is still missing with its other groups
(``fill_last_round``, as the official code), and the filter starts after ``cold_start``
iterations (ALFWorld and WebShop 15).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from arl.algos.registry import Contract, Registry, keyword_parameters

if TYPE_CHECKING:  # the schema imports this module for the registry's names
    from arl.algos.schema import FilterConfig

#: the inputs of a filter (the rest of its keywords are settings)
DATA_KEYS: tuple[str, ...] = ("returns", "group_ids", "valid_ratio")


@dataclass
class FilterResult:
    """Outcome of a filter.

    Attributes:
        keep: (E,) bool, True for the episodes of kept groups.
        kept_group_ids: 1-D long tensor of the kept group ids (sorted, original id values).
        kept_groups: number of kept groups.
        total_groups: number of groups seen.
    """

    keep: Tensor
    kept_group_ids: Tensor
    kept_groups: int
    total_groups: int


def setting_keys() -> tuple[str, ...]:
    """The ``algo.filter`` keys a filter may take as parameters (every key but ``name`` and ``kwargs``)."""
    from arl.algos.schema import FilterConfig, key_names  # here: the schema imports this module

    return tuple(key for key in key_names(FilterConfig) if key not in ("name", "kwargs"))


GroupFilter = Callable[..., FilterResult]
#: how the DataModule calls a filter (:func:`group_filter`; a ``package.module:function`` is checked against it
#: at start-up): the data by keyword, the ``algo.filter`` keys it names, ``algo.filter.kwargs`` as extra keywords
CONTRACT = Contract(
    keywords=DATA_KEYS,
    returns="a FilterResult (keep (E,) bool, kept_group_ids, kept_groups, total_groups)",
    settings=setting_keys,
)
FILTERS: Registry[GroupFilter] = Registry("filter", CONTRACT)
REGISTRY = FILTERS
get = FILTERS.get


def _groups(returns: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(unique group ids (G,), episode -> group index (E,), group max (G,), group min (G,))."""
    if returns.dim() != 1 or returns.shape != group_ids.shape:
        raise ValueError(
            f"returns and group_ids must be 1-D of equal length (one per episode), got "
            f"{tuple(returns.shape)} and {tuple(group_ids.shape)}"
        )
    uniq, index = torch.unique(group_ids, return_inverse=True)
    values = returns.to(torch.float64)
    g = uniq.shape[0]
    gmax = values.new_full((g,), float("-inf")).scatter_reduce(0, index, values, "amax")
    gmin = values.new_full((g,), float("inf")).scatter_reduce(0, index, values, "amin")
    return uniq, index, gmax, gmin


def _result(uniq: Tensor, index: Tensor, keep_group: Tensor) -> FilterResult:
    return FilterResult(
        keep=keep_group.index_select(0, index),
        kept_group_ids=uniq[keep_group].to(torch.long),
        kept_groups=int(keep_group.sum()),
        total_groups=int(uniq.shape[0]),
    )


@FILTERS.register("none")
def no_filter(*, returns: Tensor, group_ids: Tensor, valid_ratio: float | None = None) -> FilterResult:
    """Keep every group. Shapes: returns, group_ids (E,)."""
    del valid_ratio
    uniq, index, _, _ = _groups(returns, group_ids)
    return _result(uniq, index, torch.ones_like(uniq, dtype=torch.bool))


@FILTERS.register("dapo")
def dapo(*, returns: Tensor, group_ids: Tensor, valid_ratio: float | None = None, atol: float) -> FilterResult:
    """Keep exactly the groups whose returns are not all equal (max - min > atol).

    Shapes: returns, group_ids (E,). ``valid_ratio`` is unused.
    """
    del valid_ratio
    uniq, index, gmax, gmin = _groups(returns, group_ids)
    return _result(uniq, index, (gmax - gmin) > atol)


@FILTERS.register("stage_aware")
def stage_aware(
    *,
    returns: Tensor,
    group_ids: Tensor,
    valid_ratio: float | None = None,
    valid_ratio_threshold: float,
    atol: float,
) -> FilterResult:
    """``dapo``, but keeps all-failure groups (constant, return <= 0) while
    ``valid_ratio < valid_ratio_threshold``. Shapes: returns, group_ids (E,).
    """
    uniq, index, gmax, gmin = _groups(returns, group_ids)
    keep_group = (gmax - gmin) > atol
    if valid_ratio is not None and valid_ratio < valid_ratio_threshold:
        keep_group = keep_group | (gmax <= 0)
    return _result(uniq, index, keep_group)


def filter_kwargs(cfg: FilterConfig) -> dict[str, Any]:
    """The settings of filter ``cfg.name`` from the ``algo.filter`` block: the keys it takes (the
    re-rollout schedule's keys are the DataModule's), then the entries of ``cfg.kwargs``."""
    keys = setting_keys()
    named = {key: getattr(cfg, key) for key in keyword_parameters(get(cfg.name)) if key in keys}
    return {**named, **cfg.kwargs}


def group_filter(cfg: FilterConfig) -> GroupFilter | None:
    """The configured filter with its settings bound, called as ``(returns=, group_ids=,
    valid_ratio=)``, its result checked (a :class:`FilterResult` with one ``keep`` per episode; else a
    ``ValueError`` naming the filter); None for ``none`` (every group is kept, no re-rollout)."""
    if cfg.name == "none":
        return None
    bound, name = functools.partial(get(cfg.name), **filter_kwargs(cfg)), cfg.name

    def call(*, returns: Tensor, group_ids: Tensor, valid_ratio: float | None = None) -> FilterResult:
        result = bound(returns=returns, group_ids=group_ids, valid_ratio=valid_ratio)
        if not isinstance(result, FilterResult) or tuple(result.keep.shape) != tuple(returns.shape):
            got = f"keep of shape {tuple(result.keep.shape)}" if isinstance(result, FilterResult) else f"a {type(result).__name__}"
            raise ValueError(f"filter {name!r} returned {got}; it must return {CONTRACT.returns} for the "
                             f"E = {returns.shape[0]} episodes")
        return result

    return call
