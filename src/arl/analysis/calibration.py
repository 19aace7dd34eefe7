"""The calibration table: short RL runs over a grid of settings from one start, on selection seeds
(``scripts/calibrate.sh``; ``python src/report.py calibration <folder>``).

For each setting (a run's overrides without the seed), over its seeds:

- **gain over the start**: ``val/success_rate`` at the last validation minus at the first (the start
  policy), the mean and each seed's value;
- **final success**: ``val/success_rate`` at the last validation;
- **peak KL**: the highest ``actor/kl_loss`` (``actor/ppo_kl`` where no KL term is logged) of the run;
- **valid actions**: ``rollout/valid_action_ratio`` of the training episodes, first and last iteration;
- **same-outcome groups**: ``rollout/same_outcome_groups``, the share of groups whose episodes all won
  or all lost (their advantages come only from what differs besides success: the invalid-action
  penalty, step rewards), mean over the run;
- **zero advantages**: ``adv/frac_zero``, mean over the run;
- **wins per optimiser step**: the training episodes won (``rollout/success_rate`` x ``rollout/episodes``,
  re-rolled rounds included) over the optimiser steps (``actor/optimizer_steps``), summed over the run:
  how much winning signal each step had.

The best setting is the one with the highest mean gain (ties: the higher lowest seed). The seeds that
chose it cannot also confirm it: a confirmation study runs it on fresh seeds.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from arl.analysis.runs import Run, find_runs, kl_tag, seed_of, settings


@dataclass(frozen=True)
class SettingRow:
    """One setting's calibration figures over its seeds (None where no run logged the tag)."""

    setting: str
    gains: dict[str, float]  # seed -> gain over the start
    final: float | None
    peak_kl: float | None
    valid_first: float | None
    valid_last: float | None
    same_outcome: float | None
    zero_adv: float | None
    env_errors: float | None = None  # training episodes lost to environment errors, summed over the run
    wins_per_step: float | None = None  # training episodes won per optimiser step, over the run

    @property
    def gain(self) -> float | None:
        return statistics.mean(self.gains.values()) if self.gains else None


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.mean(present) if present else None


def wins_per_step(run: Run) -> float | None:
    """Training episodes won per optimiser step over the run: sum over iterations of
    ``rollout/success_rate`` x ``rollout/episodes``, over the sum of ``actor/optimizer_steps``.
    None when the run logged none of them."""
    success, episodes = dict(run.scalars.get("rollout/success_rate", [])), dict(run.scalars.get("rollout/episodes", []))
    steps = sum(v for _, v in run.scalars.get("actor/optimizer_steps", []))
    wins = sum(rate * episodes[it] for it, rate in success.items() if it in episodes)
    return wins / steps if steps and success and episodes else None


def setting_row(name: str, runs: list[Run]) -> SettingRow:
    """The figures of one setting's runs."""
    return SettingRow(
        setting=name,
        gains={seed_of(r): g for r in runs if (g := r.gain()) is not None},
        final=_mean([r.final("val/success_rate") for r in runs]),
        peak_kl=_mean([r.peak(kl_tag(r)) for r in runs]),
        valid_first=_mean([r.first("rollout/valid_action_ratio") for r in runs]),
        valid_last=_mean([r.final("rollout/valid_action_ratio") for r in runs]),
        same_outcome=_mean([r.mean("rollout/same_outcome_groups") for r in runs]),
        zero_adv=_mean([r.mean("adv/frac_zero") for r in runs]),
        env_errors=_mean([r.total("rollout/env_errors") for r in runs]),
        wins_per_step=_mean([wins_per_step(r) for r in runs]),
    )


def rows_of(runs: list[Run]) -> list[SettingRow]:
    """One row per setting of ``runs`` (behaviour-cloning runs are left out)."""
    return [setting_row(name, members) for name, members in settings([r for r in runs if not r.bc_only]).items()]


def rows(multirun: Path) -> list[SettingRow]:
    """One row per setting of the RL runs under ``multirun``."""
    return rows_of(find_runs(multirun))


def best(table: list[SettingRow]) -> SettingRow | None:
    """The setting with the highest mean gain over the start (ties: the higher lowest seed)."""
    ranked = [r for r in table if r.gain is not None]
    return max(ranked, key=lambda r: (r.gain, min(r.gains.values()))) if ranked else None


def _f(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def render(table: list[SettingRow]) -> str:
    """The markdown table and the line naming the best setting."""
    lines = [
        ("| setting | seeds | gain over the start (mean; per seed) | final success | peak KL | valid actions "
         "(first -> last iteration) | same-outcome groups | zero advantages | wins per optimiser step | env errors |"),
        "|---|---:|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in table:
        per_seed = ", ".join(f"{s}: {g:+.3f}" for s, g in sorted(r.gains.items()))
        lines.append(
            f"| `{r.setting}` | {len(r.gains)} | {_f(r.gain, True)} ({per_seed or '-'}) | {_f(r.final)} | "
            f"{_f(r.peak_kl)} | {_f(r.valid_first)} -> {_f(r.valid_last)} | {_f(r.same_outcome)} | {_f(r.zero_adv)} | "
            f"{'-' if r.wins_per_step is None else f'{r.wins_per_step:.1f}'} | {'-' if r.env_errors is None else f'{r.env_errors:.0f}'} |"
        )
    top = best(table)
    if top is None:
        lines.append("\nbest setting: none (no run has two validations)")
    else:
        seeds = ", ".join(sorted(top.gains))
        lines.append(f"\nbest setting: `{top.setting}` (mean gain {top.gain:+.3f} on seeds {seeds}); the seeds that "
                     "chose it cannot confirm it: run it on fresh seeds")
    return "\n".join(lines)


def write_calibration(multirun: Path, out: Path | None = None) -> Path:
    """Write ``calibration.md`` (the table and the best setting) into ``out`` (default: the multirun folder)."""
    text = "# Calibration\n\n" + render(rows(multirun)) + "\n"
    path = Path(out or multirun) / "calibration.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
