"""The markdown tables of a multirun's report, and the measures a paired comparison compares.

Per run (:func:`run_table`), per validation (:func:`validation_table`), per setting with the mean
and 95 % t interval over its seeds and the bootstrap interval of the final success
(:func:`group_table`), per task type (:func:`type_table`), per member of a mix (:func:`member_table`),
the paired contrasts over seeds of each measure of :data:`MEASURES` and of a mix's members
(:func:`measure_of`, :func:`report_measures`; :func:`contrast_table`) and the collapse counts with
Fisher's exact test (:func:`collapse_tests`). The cells' formats (:func:`format_mean_ci`, :func:`collapse_cell`,
:func:`type_cells`) are also the findings pages' (:mod:`arl.analysis.blocks`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from itertools import pairwise

from arl.analysis.runs import Run, kl_tag, seed_of, setting_terms, settings, values_by_setting
from arl.analysis.stats import bootstrap_ci, contrast_values, fisher_exact, mean_ci


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def mix_members(runs: Iterable[Run]) -> list[str]:
    """The members of a mix (``env=mix``) any of the runs validated (:meth:`Run.members`), sorted; ``[]`` for
    runs of one env."""
    return sorted({m for r in runs for m in r.members()})


def member_tag(member: str, measure: str = "success_rate", stage: str = "val") -> str:
    """``val/<member>/success_rate``: a mix member's validation (``stage`` ``rollout``: training) scalar."""
    return f"{stage}/{member}/{measure}"


def run_table(runs: Iterable[Run]) -> str:
    """The per-run markdown table; with a graded env (WebShop: ``val/score``, the mean final score x 100) the
    start and final score beside the success; for a mix (``env=mix``), each member's validation success
    (``val/<member>/success_rate``) at the start and the last validation beside the overall (the mean over the
    members)."""
    runs = list(runs)
    types = sorted({t for r in runs for t in r.task_types()})
    graded = any(r.scalars.get("val/score") for r in runs)
    scores = ["start score", "final score"] if graded else []
    members = mix_members(runs)
    per_member = [f"{when} {m}" for m in members for when in ("start", "final")]
    head = ["run", "start success", "final success", "best success", *scores, *per_member, *[f"final {t}" for t in types],
            "steps to collapse", "peak KL", "peak grad norm", "clip fraction", "valid-action ratio", "optimiser steps",
            "skipped updates"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for r in runs:
        cells = [f"`{r.label}`", _fmt(r.first("val/success_rate")), _fmt(r.final("val/success_rate")),
                 _fmt(r.best("val/success_rate")),
                 *([_fmt(r.first("val/score"), 1), _fmt(r.final("val/score"), 1)] if graded else []),
                 *[_fmt(read(member_tag(m))) for m in members for read in (r.first, r.final)],
                 *[_fmt(r.final(f"val/success_rate/{t}")) for t in types],
                 _fmt(r.steps_to_collapse()), _fmt(r.peak(kl_tag(r)), 4), _fmt(r.peak("actor/grad_norm"), 2),
                 _fmt(r.mean("actor/clipfrac"), 4), _fmt(r.final("rollout/valid_action_ratio")),
                 _fmt(r.final("train/optimizer_steps"), 0), _fmt(r.final("train/updates_skipped"), 0)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


MAX_VALIDATION_COLUMNS = 12  # wider tables are left to the curves


def validation_table(runs: Iterable[Run], tag: str = "val/success_rate") -> str:
    """Validation success of every run at every validation iteration ("-" where a run had not
    reached that check), then, where a setting has several seeds, its mean over the seeds that
    reached each check. An empty string for fewer than two checks or more than
    :data:`MAX_VALIDATION_COLUMNS` of them.

    Example: runs ``seed=1`` (validations 0.2 at iteration 0, 0.4 at 10) and ``seed=2`` (0.3 at 0)
    of one setting ``s`` give the rows ``| `seed=1` | 0.200 | 0.400 |``, ``| `seed=2` | 0.300 | - |``
    and ``| mean of `s` (2 seeds) | 0.250 | 0.400 |``."""
    runs = [r for r in runs if not r.bc_only and r.scalars.get(tag)]
    steps = sorted({step for r in runs for step, _ in r.scalars[tag]})
    if not 2 <= len(steps) <= MAX_VALIDATION_COLUMNS:
        return ""
    at = {r.name: dict(r.scalars[tag]) for r in runs}  # by folder: unique, where labels might repeat
    head = ["run", *[f"it {s}" for s in steps]]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(steps)]
    for r in runs:
        lines.append("| " + " | ".join([f"`{r.label}`", *[_fmt(at[r.name].get(s)) for s in steps]]) + " |")
    groups = settings(runs)
    if any(len(m) > 1 for m in groups.values()):
        for name, members in groups.items():
            cells = []
            for s in steps:
                values = [at[r.name][s] for r in members if s in at[r.name]]
                cells.append(_fmt(statistics.fmean(values)) if values else "-")
            lines.append("| " + " | ".join([f"mean of `{name}` ({len(members)} seed{'s' if len(members) != 1 else ''})", *cells]) + " |")
    return "\n".join(lines)


def format_mean_ci(values: list[float], signed: bool = False) -> str:
    """``"0.250 [0.120, 0.380]"``: the mean and its 95 % t interval over the values (one value
    alone; ``"-"`` for none); ``signed`` writes a sign on every number (differences)."""
    if not values:
        return "-"
    fmt = "+.3f" if signed else ".3f"
    if len(values) == 1:
        return f"{values[0]:{fmt}}"
    m, half = mean_ci(values)
    return f"{m:{fmt}} [{m - half:{fmt}}, {m + half:{fmt}}]"


def collapse_tests(runs: Iterable[Run]) -> str:
    """Collapse counts of every pair of settings where some run collapsed, with Fisher's exact
    test (two-sided); an empty string when no run collapsed or there is one setting."""
    groups = settings(r for r in runs if not r.bc_only)
    counts = {g: (sum(r.steps_to_collapse() is not None for r in m), len(m)) for g, m in groups.items()}
    names = list(counts)
    lines = ["| setting A | collapsed | setting B | collapsed | Fisher p |", "|---|---:|---|---:|---:|"]
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            (cx, nx), (cy, ny) = counts[x], counts[y]
            if cx + cy == 0:
                continue
            p = fisher_exact(cx, nx - cx, cy, ny - cy)
            lines.append(f"| `{x}` | {cx}/{nx} | `{y}` | {cy}/{ny} | {p:.3f} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def format_bootstrap(values: list[float], signed: bool = False) -> str:
    """``"[0.120, 0.380]"``: the percentile bootstrap 95 % interval of the mean (``"-"`` below two values)."""
    if len(values) < 2:
        return "-"
    fmt = "+.3f" if signed else ".3f"
    _, lo, hi = bootstrap_ci(values)
    return f"[{lo:{fmt}}, {hi:{fmt}}]"


def collapse_cell(members: list[Run]) -> str:
    """``"2/4 (it 1, 7)"``: runs the detector fired in, of the setting's runs, and the first
    iteration it fired in each of them (time to collapse)."""
    firsts = sorted(s for s in (r.steps_to_collapse() for r in members) if s is not None)
    return f"{len(firsts)}/{len(members)}" + (f" (it {', '.join(map(str, firsts))})" if firsts else "")


def group_table(runs: Iterable[Run]) -> str:
    """Mean and 95 % confidence interval (t over the seeds) of each setting; the final success also
    with its percentile bootstrap interval over the seeds."""
    head = ["setting", "seeds", "final success", "final success, bootstrap", "gain over start", "best success",
            "collapsed (first iteration)", "peak KL", "clip fraction", "valid-action ratio"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for name, members in settings(runs).items():
        def vals(fn, members=members):
            return [v for v in (fn(r) for r in members) if v is not None]

        finals = vals(lambda r: r.final("val/success_rate"))
        cells = [f"`{name}`", str(len(members)), format_mean_ci(finals), format_bootstrap(finals),
                 format_mean_ci(vals(lambda r: r.gain("val/success_rate")), signed=True),
                 format_mean_ci(vals(lambda r: r.best("val/success_rate"))),
                 collapse_cell(members),
                 format_mean_ci(vals(lambda r: r.peak(kl_tag(r)))),
                 format_mean_ci(vals(lambda r: r.mean("actor/clipfrac"))),
                 format_mean_ci(vals(lambda r: r.final("rollout/valid_action_ratio")))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: the stability table's columns: (heading, what is read from a run); each cell the mean and t 95 % over seeds
STABILITY: list[tuple[str, Callable[[Run], float | None]]] = [
    ("mean KL", lambda r: r.mean(kl_tag(r))),
    ("peak KL", lambda r: r.peak(kl_tag(r))),
    ("clip fraction", lambda r: r.mean("actor/clipfrac")),
    ("tokens past the binding clip", lambda r: _sum_means(r, "is/tokens_above_pos", "is/tokens_below_neg")),
    ("sequence ratio p95 - p05", lambda r: _mean_of_difference(r, "is/seq_ratio_p95", "is/seq_ratio_p05")),
    ("entropy, first iteration", lambda r: r.first("actor/entropy")),
    ("entropy, last iteration", lambda r: r.final("actor/entropy")),
    ("peak grad norm", lambda r: r.peak("actor/grad_norm")),
    ("masked sequences", lambda r: r.mean("actor/masked_seqs")),
    ("skipped updates", lambda r: r.final("train/updates_skipped")),
]


def _mean_of_difference(run: Run, high: str, low: str) -> float | None:
    a, b = dict(run.scalars.get(high, [])), dict(run.scalars.get(low, []))
    common = [k for k in a if k in b]
    return sum(a[k] - b[k] for k in common) / len(common) if common else None


def stability_table(runs: Iterable[Run]) -> str:
    """What stability looks like per setting, over the run (mean and t 95 % over seeds): the KL to the
    reference (``actor/kl_loss``, else ``actor/ppo_kl``: mean and peak), the clip fraction (``actor/clipfrac``),
    the tokens past the clip on the side that binds (``is/tokens_above_pos`` + ``is/tokens_below_neg``, each
    averaged over the run), the spread of the sequence ratio (``is/seq_ratio_p95`` - ``is/seq_ratio_p05``), the
    entropy at the first and last iteration (``actor/entropy``), the peak gradient norm, the masked sequences, the skipped updates and
    the collapse detector's events (runs with one, and its first iteration). Empty when no run logged a KL."""
    runs = [r for r in runs if not r.bc_only]
    if not any(r.scalars.get(kl_tag(r)) for r in runs):
        return ""
    head = ["setting", "seeds", *(h for h, _ in STABILITY), "collapsed (first iteration)"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for name, members in settings(runs).items():
        def vals(fn, members=members):
            return [v for v in (fn(r) for r in members) if v is not None]

        cells = [f"`{name}`", str(len(members))]
        cells += [format_mean_ci(v) if (v := vals(read)) else "-" for _, read in STABILITY]
        cells.append(collapse_cell(members))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _sum_means(run: Run, *tags: str) -> float | None:
    means = [run.mean(t) for t in tags]
    return None if any(m is None for m in means) else sum(means)


def type_cells(runs: Iterable[Run]) -> tuple[list[str], dict[str, tuple[int, list[str]]]]:
    """(the task types, setting -> (its seeds, a cell per type)) of the runs' validation success per
    task type (``val/success_rate/<type>``; envs with several types, ALFWorld's six): each cell
    ``"start -> final [t 95 %] (gain +g [t 95 %])"``, the start the seeds' mean, the final and the
    gain (final - start) with their t intervals over the seeds; ``"-"`` where the setting's runs
    lack the type. No types (and no settings) when no run logged one."""
    runs = [r for r in runs if not r.bc_only]
    types = sorted({t for r in runs for t in r.task_types()})
    return types, _start_final_cells(runs, [f"val/success_rate/{t}" for t in types])


def member_cells(runs: Iterable[Run]) -> tuple[list[str], dict[str, tuple[int, list[str]]]]:
    """(the members of a mix, setting -> (its seeds, a cell per member)) of the runs' validation success per
    member (``val/<member>/success_rate``), each cell as :func:`type_cells`'; nothing for runs of one env."""
    runs = [r for r in runs if not r.bc_only]
    members = mix_members(runs)
    return members, _start_final_cells(runs, [member_tag(m) for m in members])


def _start_final_cells(runs: list[Run], tags: list[str]) -> dict[str, tuple[int, list[str]]]:
    """Setting -> (its seeds, a ``"start -> final [t 95 %] (gain +g [t 95 %])"`` cell per tag); none without tags."""
    if not tags:
        return {}
    out = {}
    for name, members in settings(runs).items():
        cells = []
        for tag in tags:
            starts = [v for v in (r.first(tag) for r in members) if v is not None]
            finals = [v for v in (r.final(tag) for r in members) if v is not None]
            gains = [v for v in (r.gain(tag) for r in members) if v is not None]
            start = f"{sum(starts) / len(starts):.3f} -> " if starts else ""
            gain = f" (gain {format_mean_ci(gains, signed=True)})" if gains else ""
            cells.append(f"{start}{format_mean_ci(finals)}{gain}" if finals else "-")
        out[name] = (len(members), cells)
    return out


def stage_moves(run: Run) -> list[tuple[int, int]]:
    """``(iteration, stage)`` of every move of a curriculum run (``curriculum/stage`` changed from the iteration
    before; stages counted from 0), in order; empty for a run without a curriculum or that never moved."""
    series = run.scalars.get("curriculum/stage") or []
    return [(step, int(value)) for (_, before), (step, value) in pairwise(series) if value != before]


def curriculum_table(runs: Iterable[Run]) -> str:
    """A row per curriculum run (one that logged ``curriculum/stage``): its setting, seed, the stage at its
    first and last logged iteration and every move (``stage 1 at iteration 23``). An empty string when no run
    has a curriculum."""
    rows = []
    for run in runs:
        series = run.scalars.get("curriculum/stage")
        if not series:
            continue
        moves = ", ".join(f"stage {stage} at iteration {step}" for step, stage in stage_moves(run)) or "none"
        rows.append(f"| `{run.group}` | {seed_of(run)} | {int(series[0][1])} | {int(series[-1][1])} | {moves} |")
    if not rows:
        return ""
    head = ["| setting | seed | first stage | last stage | moves (stages counted from 0) |", "|---|---:|---:|---:|---|"]
    return "\n".join(head + rows)


def type_table(runs: Iterable[Run]) -> str:
    """Validation success per task type of each setting (:func:`type_cells`): ``start -> final``
    with the final's 95 % t interval over the seeds, and the gain per type. An empty string when
    no run logged ``val/success_rate/<type>``."""
    return _settings_table(*type_cells(runs))


def member_table(runs: Iterable[Run]) -> str:
    """Validation success per member of a mix of each setting (:func:`member_cells`): ``start -> final`` with
    the final's 95 % t interval over the seeds, and the gain per member. An empty string for runs of one env."""
    return _settings_table(*member_cells(runs))


def _settings_table(columns: list[str], rows: dict[str, tuple[int, list[str]]]) -> str:
    """A markdown table of a row per setting (its seed count, then a cell per column); empty without columns."""
    if not columns:
        return ""
    lines = ["| setting | seeds | " + " | ".join(columns) + " |", "|---|---:|" + "---|" * len(columns)]
    lines += [f"| `{name}` | {n} | " + " | ".join(cells) + " |" for name, (n, cells) in rows.items()]
    return "\n".join(lines)


def default_contrasts(runs: list[Run]) -> list[str]:
    """Every setting against the paper's baseline, ``algo=grpo`` with the rest of its label equal,
    when the runs have it (``algo=sampo - algo=grpo``, ...); none otherwise."""
    groups = settings(r for r in runs if not r.bc_only)
    out = []
    for name, members in groups.items():
        algo = members[0].overrides.get("algo")
        if algo in (None, "grpo"):
            continue
        base = ",".join(f"{k}={'grpo' if k == 'algo' else v}" for k, v in members[0].overrides.items() if k != "seed")
        if base in groups:
            out.append(f"{name} - {base}")
    return out


#: what a paired comparison compares, per run (None: the run lacks it)
MEASURES: dict[str, Callable[[Run], float | None]] = {
    "final validation success": lambda r: r.final("val/success_rate"),
    # every iteration's training episodes (64 a time on the CPU, the same tasks for every method of a
    # seed): many more episodes than the last validation, so a tighter paired difference
    "mean training success over the run": lambda r: r.mean("rollout/success_rate"),
    # how soon a policy answers in the format (what the stage-aware filter is for) and how much of
    # it a collapse costs: the mean of the per-iteration valid-action ratio of the training episodes
    "mean training valid-action ratio over the run": lambda r: r.mean("rollout/valid_action_ratio"),
    # what RL added to the start: the last validation minus the first (iteration 0, the start policy), on
    # the same held-out games; a single setting's contrast ("algo=sampo") is its gain per seed
    "gain over the start": lambda r: r.gain("val/success_rate"),
}


#: the short names of :data:`MEASURES`, as ``--measure`` and findings.yaml spell them
#: (:data:`arl.analysis.study.MEASURE_KINDS`)
SHORT_NAMES: dict[str, str] = {
    "final": "final validation success",
    "training": "mean training success over the run",
    "training-valid": "mean training valid-action ratio over the run",
    "gain": "gain over the start",
}

#: a measure on one member of a mix (``env=mix``), short name ``<kind>@<member>`` (``final@sokoban_7x7``): its
#: name and its value, each of the member's name; the member's own scalars (``val/<member>/success_rate``,
#: ``rollout/<member>/success_rate``, ...), read as the overall measure of that kind reads the overall ones
MEMBER_MEASURES: dict[str, tuple[str, Callable[[str], Callable[[Run], float | None]]]] = {
    "final": ("final validation success on {member}", lambda m: lambda r: r.final(member_tag(m))),
    # the member's last validation minus its first, on the member's own held-out games
    "gain": ("gain over the start on {member}", lambda m: lambda r: r.gain(member_tag(m))),
    # the iterations that played the member (a member of weight 0 logs no rollout/<member>/*)
    "training": ("mean training success over the run on {member}",
                 lambda m: lambda r: r.mean(member_tag(m, stage="rollout"))),
    "training-valid": ("mean training valid-action ratio over the run on {member}",
                       lambda m: lambda r: r.mean(member_tag(m, "valid_action_ratio", stage="rollout"))),
}

#: the member measures the report compares on every member of a mix by default
REPORT_MEMBER_KINDS = ("final", "gain")


def measure_of(name: str) -> tuple[str, Callable[[Run], float | None]]:
    """(the report's name, the value per run) of a measure named by its name in :data:`MEASURES`, its short
    name (:data:`SHORT_NAMES`: ``final``) or, on one member of a mix, ``<kind>@<member>`` (:data:`MEMBER_MEASURES`:
    ``final@sokoban_7x7``, named ``final validation success on sokoban_7x7``, which is also taken);
    ValueError for any other."""
    if name in MEASURES:
        return name, MEASURES[name]
    if name in SHORT_NAMES:
        return SHORT_NAMES[name], MEASURES[SHORT_NAMES[name]]
    kind, at, member = name.partition("@")
    if not at:  # by its name: "final validation success on sokoban_7x7"
        for k, (template, _) in MEMBER_MEASURES.items():
            head = template.removesuffix("{member}")
            if name.startswith(head) and name != head:
                kind, member = k, name[len(head):]
    if kind in MEMBER_MEASURES and member and "/" not in member:
        template, value = MEMBER_MEASURES[kind]
        return template.format(member=member), value(member)
    raise ValueError(f"no measure {name!r}; measures: {', '.join(SHORT_NAMES)} (or their names: "
                     f"{'; '.join(MEASURES)}), and on a member of a mix {', '.join(k + '@<member>' for k in MEMBER_MEASURES)}")


def report_measures(runs: Iterable[Run]) -> list[str]:
    """The measures a report compares, named as :func:`measure_of` takes them: every one of :data:`MEASURES`,
    then, for a mix, each member's final success and gain (:data:`REPORT_MEMBER_KINDS`: ``final@<member>``, ...)."""
    members = mix_members(runs)
    return [*MEASURES, *(f"{k}@{m}" for m in members for k in REPORT_MEMBER_KINDS)]


def contrast_table(runs: Iterable[Run], contrasts: list[str], measure: str = "final validation success") -> str:
    """Paired comparisons over seeds: for each contrast (``"A - B"``, or a difference of differences
    ``"A - B - C + D"``) the ``measure`` (named as :func:`measure_of` takes it) combined per seed over the seeds
    all its settings ran, with the mean, its t and bootstrap 95 % intervals, and how many seeds came
    out above / below zero. A contrast naming a setting the runs lack says so in its row (a study
    in progress still reports the rest; a misspelt name shows the names there are). An empty
    string without contrasts."""
    if not contrasts:
        return ""
    by_setting = values_by_setting(runs, measure_of(measure)[1])
    head = ["contrast (per seed)", "seeds", "mean [t 95 %]", "bootstrap 95 %", "above / below 0", "per seed"]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---:|---:|---:|---|"]
    for spec in contrasts:
        try:
            per_seed = contrast_values(setting_terms(spec, by_setting), by_setting)
        except KeyError as err:  # a setting that has not run (yet): said in its row, the rest still reported
            lines.append(f"| `{spec}` | 0 | {err.args[0]} | - | - | - |")
            continue
        values = list(per_seed.values())
        if not values:
            lines.append(f"| `{spec}` | 0 | - | - | - | - |")
            continue
        above, below = sum(v > 1e-12 for v in values), sum(v < -1e-12 for v in values)
        lines.append(f"| `{spec}` | {len(values)} | {format_mean_ci(values, signed=True)} | {format_bootstrap(values, signed=True)} "
                     f"| {above} / {below} | {', '.join(f'{s}: {v:+.3f}' for s, v in per_seed.items())} |")
    return "\n".join(lines)
