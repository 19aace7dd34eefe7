"""An advantage estimator from outside ARL, chosen by ``algo.advantage.name=custom_advantage:rank_advantage``:
no fork, no registration (docs/algorithms.md, "Your own part").

Rank-based advantage: inside each group, an episode's advantage is its centred rank, the fractional rank of
its return among the group's n episodes mapped to [-1/2, 1/2] (rank / (n - 1) - 1/2, the centred ranks of
OpenAI's evolution strategies, Salimans et al. 2017), times ``spread``, the advantage of a group's best
episode minus its worst's. Episodes of equal return share the mean of their ranks, so a group whose returns
are all equal gets 0 and the advantages of a group's episodes add up to 0; a group of one episode gets 0.
Every turn of an episode gets the episode's value, plus ``algo.advantage.invalid_penalty`` on a turn whose
action did not parse (as ARL's estimators). Unlike GRPO's z-score, the advantage does not depend on the
size or the spread of the returns, only on their order: one lucky large return cannot dwarf the rest.

``spread`` is this estimator's own setting: it arrives through ``algo.advantage.kwargs`` and the start-up
validation checks it against the signature (a missing or unknown one stops the run before any model loads)::

    PYTHONPATH=examples python src/train.py algo=grpo algo.advantage.name=custom_advantage:rank_advantage \\
        +algo.advantage.kwargs.spread=1.0 debug=smoke

The function has the estimators' signature (:data:`arl.algos.advantages.CONTRACT`): the
:class:`~arl.algos.advantages.TurnTable` of N turn samples and ``cfg``, the ``algo.advantage`` block, by
position; it returns the advantages (N,) and its metrics, logged under ``adv/``: ``tied_frac``, the fraction
of the episodes whose return another episode of their group shares.

The module also holds a group filter from outside, ``algo.filter.name=custom_advantage:solved_groups``
(:func:`solved_groups`): the groups in which some episode reached ``min_return``, a setting that arrives
through ``algo.filter.kwargs``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from arl.algos.advantages import TurnTable
from arl.algos.filters import FilterResult
from arl.algos.schema import AdvantageConfig


def centred_ranks(returns: Tensor, group: Tensor) -> tuple[Tensor, Tensor]:
    """(centred rank (E,) in [-1/2, 1/2], tied (E,) bool) of E episodes' returns within their groups:
    rank = (episodes of the group below) + (others of equal return) / 2, centred = rank / (n - 1) - 1/2 for a
    group of n >= 2 episodes, 0 for a group of one. Compares every pair of episodes: O(E^2), fine for the
    few thousand episodes of a batch."""
    same = group.unsqueeze(0) == group.unsqueeze(1)  # (E, E)
    below = ((returns.unsqueeze(0) < returns.unsqueeze(1)) & same).sum(dim=1)
    tied = ((returns.unsqueeze(0) == returns.unsqueeze(1)) & same).sum(dim=1) - 1  # the others of equal return
    size = same.sum(dim=1)
    rank = below.to(returns.dtype) + tied.to(returns.dtype) / 2
    centred = torch.where(size > 1, rank / (size - 1).clamp_min(1).to(returns.dtype) - 0.5, torch.zeros_like(rank))
    return centred, tied > 0


def rank_advantage(table: TurnTable, cfg: AdvantageConfig, *, spread: float) -> tuple[Tensor, dict[str, Tensor]]:
    """The rank-based advantage of every turn sample (module docstring): ``spread`` x its episode's centred
    rank in the group, plus ``cfg.invalid_penalty`` on an invalid turn. An episode is the pair (group id,
    episode id); its return is the sum of its turns' rewards.

    Shapes: the table's (N,) tensors, in any order -> advantages (N,) (the rewards' float dtype, float32 for
    integers) and ``{"tied_frac": 0-dim}``.
    """
    if spread < 0:
        raise ValueError(f"algo.advantage.kwargs.spread={spread} must be >= 0")
    dtype = table.step_rewards.dtype if table.step_rewards.is_floating_point() else torch.float32
    if table.n == 0:
        return torch.zeros(0, dtype=dtype), {"tied_frac": torch.zeros((), dtype=torch.float64)}
    pairs = torch.stack([table.group_ids.long(), table.episode_ids.long()], dim=1)
    episodes, episode_of = torch.unique(pairs, dim=0, return_inverse=True)  # (E, 2), (N,)
    returns = torch.zeros(episodes.shape[0], dtype=torch.float64).index_add_(
        0, episode_of, table.step_rewards.to(torch.float64)
    )
    centred, tied = centred_ranks(returns, episodes[:, 0])
    penalty = (~table.valid.bool()).to(torch.float64) * cfg.invalid_penalty
    adv = spread * centred.index_select(0, episode_of) + penalty
    return adv.to(dtype), {"tied_frac": tied.to(torch.float64).mean()}


def solved_groups(*, returns: Tensor, group_ids: Tensor, valid_ratio: float | None, min_return: float) -> FilterResult:
    """Keep the groups in which at least one episode's return reached ``min_return`` (a task the policy
    solved at least once): a group that no episode solved gives the rank advantage only the order of its
    failures. ``valid_ratio`` is unused. With ``algo.filter.max_rollout_rounds`` the DataModule rolls out
    more groups to fill the batch, as for ARL's dapo.

    The filters' signature (:data:`arl.algos.filters.CONTRACT`): per-episode ``returns`` and ``group_ids``
    (E,) and ``valid_ratio`` by keyword, and ``min_return`` from ``algo.filter.kwargs``::

        PYTHONPATH=examples python src/train.py algo=grpo algo.filter.name=custom_advantage:solved_groups \\
            +algo.filter.kwargs.min_return=5.0 debug=smoke
    """
    del valid_ratio
    uniq, index = torch.unique(group_ids, return_inverse=True)
    best = torch.full((uniq.shape[0],), float("-inf"), dtype=torch.float64).scatter_reduce(
        0, index, returns.to(torch.float64), "amax"
    )
    keep_group = best >= min_return
    return FilterResult(
        keep=keep_group.index_select(0, index),
        kept_group_ids=uniq[keep_group].to(torch.long),
        kept_groups=int(keep_group.sum()),
        total_groups=int(uniq.shape[0]),
    )
