"""Advantage estimators: one scalar per turn sample (docs/design.md section 6).

Inputs are 1-D tensors over N turn samples, in any order:

- ``step_rewards`` (N,) float: the raw environment reward of that turn;
- ``episode_ids`` (N,) int: the episode a turn belongs to;
- ``turn_idx`` (N,) int: position of the turn in its episode (only the order matters);
- ``group_ids`` (N,) int: the group (same task, same initial state) of the episode;
- ``anchor_keys`` (N,) int64: stable hash of the raw environment state the turn acted on;
- ``valid`` (N,) bool: whether the turn's action parsed.

An episode is identified by the pair (group id, episode id), so episode ids need only be unique
within a group. The episode return is the undiscounted sum of its raw rewards. The format penalty
enters once: an invalid turn gets ``invalid_penalty`` added to its own score and its own step
return (not discounted back to earlier turns).

A *penalty-only* group has two episodes or more whose returns are all equal (all failed, or all won
alike): its turn scores differ only by the penalty. GiGPO's step groups (the turns of one group that
acted on one anchor state) have the same case: a *penalty-only step group* holds two turns or more
whose discounted step returns before the penalty are all equal (in ALFWorld typically every turn of a
loop at one place in episodes that failed), even inside a group that holds a win. ``penalty_only_groups``
says how GRPO and GiGPO treat both kinds, at every level that divides by a std: ``normalise`` as any
other group (the official code: divided by the group's std, a -0.1 penalty becomes a unit-size
advantage), ``center`` subtracts the group mean without dividing by a std (the penalty keeps its own
size), ``zero`` gives such turns no advantage (in a penalty-only group both GiGPO parts; in a
penalty-only step group of a group with differing returns, the step part).

One registered function per estimator, all with one signature (verl's: the tensors, then the config)::

    get(name)(turns: TurnTable, cfg: AdvantageConfig) -> (advantages, metrics)

as the policy losses return ``(loss_mat, metrics)``: ``advantages`` (N,), one per turn sample, and
``metrics`` the estimator's own diagnostics, 0-dim tensors by short name (the module logs them under
``adv/``; GiGPO's ``step_std``, none for GRPO and RLOO). :class:`TurnTable` holds the six tensors
above and checks their shapes once. A ``package.module:function`` from outside takes the same
(:data:`CONTRACT`) and ``algo.advantage.kwargs`` as extra keywords; :func:`estimator` binds them.

The settings are keys of the ``algo.advantage`` block (:class:`arl.algos.schema.AdvantageConfig`,
where their defaults live; the functions have none); each estimator reads the keys it uses (its
docstring names them). :func:`step_returns` and :func:`gigpo_parts` are GiGPO's pieces, for diagnostics.

All grouping is vectorised (``torch.unique(return_inverse=True)``, ``bincount``, ``index_add_``;
gathers use ``index_select``, which stays fast on CPU when other processes compete for the cores,
unlike advanced indexing); statistics are computed in float64 and returned in the dtype of the
rewards (float32 for integer input). GiGPO on 20,000 turn samples takes about 10 ms on two CPU cores
(``bench/algos.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from arl.algos.registry import Contract, Registry

if TYPE_CHECKING:  # the schema imports this module for the registry's names
    from arl.algos.schema import AdvantageConfig

NORM_MODES: tuple[str, ...] = ("mean_norm", "mean_std_norm")
#: how a group whose episodes' returns are all equal (its scores differ only by invalid-action penalties) is
#: normalised: as any other group (the official code), centred without dividing by its std, or not at all
PENALTY_ONLY_MODES: tuple[str, ...] = ("normalise", "center", "zero")

#: the tensor inputs of a turn-level estimator, the fields of :class:`TurnTable`
DATA_KEYS: tuple[str, ...] = (
    "step_rewards",
    "episode_ids",
    "turn_idx",
    "group_ids",
    "anchor_keys",
    "valid",
)


@dataclass(frozen=True)
class TurnTable:
    """The N turn samples an estimator reads: six (N,) tensors in any order (module docstring).

    Construction checks that each is 1-D and that all have one length, ``n``.
    """

    step_rewards: Tensor
    episode_ids: Tensor
    turn_idx: Tensor
    group_ids: Tensor
    anchor_keys: Tensor
    valid: Tensor

    def __post_init__(self) -> None:
        _check_1d(**{key: getattr(self, key) for key in DATA_KEYS})

    @property
    def n(self) -> int:
        return int(self.step_rewards.shape[0])


TurnEstimator = Callable[[TurnTable, "AdvantageConfig"], tuple[Tensor, dict[str, Tensor]]]
#: how the RL module calls an estimator (:func:`estimator`; a ``package.module:function`` is checked against it
#: at start-up); ``algo.advantage.kwargs`` are passed as extra keywords
CONTRACT = Contract(
    positional=("table", "cfg"),
    returns="(advantages (N,), metrics: a dict of scalar tensors, logged under adv/)",
)
ESTIMATORS: Registry[TurnEstimator] = Registry("advantage estimator", CONTRACT)
get = ESTIMATORS.get


def estimator(cfg: AdvantageConfig) -> TurnEstimator:
    """The configured estimator, called as ``(table, cfg)``: function ``cfg.name`` (registered, or a
    ``package.module:function``) with ``cfg.kwargs`` bound, its result checked (advantages of shape
    (N,), a mapping of metrics; else a ``ValueError`` naming the estimator)."""
    fn, kwargs, name = get(cfg.name), dict(cfg.kwargs), cfg.name

    def call(table: TurnTable, cfg: AdvantageConfig) -> tuple[Tensor, dict[str, Tensor]]:
        result = fn(table, cfg, **kwargs)
        ok = isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], Mapping)
        if not ok or not isinstance(result[0], Tensor) or tuple(result[0].shape) != (table.n,):
            got = (f"advantages of shape {tuple(result[0].shape)}" if ok and isinstance(result[0], Tensor)
                   else f"a {type(result).__name__}")
            raise ValueError(f"advantage estimator {name!r} returned {got}; it must return {CONTRACT.returns} "
                             f"for the N = {table.n} turn samples")
        return result[0], dict(result[1])

    return call


# --------------------------------------------------------------------------------------------
# vectorised group helpers
# --------------------------------------------------------------------------------------------
def _gather(values: Tensor, index: Tensor) -> Tensor:
    """values[index] along dim 0 (``index_select``: no advanced-indexing overhead)."""
    return values.index_select(0, index)


def _dense_index(ids: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary ids (N,) to dense indices 0..n-1 (in sorted id order). Returns (index, n)."""
    uniq, index = torch.unique(ids, return_inverse=True)
    return index, int(uniq.shape[0])


def _dense_pair_index(first_index: Tensor, second: Tensor) -> tuple[Tensor, int]:
    """Dense index of the pairs (first_index[i], second[i]). Returns (index, n).

    ``first_index`` is already dense (0..n_a-1); ``second`` holds arbitrary int64 ids (episode
    ids, anchor hashes) and is densified first, so the combined key a * n_b + b fits in int64
    (much faster than ``torch.unique(dim=0)`` on stacked pairs).
    """
    b, n_b = _dense_index(second)
    return _dense_index(first_index * n_b + b)


def _anchor_clusters(group_index: Tensor, anchor_keys: Tensor) -> tuple[Tensor, int]:
    """GiGPO's step groups: turns of one group (dense ``group_index``) with equal anchor keys, never
    across groups. (N,), (N,) -> (cluster index (N,), number of clusters)."""
    return _dense_pair_index(group_index, anchor_keys)


def _segment_sum(values: Tensor, index: Tensor, num_segments: int) -> Tensor:
    """out[s] = sum of values[i] with index[i] == s. (N,) -> (num_segments,)."""
    return values.new_zeros(num_segments).index_add_(0, index, values)


def _group_mean(values: Tensor, index: Tensor, num_groups: int) -> tuple[Tensor, Tensor]:
    """Per-group count and mean. (N,) -> 2 x (num_groups,)."""
    count = torch.bincount(index, minlength=num_groups).to(values.dtype)
    return count, _segment_sum(values, index, num_groups) / count.clamp_min(1.0)


def _all_equal_segments(values: Tensor, index: Tensor, num_segments: int) -> Tensor:
    """(num_segments,) bool: segments of two values or more that are all equal. (N,), (N,) -> (num_segments,).
    Penalty-only groups (episode returns) and penalty-only step groups (step returns before the penalty)."""
    high = values.new_full((num_segments,), -torch.inf).scatter_reduce(0, index, values, "amax")
    low = values.new_full((num_segments,), torch.inf).scatter_reduce(0, index, values, "amin")
    count = torch.bincount(index, minlength=num_segments)
    return (count >= 2) & (high == low)


def _group_std(values: Tensor, index: Tensor, count: Tensor, mean: Tensor) -> Tensor:
    """Per-group unbiased std (0 for groups of one), given count and mean. -> (num_groups,)."""
    sq_dev = _segment_sum((values - _gather(mean, index)).square(), index, count.numel())
    return torch.sqrt(sq_dev / (count - 1.0).clamp_min(1.0))


def _group_normalise(
    targets: Tensor,
    target_group: Tensor,
    stats: tuple[Tensor, Tensor, int],
    norm_by_std: bool,
    eps: float,
    undivided: Tensor | None = None,
) -> Tensor:
    """GRPO normalisation: (target - mean_g) / (std_g + eps) with the statistics over ``stats``, the
    values (M,), their group (M,) and the number of groups; targets where ``undivided`` (a (N,) bool over
    the targets, or None) are only centred.

    A group with a single statistic value gets mean 0 and std 1 (the target passes unchanged, up
    to the 1 / (1 + eps) factor). A group whose statistic values are all equal (std 0) is divided by
    1 + eps, not by eps: where the targets are the statistic values (``cross_steps``) they equal the
    mean and the advantage is 0 either way; where they are not (per-episode returns as statistics,
    scores with a penalty as targets) a -0.1 penalty would otherwise become -0.1 / 1e-6.
    """
    stat_values, stat_group, num_groups = stats
    count, mean = _group_mean(stat_values, stat_group, num_groups)
    single = count <= 1
    adv = targets - _gather(torch.where(single, torch.zeros_like(mean), mean), target_group)
    if norm_by_std:
        std = _group_std(stat_values, stat_group, count, mean)
        std = torch.where(single | (std == 0), torch.ones_like(std), std)
        adv = _divide(adv, _gather(std, target_group) + eps, undivided)
    return adv


def _divide(values: Tensor, denominators: Tensor, undivided: Tensor | None) -> Tensor:
    """values / denominators, except where ``undivided`` (a (N,) bool, or None) keeps the value as it is."""
    if undivided is not None:
        denominators = torch.where(undivided, torch.ones_like(denominators), denominators)
    return values / denominators


def _float64(x: Tensor) -> Tensor:
    return x.to(torch.float64)


def _out_dtype(x: Tensor) -> torch.dtype:
    return x.dtype if x.is_floating_point() else torch.float32


def _check_1d(**tensors: Tensor) -> int:
    sizes = {name: tuple(t.shape) for name, t in tensors.items()}
    n = None
    for name, t in tensors.items():
        if t.dim() != 1:
            raise ValueError(f"{name} must be 1-D (one entry per turn sample), got shape {tuple(t.shape)}")
        n = t.shape[0] if n is None else n
        if t.shape[0] != n:
            raise ValueError(f"inputs must have the same length, got {sizes}")
    return int(n or 0)


def _check_norm(norm: str) -> None:
    if norm not in NORM_MODES:
        raise ValueError(f"unknown gigpo norm {norm!r}; valid: {', '.join(NORM_MODES)}")


# --------------------------------------------------------------------------------------------
# GiGPO's pieces
# --------------------------------------------------------------------------------------------
def _discounted_returns(
    rewards: Tensor, episode_index: Tensor, num_episodes: int, turn_idx: Tensor, gamma: float
) -> Tensor:
    """R_t = r_t + gamma R_{t+1} per episode. All inputs (N,), any order -> (N,).

    The turn samples are sorted by (episode, turn) with one sort; each gets its rank inside its
    episode, and the rewards are laid out densely as (max turns, episodes). The Python loop runs
    over the turn rows (at most the longest episode), each step one vector operation over all
    episodes; padding after an episode's last turn is 0 and does not change its returns.
    """
    n = rewards.numel()
    turn = turn_idx.to(torch.int64) - turn_idx.min()
    key = episode_index * (int(turn.max()) + 1) + turn  # unique per (episode, turn)
    order = torch.sort(key).indices
    key_sorted = _gather(key, order)
    if bool((key_sorted[1:] == key_sorted[:-1]).any()):
        raise ValueError("duplicate (episode, turn_idx) pair among the turn samples")
    episode_sorted = _gather(episode_index, order)
    counts = torch.bincount(episode_index, minlength=num_episodes)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(n, device=order.device) - _gather(starts, episode_sorted)
    max_turns = int(counts.max())

    flat = rank * num_episodes + episode_sorted  # position in the (max_turns, episodes) layout
    dense = rewards.new_zeros(max_turns * num_episodes).index_copy_(0, flat, _gather(rewards, order))
    dense = dense.view(max_turns, num_episodes)
    running = rewards.new_zeros(num_episodes)
    for k in range(max_turns - 1, -1, -1):
        running = dense[k] + gamma * running
        dense[k] = running
    return torch.empty_like(rewards).index_copy_(0, order, _gather(dense.view(-1), flat))


def step_returns(step_rewards: Tensor, episode_ids: Tensor, turn_idx: Tensor, gamma: float) -> Tensor:
    """Discounted return of every turn: R_t = r_t + gamma R_{t+1} within its episode.

    Episodes are identified by ``episode_ids`` alone (unique across the batch); turns are ordered
    by ``turn_idx`` (gaps allowed, duplicates raise ``ValueError``).

    Shapes: step_rewards, episode_ids, turn_idx (N,) -> (N,).
    """
    n = _check_1d(step_rewards=step_rewards, episode_ids=episode_ids, turn_idx=turn_idx)
    if n == 0:
        return step_rewards.new_zeros(0, dtype=_out_dtype(step_rewards))
    episode_index, num_episodes = _dense_index(episode_ids)
    returns = _discounted_returns(_float64(step_rewards), episode_index, num_episodes, turn_idx, gamma)
    return returns.to(_out_dtype(step_rewards))


def _penalty(valid: Tensor, invalid_penalty: float) -> Tensor:
    """invalid_penalty on invalid turns, 0 elsewhere. (N,) bool -> (N,) float64."""
    return (~valid.bool()).to(torch.float64) * invalid_penalty


class _Turns:
    """Dense group / episode indices and scores of N turn samples (shared by the estimators).

    Attributes:
        group_index (N,), num_groups; episode_index (N,), num_episodes (an episode is a
        (group id, episode id) pair); episode_group (E,) the group of each episode;
        rewards (N,) float64; penalty (N,) float64; returns (E,) undiscounted episode returns;
        scores (N,) turn scores = episode return + own penalty.
    """

    def __init__(self, table: TurnTable, invalid_penalty: float):
        self.group_index, self.num_groups = _dense_index(table.group_ids)
        self.episode_index, self.num_episodes = _dense_pair_index(self.group_index, table.episode_ids)
        self.episode_group = self.group_index.new_zeros(self.num_episodes).scatter_(
            0, self.episode_index, self.group_index
        )
        self.rewards = _float64(table.step_rewards)
        self.penalty = _penalty(table.valid, invalid_penalty)
        self.returns = _segment_sum(self.rewards, self.episode_index, self.num_episodes)
        self.scores = _gather(self.returns, self.episode_index) + self.penalty

    def penalty_only(self) -> Tensor:
        """(num_groups,) bool: groups of two episodes or more whose episode returns are all equal."""
        return _all_equal_segments(self.returns, self.episode_group, self.num_groups)


def _check_penalty_only(mode: str) -> None:
    if mode not in PENALTY_ONLY_MODES:
        raise ValueError(f"unknown penalty_only_groups {mode!r}; valid: {', '.join(PENALTY_ONLY_MODES)}")


def _penalty_only_turns(turns: _Turns, mode: str) -> Tensor | None:
    """(N,) bool: the turns of penalty-only groups, or None under ``normalise`` (no group is treated apart)."""
    return None if mode == "normalise" else _gather(turns.penalty_only(), turns.group_index)


def _zero_where(adv: Tensor, mask: Tensor | None) -> Tensor:
    """``adv`` with 0 where ``mask`` (a (N,) bool, or None: unchanged)."""
    return adv if mask is None else torch.where(mask, torch.zeros_like(adv), adv)


def gigpo_parts(table: TurnTable, cfg: AdvantageConfig) -> tuple[Tensor, Tensor]:
    """GiGPO's two parts, (A_E, A_S) in float64, as :func:`gigpo` defines them; ``gigpo`` returns
    A_E + step_weight * A_S. The step part alone is what ``adv/step_std`` logs. Settings: ``gamma``,
    ``norm``, ``invalid_penalty``, ``penalty_only_groups``, ``eps``.

    Shapes: all inputs (N,) in any order -> ((N,), (N,)).
    """
    gamma, norm, penalty_only_groups, eps = cfg.gamma, cfg.norm, cfg.penalty_only_groups, cfg.eps
    _check_norm(norm)
    _check_penalty_only(penalty_only_groups)
    if table.n == 0:
        empty = table.step_rewards.new_zeros(0, dtype=torch.float64)
        return empty, empty
    by_std = norm == "mean_std_norm"
    turns = _Turns(table, cfg.invalid_penalty)
    group_index, num_groups = turns.group_index, turns.num_groups

    # episode part: GRPO over the turn scores of the group (cross-step statistics)
    only = _penalty_only_turns(turns, penalty_only_groups)
    undivided = only if penalty_only_groups == "center" else None
    episode_adv = _group_normalise(
        turns.scores, group_index, (turns.scores, group_index, num_groups), by_std, eps, undivided
    )

    # step part: discounted return (+ own penalty) relative to its anchor-state cluster
    raw_returns = _discounted_returns(turns.rewards, turns.episode_index, turns.num_episodes, table.turn_idx, gamma)
    returns = raw_returns + turns.penalty
    cluster_index, num_clusters = _anchor_clusters(group_index, table.anchor_keys)
    count, mean = _group_mean(returns, cluster_index, num_clusters)
    step_adv = returns - _gather(mean, cluster_index)  # exactly 0 for a cluster of one
    # the step part's penalty-only turns: those of penalty-only groups and of penalty-only step groups
    step_only = None
    if only is not None:
        step_only = only | _gather(_all_equal_segments(raw_returns, cluster_index, num_clusters), cluster_index)
    if by_std:
        std = _group_std(returns, cluster_index, count, mean)
        step_undivided = step_only if penalty_only_groups == "center" else None
        step_adv = _divide(step_adv, _gather(std, cluster_index) + eps, step_undivided)  # a cluster of one: 0 / eps
    if penalty_only_groups == "zero":
        return _zero_where(episode_adv, only), _zero_where(step_adv, step_only)
    return episode_adv, step_adv


def shared_anchor_fraction(group_ids: Tensor, anchor_keys: Tensor) -> float:
    """Fraction of turns whose anchor state another turn of the same group also acted on: the turns
    GiGPO's step part compares (a cluster of one gets A_S = 0). Shapes: (N,), (N,) -> float; 0.0
    for no turn.

    Example: groups (0, 0, 0, 1, 1) with anchors (5, 5, 7, 5, 9): only the two turns of group 0
    at anchor 5 share theirs (anchor 5 in group 1 is another cluster), so 2 / 5 = 0.4.
    """
    if _check_1d(group_ids=group_ids, anchor_keys=anchor_keys) == 0:
        return 0.0
    group_index, _ = _dense_index(group_ids)
    cluster_index, num_clusters = _anchor_clusters(group_index, anchor_keys)
    size = torch.bincount(cluster_index, minlength=num_clusters)
    return float((size[cluster_index] > 1).to(torch.float64).mean())


# --------------------------------------------------------------------------------------------
# turn-level estimators (uniform signature)
# --------------------------------------------------------------------------------------------
@ESTIMATORS.register("grpo")
def grpo(table: TurnTable, cfg: AdvantageConfig) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO group-normalised advantage (Shao et al., DeepSeekMath 2024) on turn samples.

    Score of a turn = its episode's return (+ ``invalid_penalty`` if its action did not parse);
    A = (score - mean_g) / (std_g + eps) with the unbiased std of the group's statistics
    (``norm_by_std=False``: A = score - mean_g; a group with one value has mean 0 and std 1).
    ``cross_steps=True``: mean/std over all turn samples of the group (long episodes weigh more,
    as the official GiGPO/verl-agent code); ``False``: over one return per episode (raw, no
    penalty), then applied to each turn's score. With one turn per episode this is the
    single-turn GRPO of the scores. Penalty-only groups as ``penalty_only_groups`` says (module
    docstring). ``turn_idx`` and ``anchor_keys`` are unused. Settings: ``norm_by_std``, ``cross_steps``,
    ``invalid_penalty``, ``penalty_only_groups``, ``eps``.

    Shapes: all inputs (N,) -> advantages (N,); no metrics.
    """
    penalty_only_groups = cfg.penalty_only_groups
    _check_penalty_only(penalty_only_groups)
    if table.n == 0:
        return table.step_rewards.new_zeros(0, dtype=_out_dtype(table.step_rewards)), {}
    turns = _Turns(table, cfg.invalid_penalty)
    if cfg.cross_steps:
        stat_values, stat_group = turns.scores, turns.group_index
    else:
        stat_values, stat_group = turns.returns, turns.episode_group
    only = _penalty_only_turns(turns, penalty_only_groups)
    undivided = only if penalty_only_groups == "center" else None
    adv = _group_normalise(turns.scores, turns.group_index, (stat_values, stat_group, turns.num_groups),
                           cfg.norm_by_std, cfg.eps, undivided)
    if penalty_only_groups == "zero":
        adv = _zero_where(adv, only)
    return adv.to(_out_dtype(table.step_rewards)), {}


@ESTIMATORS.register("rloo")
def rloo(table: TurnTable, cfg: AdvantageConfig) -> tuple[Tensor, dict[str, Tensor]]:
    """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024) on turn samples:
    A = score - baseline from the *other episodes* of the group.

    Scores as :func:`grpo`. ``cross_steps=True``: baseline = mean of the turn scores of the
    group's other episodes (every turn sample counts); ``False``: mean of the other episodes'
    returns (one per episode). A turn of a group with a single episode gets 0. Leaving out the
    whole own episode (not only the own turn) keeps the baseline independent of the sample. Settings:
    ``cross_steps``, ``invalid_penalty``.

    Shapes: all inputs (N,) -> advantages (N,); no metrics.
    """
    if table.n == 0:
        return table.step_rewards.new_zeros(0, dtype=_out_dtype(table.step_rewards)), {}
    turns = _Turns(table, cfg.invalid_penalty)
    # the values the baseline averages, and the episode each belongs to
    if cfg.cross_steps:
        values, value_episode = turns.scores, turns.episode_index
    else:
        values = turns.returns
        value_episode = torch.arange(turns.num_episodes, device=values.device)
    value_group = _gather(turns.episode_group, value_episode)
    group_sum = _segment_sum(values, value_group, turns.num_groups)
    group_cnt = torch.bincount(value_group, minlength=turns.num_groups).to(values.dtype)
    own_sum = _segment_sum(values, value_episode, turns.num_episodes)
    own_cnt = torch.bincount(value_episode, minlength=turns.num_episodes).to(values.dtype)
    other_sum = _gather(group_sum, turns.group_index) - _gather(own_sum, turns.episode_index)
    other_cnt = _gather(group_cnt, turns.group_index) - _gather(own_cnt, turns.episode_index)
    scores = turns.scores
    adv = torch.where(other_cnt > 0, scores - other_sum / other_cnt.clamp_min(1.0), torch.zeros_like(scores))
    return adv.to(_out_dtype(table.step_rewards)), {}


@ESTIMATORS.register("gigpo")
def gigpo(table: TurnTable, cfg: AdvantageConfig) -> tuple[Tensor, dict[str, Tensor]]:
    """GiGPO advantage, SAMPO's advantage (Feng et al. 2025, "Group-in-Group Policy Optimization").

    - episode part A_E: the GRPO advantage of the turn scores (episode return + penalty on an
      invalid turn) with statistics over every turn sample of the group; ``mean_norm`` subtracts
      the mean, ``mean_std_norm`` also divides by std + eps;
    - step part A_S: step returns R_t = r_t + gamma R_{t+1} from the raw rewards, plus the penalty
      on invalid turns; turns of one group whose anchor keys are equal form a cluster (never across
      groups); A_S = R_t - mean(R over the cluster) (``mean_std_norm``: / (std + eps)); a cluster of
      one gets A_S = 0;
    - A = A_E + step_weight * A_S; penalty-only groups and step groups as ``penalty_only_groups``
      says (module docstring: ``center`` keeps both parts of a penalty-only group, and the step part of a
      penalty-only step group, undivided; ``zero`` sets them to 0).

    The parts separately: :func:`gigpo_parts`. Shapes: all inputs (N,) in any order -> advantages (N,).
    Metrics: ``step_std``, the std over the turns of the step part as it enters A (step_weight x A_S; 0
    for fewer than two turns): how much the step part moved the advantage. Settings: ``gamma``,
    ``step_weight``, ``norm``, ``invalid_penalty``, ``penalty_only_groups``, ``eps``.
    """
    episode_adv, step_adv = gigpo_parts(table, cfg)
    weighted_step = cfg.step_weight * step_adv
    step_std = weighted_step.std() if weighted_step.numel() > 1 else weighted_step.new_zeros(())
    return (episode_adv + weighted_step).to(_out_dtype(table.step_rewards)), {"step_std": step_std.detach()}
