"""Episode statistics shared by training rollouts, validation and ``src/eval.py``."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping, Sequence

from arl.agent.records import Episode


def episode_metrics(episodes: Sequence[Episode], prefix: str = "rollout/") -> dict[str, float]:
    """Success, return, length, validity and response-length statistics of ``episodes``.

    Episodes with an environment error count in ``env_errors`` only.
    """
    good = [e for e in episodes if not e.env_error]
    turns = [t for e in good for t in e.turns]
    out: dict[str, float] = {f"{prefix}env_errors": float(len(episodes) - len(good))}
    if not good:
        return out
    out[f"{prefix}success_rate"] = sum(e.won for e in good) / len(good)
    out[f"{prefix}return_mean"] = sum(e.ret for e in good) / len(good)
    out[f"{prefix}episode_len"] = sum(e.num_turns for e in good) / len(good)
    if turns:
        lens = [len(t.response_ids) for t in turns]
        out[f"{prefix}valid_action_ratio"] = sum(t.valid for t in turns) / len(turns)
        out[f"{prefix}response_len_mean"] = sum(lens) / len(lens)
        out[f"{prefix}response_len_max"] = float(max(lens))
        out[f"{prefix}truncated_ratio"] = sum(t.truncated for t in turns) / len(turns)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in good:
        counts[e.task_type][0] += int(e.won)
        counts[e.task_type][1] += 1
    out.update(success_by_type([counts], prefix))
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
