"""Episode statistics shared by training rollouts, validation and ``src/eval.py``."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from arl.agent.records import Episode
from arl.utils.metrics import Metrics


def episode_metrics(episodes: Sequence[Episode], prefix: str = "rollout/", graded: bool = False,
                    failed_lose: bool = False) -> Metrics:
    """Success, return, length, validity and response-length statistics of ``episodes``, each
    with how it combines over ranks: ``env_errors`` adds up (episodes with an environment error
    count there only); episode means are weighted by the episodes without an error, turn means
    (``valid_action_ratio``, ``response_len_mean``, ``truncated_ratio``) by their turns,
    ``success_rate/<type>`` by that type's episodes; ``response_len_max`` is a max; the group
    shares (``same_outcome_groups``, ``failed_groups``) by the groups of two episodes or more.
    ``graded`` (the env's :attr:`~arl.envs.base.EnvSpec.graded`) adds ``score``, the mean final score
    x 100 (WebShop's paper metric), weighted by the episodes. ``failed_lose`` (validation and evaluation):
    success, score and success per type count a failed episode as a loss scoring 0, over every episode,
    so that an env that breaks cannot raise them; training's rates stay over the episodes it trains on.
    """
    good = [e for e in episodes if not e.env_error]
    turns = [t for e in good for t in e.turns]
    out = Metrics()
    out.sum(f"{prefix}env_errors", len(episodes) - len(good))
    judged = list(episodes) if failed_lose else good  # the episodes success and score are over
    if judged:
        out.mean(f"{prefix}success_rate", sum(e.won and not e.env_error for e in judged) / len(judged), len(judged))
        if graded:
            out.mean(f"{prefix}score", 100.0 * sum(0.0 if e.env_error else e.score for e in judged) / len(judged),
                     len(judged))
    if not good:
        return out
    out.mean(f"{prefix}return_mean", sum(e.ret for e in good) / len(good), len(good))
    out.mean(f"{prefix}episode_len", sum(e.num_turns for e in good) / len(good), len(good))
    if turns:
        lens = [len(t.response_ids) for t in turns]
        out.mean(f"{prefix}valid_action_ratio", sum(t.valid for t in turns) / len(turns), len(turns))
        out.mean(f"{prefix}response_len_mean", sum(lens) / len(lens), len(turns))
        out.max(f"{prefix}response_len_max", max(lens))
        out.mean(f"{prefix}truncated_ratio", sum(t.truncated for t in turns) / len(turns), len(turns))
    _group_outcomes(good, prefix, out)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in judged:
        counts[e.task_type][0] += int(e.won and not e.env_error)
        counts[e.task_type][1] += 1
    rates = success_by_type([counts], prefix)
    for task_type, (_, played) in sorted(counts.items()):
        key = f"{prefix}success_rate/{task_type}"
        if key in rates:
            out.mean(key, rates[key], played)
    return out


def success_by_type(counts: Iterable[Mapping[str, Sequence[int]]], prefix: str = "val/") -> dict[str, float]:
    """``{prefix}success_rate/<type>`` from per-rank ``{task type: (won, played)}`` counts, summed
    over the mappings; empty when the episodes have fewer than two task types (one type's rate is
    the overall one). :func:`episode_metrics` and the RL module's validation both report through it."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for mapping in counts:
        for task_type, (won, played) in mapping.items():
            totals[task_type][0] += int(won)
            totals[task_type][1] += int(played)
    if len(totals) < 2:
        return {}
    return {f"{prefix}success_rate/{t}": won / played for t, (won, played) in sorted(totals.items()) if played}


def _group_outcomes(episodes: Sequence[Episode], prefix: str, out: Metrics) -> None:
    """``same_outcome_groups``: the share of groups (two episodes or more) whose episodes all won or all
    lost, the groups whose advantages come only from what differs besides success (the invalid-action
    penalty, a step's own reward); ``failed_groups``: the share where none won. A group's episodes are on
    one rank (the DataModule splits the batch by groups), so the per-rank shares combine exactly."""
    groups: dict[object, list[bool]] = defaultdict(list)
    for e in episodes:
        group = getattr(e, "group_id", None)
        if group is not None:
            groups[group].append(bool(e.won))
    sized = [won for won in groups.values() if len(won) >= 2]
    if sized:
        out.mean(f"{prefix}same_outcome_groups", sum(len(set(w)) == 1 for w in sized) / len(sized), len(sized))
        out.mean(f"{prefix}failed_groups", sum(not any(w) for w in sized) / len(sized), len(sized))


MIX_MEASURES = ("success_rate", "return_mean", "valid_action_ratio", "score")  # a mix's overall val/<measure>


def member_means(values: Mapping[str, float], members: Sequence[str], prefix: str = "val/") -> dict[str, float]:
    """A mix's overall ``<prefix><measure>`` for each of :data:`MIX_MEASURES`: the mean over the ``members`` of
    ``<prefix><member>/<measure>`` (the members that have a finite one: ``score`` only the graded ones). Each
    member counts the same, whatever its number of validation episodes."""
    out = {}
    for measure in MIX_MEASURES:
        found = [float(values[k]) for k in (f"{prefix}{m}/{measure}" for m in members) if k in values]
        finite = [v for v in found if math.isfinite(v)]
        if finite:
            out[f"{prefix}{measure}"] = sum(finite) / len(finite)
        elif found:
            out[f"{prefix}{measure}"] = float("nan")
    return out
