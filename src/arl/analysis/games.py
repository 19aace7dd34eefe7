"""Validations compared game by game: the same held-out games (task seeds), won before and after.

A run's start (iteration 0, before RL) against its last validation, summed over a setting's seeds
with McNemar's exact test on the discordant games (:func:`games_by_setting`, :func:`games_table`:
the report's and the findings pages' game-by-game tables), and any pairs of validations, e.g. a BC
start and the RL policy of one seed evaluated by ``src/eval.py`` (:func:`compare_table`:
``python src/compare.py``).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Iterable

from arl.analysis.runs import Run, read_episodes, settings
from arl.analysis.tables import format_mean_ci
from arl.utils.stats import mcnemar_exact


def paired_games(run: Run) -> tuple[int, int, int, int, int] | None:
    """(games, won at the start, won at the last validation, gained, lost) over the held-out games
    both validations played: ``gained`` failed at the start (iteration 0, before RL) and won last,
    ``lost`` the reverse. None without the episodes of the start and of a later validation."""
    if 0 not in run.games or len(run.games) < 2:
        return None
    return game_pairs(run.games[0], run.games[max(run.games)])


def game_pairs(before: dict[int, bool], after: dict[int, bool]) -> tuple[int, int, int, int, int] | None:
    """(games, won before, won after, gained, lost) over the task seeds both ``{seed: won}`` maps
    hold: ``gained`` lost before and won after, ``lost`` the reverse. None when they share none."""
    seeds = sorted(set(before) & set(after))
    if not seeds:
        return None
    gained = sum(not before[s] and after[s] for s in seeds)
    lost = sum(before[s] and not after[s] for s in seeds)
    return len(seeds), sum(before[s] for s in seeds), sum(after[s] for s in seeds), gained, lost


def games_by_setting(runs: Iterable[Run]) -> dict[str, tuple[int, int, int, int, int, int, float]]:
    """Setting -> (seeds, games, won at start, won last, gained, lost, McNemar p): :func:`paired_games`
    summed over the setting's seeds that hold the episodes of the start and of a later validation, and
    McNemar's exact test on the pooled discordant games. Settings without such episodes are left out."""
    out = {}
    for name, members in settings(r for r in runs if not r.bc_only).items():
        pairs = [p for p in (paired_games(r) for r in members) if p is not None]
        if pairs:
            n, first, last, gained, lost = (sum(col) for col in zip(*pairs))
            out[name] = (len(pairs), n, first, last, gained, lost, mcnemar_exact(gained, lost))
    return out


def games_table(runs: Iterable[Run]) -> str:
    """Game by game, the start (iteration 0) against the last validation (the same held-out games; val_episodes/), per
    setting summed over its seeds: games won before and after, the games RL gained and lost, and
    McNemar's exact test on those discordant pairs (:func:`games_by_setting`). Pooling the seeds' games treats each game of
    each seed as one pair, so it speaks of these games, not of the spread between seeds (the
    settings table's gain interval does). An empty string when no run has two validations' episodes."""
    lines = ["| setting | seeds | games | won at start | won last | gained | lost | McNemar p |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, (seeds, n, first, last, gained, lost, p) in games_by_setting(runs).items():
        lines.append(f"| `{name}` | {seeds} | {n} | {first} ({first / n:.3f}) | {last} ({last / n:.3f}) | "
                     f"{gained} | {lost} | {p:.3g} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def compare_table(pairs: list[tuple[Path, Path]]) -> str:
    """Two policies game by game, once per pair of validations (``before``, ``after``) of the same
    held-out games, e.g. a BC start and the RL policy of one seed, each evaluated with that seed.

    A row per pair: the games both played, won before and after, gained (lost before, won after),
    lost, McNemar's exact p and the gain (after - before, as rates). Then the gain over the pairs
    (mean and 95 % t interval: with one pair per seed, the spread between seeds), McNemar's test on
    the pooled discordant games, and success per task type pooled over the pairs."""
    lines = ["| before | after | games | won before | won after | gained | lost | McNemar p | gain |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    gains, gained_all, lost_all = [], 0, 0
    by_type: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # won before, won after, games
    for before_path, after_path in pairs:
        before, after = read_episodes(before_path), read_episodes(after_path)
        counts = game_pairs({s: w for s, (_, w) in before.items()}, {s: w for s, (_, w) in after.items()})
        if counts is None:
            raise ValueError(f"{before_path} and {after_path} share no held-out game (task seed)")
        n, won_b, won_a, gained, lost = counts
        gain = (won_a - won_b) / n
        gains.append(gain)
        gained_all, lost_all = gained_all + gained, lost_all + lost
        for s in set(before) & set(after):
            per_type = by_type[before[s][0]]
            per_type[0] += before[s][1]
            per_type[1] += after[s][1]
            per_type[2] += 1
        lines.append(f"| `{before_path}` | `{after_path}` | {n} | {won_b} ({won_b / n:.3f}) | "
                     f"{won_a} ({won_a / n:.3f}) | {gained} | {lost} | {mcnemar_exact(gained, lost):.3g} | "
                     f"{gain:+.3f} |")
    out = ["\n".join(lines), "",
           f"Gain over {len(gains)} pair(s), mean and 95 % t interval: {format_mean_ci(gains, signed=True)}; pooled "
           f"games gained {gained_all}, lost {lost_all}, McNemar p {mcnemar_exact(gained_all, lost_all):.3g}."]
    types = [t for t in sorted(by_type) if t]
    if len(types) > 1:
        out += ["", "| task type | games | before | after |", "|---|---:|---:|---:|"]
        out += [f"| {t} | {by_type[t][2]} | {by_type[t][0] / by_type[t][2]:.3f} | {by_type[t][1] / by_type[t][2]:.3f} |"
                for t in types]
    return "\n".join(out)
