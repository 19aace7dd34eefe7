"""Results of a multirun as a markdown table and PNG plots (``python src/report.py <folder>``).

A multirun folder holds one subfolder per run, named by its overrides (``algo=grpo,experiment=sokoban,
seed=1``), each with TensorBoard events under ``tensorboard/``. For every run this reads the RL
scalars and reports:

- final and best ``val/success_rate`` (and per task type, ``val/success_rate/<type>``; for a mix,
  ``env=mix``, each member's start and final ``val/<member>/success_rate``, the overall being their mean);
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

The paired comparisons (``--contrast``) are made on every overall measure the runs logged and, for a
mix, on each member's final validation success and gain over the start (``final@<member>``,
``gain@<member>``; ``--measure`` picks others).

This module wires the report together (:func:`write_report`); the runs are read by :mod:`arl.analysis.runs`,
the tables are :mod:`arl.analysis.tables`' and :mod:`arl.analysis.games`', the figures :mod:`arl.analysis.plots`'.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from arl.analysis.games import games_table
from arl.analysis.plots import plot_curves, plot_settings, plot_types
from arl.analysis.runs import Run, find_runs
from arl.analysis.study_plan import StudyPlan, departures_section
from arl.analysis.tables import (
    collapse_tests,
    contrast_table,
    curriculum_table,
    default_contrasts,
    group_table,
    measure_of,
    member_table,
    member_tag,
    mix_members,
    report_measures,
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
    """How many episodes each validation played (a mix: each member, ``val/<member>/episodes``), and each run's
    best checkpoint (by iteration)."""
    sizes = sorted({r.val_episodes for r in runs if r.val_episodes})
    size = (f"{sizes[0]} episodes per validation" if len(sizes) == 1 else
            f"{', '.join(map(str, sizes))} episodes per validation (the runs differ)" if sizes else "validation size unknown")
    if mix := mix_members(runs):  # every member on its own held-out games
        played = {m: sorted({int(v) for r in runs if (v := r.final(member_tag(m, "episodes"))) is not None}) for m in mix}
        size = ("episodes per validation: " + ", ".join(f"`{m}` {' / '.join(map(str, n))}" for m, n in played.items())
                if all(played.values()) else size.replace(" per validation", " of each member per validation"))
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


def contrast_measures(runs: list[Run], measures: list[str] | None = None) -> list[tuple[str, Callable[[Run], float | None]]]:
    """(name, value per run) of each measure the report compares (:func:`arl.analysis.tables.measure_of`):
    ``measures`` as given (``final``, ``gain``, ``final@sokoban_7x7``, ...), default
    :func:`arl.analysis.tables.report_measures` (every overall measure, and each member's final success and
    gain for a mix); ValueError for a measure on a member no run validated."""
    members = mix_members(runs)
    out = []
    for name in report_measures(runs) if measures is None else measures:
        measure = measure_of(name)
        member = name.partition("@")[2]
        if member and member not in members:
            raise ValueError(f"measure {name!r}: no run validated a member {member!r}"
                             + (f"; members: {', '.join(members)}" if members else " (the runs are not a mix)"))
        out.append(measure)
    return out


#: the report's sections after the settings table that only some runs fill: (title, the table of the runs; an empty
#: table leaves its section out)
SECTIONS: tuple[tuple[str, Callable[[list[Run]], str]], ...] = (
    ("Stability over the run (mean and t 95 % over seeds)", stability_table),
    ("Success per member of the mix (validation: start -> final, mean and 95 % t interval over seeds)", member_table),
    ("Curriculum: the stage each run played (`curriculum/stage`)", curriculum_table),
    ("Success per task type (validation: start -> final, mean and 95 % t interval over seeds)", type_table),
    ("Game by game (start against last validation, the same held-out games; seeds pooled)", games_table),
)


def write_report(multirun: Path, out_dir: Path | None = None, contrasts: list[str] | None = None,
                 plan: StudyPlan | None = None, measures: list[str] | None = None) -> Path:
    """Write ``report.md`` and the PNG plots into ``out_dir`` (default ``<multirun>/report``).

    ``contrasts``: paired comparisons over seeds (:func:`contrast_table`), one table per measure that the
    runs logged: ``measures`` (:func:`contrast_measures`; default every overall measure and, for a mix, each
    member's final success and gain over the start); default every setting against ``algo=grpo`` when the
    runs have it. ``plan``: the study's plan (:mod:`arl.analysis.study_plan`); the report then opens
    with every departure of the runs from it (its start's hash read from the repository holding the plan)."""
    multirun = Path(multirun)
    runs = find_runs(multirun)
    compared = contrast_measures(runs, measures)
    contrasts = default_contrasts(runs) if contrasts is None else contrasts
    common = runs[0].common
    n_bc = sum(r.bc_only for r in runs)
    mix = mix_members(runs)
    out_dir = Path(out_dir) if out_dir else multirun / "report"
    plots = _plots(runs, out_dir)
    parts = [
        f"# Report: {multirun.name}",
        (f"{len(runs)} runs from `{shown_path(multirun)}`. Success is the validation success rate "
         "(`val/success_rate`: sampled as the paper's scripts, greedy where a run set "
         "`rollout.val_temperature=0`); start success is its first validation (before RL), the gain is final minus "
         "start; steps to collapse is the first iteration the collapse detector fired."
         + (f" The runs are a mix of {', '.join(f'`{m}`' for m in mix)}: `val/success_rate` is the mean over "
            "the members of each member's own (`val/<member>/success_rate`, on its own held-out games)."
            if mix else "")),
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
        *[part for title, table in SECTIONS if (text := table(runs)) for part in (f"## {title}", text)],
        *[part for measure, value in compared if any(value(r) is not None for r in runs)
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
