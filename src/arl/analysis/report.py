"""Results of a multirun as a markdown table and PNG plots (``python src/report.py <folder>``).

A multirun folder holds one subfolder per run, named by its overrides (``algo=grpo,experiment=sokoban,
seed=1``), each with TensorBoard events under ``tensorboard/``. For every run this reads the RL
scalars and reports:

- final and best ``val/success_rate`` (and per task type, ``val/success_rate/<type>``);
- steps to collapse: the first iteration where ``collapse/events`` counts an event, else ``-``;
- peak KL (``actor/kl_loss``; ``actor/ppo_kl`` when no KL term is logged), peak ``actor/grad_norm``;
- the clip fraction (``actor/clipfrac`` averaged over iterations: the tokens the policy loss clipped,
  a clipped sequence's tokens for GSPO, capped tokens for CISPO): whether IS clipping acted at all;
- the final ``rollout/valid_action_ratio``.

A behaviour-cloning run (``experiment=bc_<env>``)
has no RL curves; its row reads ``bc_results.json``: start success is the untrained model's, final
success the cloned policy's, and the valid-action ratio that of its greedy validation. It is left
out of the plots, whose x axis is the RL iteration.

Runs that differ only in ``seed`` are also summarised together (mean and 95 % confidence interval
over seeds, t distribution; bands of the same in the curves). The plots are the curves the paper shows, one line per run: validation success, KL,
gradient norm, the four clip fractions (``is/tokens_{above,below}_{pos,neg}``), the valid-format
ratio, the masked sequences and the advantage's spread (``adv/std``; ``adv/step_std`` for GiGPO).

This module wires the report together (:func:`write_report`); the runs are read by :mod:`arl.analysis.runs`,
the tables are :mod:`arl.analysis.tables`' and :mod:`arl.analysis.games`', the figures :mod:`arl.analysis.plots`'.
"""

from __future__ import annotations

from pathlib import Path

from arl.analysis.games import games_table
from arl.analysis.plots import plot_curves, plot_settings, plot_types
from arl.analysis.runs import Run, find_runs
from arl.analysis.study_plan import StudyPlan, departures_section
from arl.analysis.tables import (
    MEASURES,
    collapse_tests,
    contrast_table,
    default_contrasts,
    group_table,
    run_table,
    stability_table,
    type_table,
    validation_table,
)


def repository_of(path: Path) -> Path:
    """The nearest folder above ``path`` with a ``.git`` (the working folder when there is none)."""
    path = Path(path).resolve()
    return next((parent for parent in path.parents if (parent / ".git").exists()), Path.cwd())


def shown_path(path: Path) -> str:
    """``path`` as a page names it: relative to the repository that holds it (the nearest folder above
    with a ``.git``), so a reader's clone finds it; else relative to the working folder; else the
    path as given. A page never names the checkout of the machine that wrote it."""
    path = Path(path).resolve()
    for parent in path.parents:
        if (parent / ".git").exists():
            return str(path.relative_to(parent))
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def validation_line(runs: list[Run]) -> str:
    """How many episodes each validation played, and each run's best checkpoint (by iteration)."""
    sizes = sorted({r.val_episodes for r in runs if r.val_episodes})
    size = (f"{sizes[0]} episodes per validation" if len(sizes) == 1 else
            f"{', '.join(map(str, sizes))} episodes per validation (the runs differ)" if sizes else "validation size unknown")
    best = [f"`{r.label}`: `{r.best_checkpoint}`{' (the start scored higher)' if r.start_was_best() else ''}"
            for r in runs if r.best_checkpoint]
    return f"Validation: {size}." + (f" Best checkpoints (by validation success): {'; '.join(best)}." if best else "")


def _plots(runs, out_dir: Path) -> list[Path]:
    """The report's figures: the settings' bars and the per-type plot first (when the runs give them), the curves."""
    plots = plot_curves(runs, out_dir)
    bars = plot_settings(runs, out_dir)
    if bars is not None:
        plots.insert(0, bars)
    by_type = plot_types(runs, out_dir)
    if by_type is not None:
        plots.insert(1 if bars is not None else 0, by_type)
    return plots


def write_report(multirun: Path, out_dir: Path | None = None, contrasts: list[str] | None = None,
                 plan: StudyPlan | None = None) -> Path:
    """Write ``report.md`` and the PNG plots into ``out_dir`` (default ``<multirun>/report``).

    ``contrasts``: paired comparisons over seeds (:func:`contrast_table`), one table per measure of
    :data:`MEASURES` that the runs logged; default every setting against ``algo=grpo`` when the
    runs have it. ``plan``: the study's plan (:mod:`arl.analysis.study_plan`); the report then opens
    with every departure of the runs from it (its start's hash read from the repository holding the plan)."""
    multirun = Path(multirun)
    runs = find_runs(multirun)
    contrasts = default_contrasts(runs) if contrasts is None else contrasts
    common = runs[0].common
    n_bc = sum(r.bc_only for r in runs)
    out_dir = Path(out_dir) if out_dir else multirun / "report"
    plots = _plots(runs, out_dir)
    parts = [
        f"# Report: {multirun.name}",
        (f"{len(runs)} runs from `{shown_path(multirun)}`. Success is the validation success rate "
         "(`val/success_rate`: sampled as the paper's scripts, greedy where a run set "
         "`rollout.val_temperature=0`); start success is its first validation (before RL), the gain is final minus "
         "start; steps to collapse is the first iteration the collapse detector fired."),
        *([(f"{n_bc} behaviour-cloning run(s) (`bc_results.json`): start is the untrained model, final the cloned "
            "policy; they are not in the curves.")] if n_bc else []),
        *([f"Every run shares: `{','.join(f'{k}={v}' for k, v in common.items())}`."] if common else []),
        validation_line(runs),
        *([departures_section(plan, runs, repository_of(plan.path))] if plan is not None else []),
        "## Runs",
        run_table(runs),
        *(["## Validation success at each check", checks] if (checks := validation_table(runs)) else []),
        "## Settings (mean and 95 % confidence interval over seeds, t distribution)",
        group_table(runs),
        *(["## Stability over the run (mean and t 95 % over seeds)", stability]
          if (stability := stability_table(runs)) else []),
        *(["## Success per task type (validation: start -> final, mean and 95 % t interval over seeds)", types]
          if (types := type_table(runs)) else []),
        *(["## Game by game (start against last validation, the same held-out games; seeds pooled)", games]
          if (games := games_table(runs)) else []),
        *[part for measure, value in MEASURES.items() if any(value(r) is not None for r in runs)
          and (paired := contrast_table(runs, contrasts, measure))
          for part in (f"## Paired comparisons: {measure} (same seeds; t and bootstrap 95 % intervals)", paired)],
        *(["## Collapses (Fisher's exact test, two-sided; pairs where some run collapsed)", tests]
          if (tests := collapse_tests(runs)) else []),
        "## Curves",
        *[f"![{p.stem}]({p.name})" for p in plots],
    ]
    path = out_dir / "report.md"
    path.write_text("\n\n".join(parts) + "\n")
    return path
