"""Validations compared game by game: the same held-out games (task seeds), won before and after.

A run's start (iteration 0, before RL) against its last validation, summed over a setting's seeds
(:func:`games_by_setting`, :func:`games_table`: the report's and the findings pages' game-by-game
tables), and any pairs of validations, e.g. a BC start and the RL policy of one seed evaluated by
``src/eval.py`` (:func:`compare_table`: ``python src/compare.py``).

The seeds of a study validate on the same held-out games, so a game's outcomes over the seeds are
replicates of one unit, not independent pairs: the test over seeds pooled takes each game as one
unit (:func:`game_net`: the seeds that won it last minus those that won it at the start) and asks,
with the exact sign test, whether more games went up than down. McNemar's exact test on discordant
pairs is kept for one validation against another (one seed: each game once).

A game is its task seed; in a mix (``env=mix``), whose members validate on their own games under the same
seeds, it is ``(member, task seed)`` (the records' ``env``: :func:`arl.analysis.runs.games_of`), so two
members' games of one seed are never paired.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from arl.analysis.runs import GameKey, Run, episode_rows, games_of, settings, several_envs
from arl.analysis.stats import mcnemar_exact
from arl.analysis.tables import format_mean_ci


def paired_games(run: Run) -> tuple[int, int, int, int, int] | None:
    """(games, won at the start, won at the last validation, gained, lost) over the held-out games
    both validations played: ``gained`` failed at the start (iteration 0, before RL) and won last,
    ``lost`` the reverse. None without the episodes of the start and of a later validation."""
    if 0 not in run.games or len(run.games) < 2:
        return None
    return game_pairs(run.games[0], run.games[max(run.games)])


def game_pairs(before: dict[GameKey, bool], after: dict[GameKey, bool]) -> tuple[int, int, int, int, int] | None:
    """(games, won before, won after, gained, lost) over the games both ``{game: won}`` maps hold (a game:
    its task seed, or a mix's ``(member, task seed)``): ``gained`` lost before and won after, ``lost`` the
    reverse. None when they share none."""
    seeds = sorted(set(before) & set(after))
    if not seeds:
        return None
    gained = sum(not before[s] and after[s] for s in seeds)
    lost = sum(before[s] and not after[s] for s in seeds)
    return len(seeds), sum(before[s] for s in seeds), sum(after[s] for s in seeds), gained, lost


@dataclass(frozen=True)
class GameCounts:
    """A setting's validations game by game, its seeds pooled (:func:`games_by_setting`)."""

    seeds: int  # seeds with the episodes of the start and of a later validation
    pairs: int  # (seed, game) pairs: every game of every such seed
    won_start: int
    won_last: int
    gained: int  # pairs failed at the start and won last
    lost: int  # the reverse
    up: int  # games won by more seeds last than at the start (:func:`game_net` > 0)
    down: int  # games won by fewer
    p: float  # the exact sign test on ``up`` against ``down``: each game one unit


def game_net(runs: Iterable[Run]) -> dict[GameKey, int]:
    """Game (task seed; a mix's (member, task seed)) -> the runs that won that game at their last validation minus those that won it at
    their start (iteration 0), over the runs holding both validations' episodes and the game."""
    net: dict[GameKey, int] = defaultdict(int)
    for run in runs:
        if 0 not in run.games or len(run.games) < 2:
            continue
        before, after = run.games[0], run.games[max(run.games)]
        for game in set(before) & set(after):
            net[game] += int(after[game]) - int(before[game])
    return dict(net)


def games_by_setting(runs: Iterable[Run]) -> dict[str, GameCounts]:
    """Setting -> its :class:`GameCounts`: :func:`paired_games` summed over the setting's seeds that hold
    the episodes of the start and of a later validation, and the sign test over games (:func:`game_net`;
    the seeds pooled within a game, as they validate on the same games). Settings without such
    episodes are left out."""
    out = {}
    for name, members in settings(r for r in runs if not r.bc_only).items():
        pairs = [p for p in (paired_games(r) for r in members) if p is not None]
        if pairs:
            n, first, last, gained, lost = (sum(col) for col in zip(*pairs))
            net = game_net(members)
            up, down = sum(v > 0 for v in net.values()), sum(v < 0 for v in net.values())
            out[name] = GameCounts(len(pairs), n, first, last, gained, lost, up, down, mcnemar_exact(up, down))
    return out


def games_table(runs: Iterable[Run]) -> str:
    """Game by game, the start (iteration 0) against the last validation (the same held-out games; val_episodes/), per
    setting summed over its seeds: games won before and after, the pairs RL gained and lost, the games
    that more seeds won last than at the start (up) and fewer (down), and the exact sign test on those
    (:func:`games_by_setting`): each game is one unit, since every seed plays the same games. It speaks
    of these games, not of the spread between seeds (the settings table's gain interval does). An empty
    string when no run has two validations' episodes."""
    lines = ["| setting | seeds | games | won at start | won last | gained | lost | games up / down | sign test p |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, g in games_by_setting(runs).items():
        lines.append(f"| `{name}` | {g.seeds} | {g.pairs} | {g.won_start} ({g.won_start / g.pairs:.3f}) | "
                     f"{g.won_last} ({g.won_last / g.pairs:.3f}) | {g.gained} | {g.lost} | {g.up} / {g.down} | {g.p:.3g} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def compare_table(pairs: list[tuple[Path, Path]]) -> str:
    """Two policies game by game, once per pair of validations (``before``, ``after``) of the same
    held-out games, e.g. a BC start and the RL policy of one seed, each evaluated with that seed.

    A row per pair: the games both played, won before and after, gained (lost before, won after),
    lost, McNemar's exact p and the gain (after - before, as rates). Then the gain over the pairs
    (mean and 95 % t interval: with one pair per seed, the spread between seeds), the pooled games
    gained and lost with the sign test over games (each game one unit, its pairs pooled: pairs of
    seeds replay the same games), and success per task type pooled over the pairs."""
    lines = ["| before | after | games | won before | won after | gained | lost | McNemar p | gain |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    gains, gained_all, lost_all, mix = [], 0, 0, False
    by_type: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # won before, won after, games
    net: dict[GameKey, int] = defaultdict(int)  # game -> pairs that won it after minus before
    for before_path, after_path in pairs:
        rows_before, rows_after = episode_rows(before_path), episode_rows(after_path)
        by_env = several_envs(rows_before, rows_after)
        before, after = games_of(rows_before, by_env), games_of(rows_after, by_env)
        mix = mix or by_env
        counts = game_pairs({s: w for s, (_, w) in before.items()}, {s: w for s, (_, w) in after.items()})
        if counts is None:
            raise ValueError(f"{before_path} and {after_path} share no held-out game (task seed)")
        n, won_b, won_a, gained, lost = counts
        gain = (won_a - won_b) / n
        gains.append(gain)
        gained_all, lost_all = gained_all + gained, lost_all + lost
        for s in set(before) & set(after):
            net[s] += int(after[s][1]) - int(before[s][1])
            kind = before[s][0]  # the task type; a mix's member, with its task type where it has one
            per_type = by_type[(f"{s[0]} ({kind})" if kind else s[0]) if isinstance(s, tuple) else kind]
            per_type[0] += before[s][1]
            per_type[1] += after[s][1]
            per_type[2] += 1
        lines.append(f"| `{before_path}` | `{after_path}` | {n} | {won_b} ({won_b / n:.3f}) | "
                     f"{won_a} ({won_a / n:.3f}) | {gained} | {lost} | {mcnemar_exact(gained, lost):.3g} | "
                     f"{gain:+.3f} |")
    up, down = sum(v > 0 for v in net.values()), sum(v < 0 for v in net.values())
    out = ["\n".join(lines), "",
           (f"Gain over {len(gains)} pair(s), mean and 95 % t interval: {format_mean_ci(gains, signed=True)}; pooled "
            f"games gained {gained_all}, lost {lost_all}; over the games (each one unit, the pairs pooled) {up} up, "
            f"{down} down, sign test p {mcnemar_exact(up, down):.3g}.")]
    types = [t for t in sorted(by_type) if t]
    if len(types) > 1:
        out += ["", f"| {'member (task type)' if mix else 'task type'} | games | before | after |", "|---|---:|---:|---:|"]
        out += [f"| {t} | {by_type[t][2]} | {by_type[t][0] / by_type[t][2]:.3f} | {by_type[t][1] / by_type[t][2]:.3f} |"
                for t in types]
    return "\n".join(out)
