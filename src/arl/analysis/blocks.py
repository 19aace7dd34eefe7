"""The generated blocks of the findings pages, other than the findings and headline tables.

Per study (``NAME`` = ``<study>-<kind>``): ``setup`` (what the runs were, from their configs, and
the settings table), ``scale`` (one line: model, parameters, optimiser steps, episodes, validation,
seeds, the start's spread), ``settings``, ``contrasts`` (the planned contrasts on each measure, Holm over
the column), ``threshold`` (the collapse detector's KL threshold swept over the archived curves),
``collapses``, ``without-seed-1``, ``format``, ``cost``, ``types`` (success per task type, start ->
final) and ``games`` (game by game, the start against the last validation, a sign test over games). Over the spec:
``archives`` (what each archive holds and lacks) and ``default-job``. :func:`arl.analysis.pages.generate`
picks the block a name asks for.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from arl.analysis.calibration import render, rows_of
from arl.analysis.contrasts import collapse_tests, fmt_p, plural, ratio_values, threshold_window
from arl.analysis.findings import Spec, _recorded_row, _shared_names, _table
from arl.analysis.games import games_by_setting
from arl.analysis.runs import Run, kl_tag, seed_of, settings
from arl.analysis.stats import _seed_key, mean_ci, parse_contrast
from arl.analysis.study import MEASURE_KINDS, Study, measure_kind
from arl.analysis.tables import collapse_cell, format_mean_ci, type_cells

# --------------------------------------------------------------------------- per-study blocks


def setup_block(study: Study) -> str:
    """What the runs were (from their configs), then the settings table."""
    f = study.facts
    groups = settings(study.runs)
    names = ", ".join(study.name(g) for g in groups)
    text = (f"{len(study.runs)} runs: {len(groups)} settings ({names}) x seeds {f['seeds']}; each "
            f"{f['iterations']} iterations of {f['groups']} groups x {f['group_size']} episodes at {f['T']} from the "
            f"BC start `{f['start']}`, lr {f['lr']}, {study.steps_text()}; {f['task']}; "
            + (f"{study.schedule()}; " if study.members else "")
            + f"validation every {f['val_every']} iterations on {f['val_episodes']} {f['held_out']} at {f['VT']}.")
    return text + "\n\n" + settings_table(study)


def scale_block(study: Study) -> str:
    """One line: what the study ran and at what size (:attr:`Study.scale`)."""
    return f"Scale: {study.scale}."


def event_iterations(run: Run) -> int:
    """Iterations in which the collapse detector fired (``collapse/events`` is a running count)."""
    events = run.scalars.get("collapse/events", [])
    return sum(1 for (_, before), (_, now) in zip([(0, 0.0)] + events, events) if now > before)


def settings_table(study: Study) -> str:
    """One row per setting: the label's keys, then mean [t 95 %] over its seeds (one value for one seed)."""
    groups = settings(study.runs)
    keys = list(dict.fromkeys(k for members in groups.values() for k in members[0].overrides if k != "seed"))
    head = [*(study.name(k) if k != "algo" else "method" for k in keys), "seeds", "start success", "final success",
            "training success", "detector: runs (first iteration)", "event iterations", "peak KL", "clip fraction"]
    rows = []
    for members in groups.values():
        def vals(fn, members=members):
            return [v for v in (fn(r) for r in members) if v is not None]

        keycells = [study.name(f"{k}={members[0].overrides.get(k)}") if k == "algo" else
                    members[0].overrides.get(k, "-") for k in keys]
        events = [event_iterations(r) for r in members]
        rows.append([*keycells, str(len(members)), format_mean_ci(vals(lambda r: r.first("val/success_rate"))),
                     format_mean_ci(vals(lambda r: r.final("val/success_rate"))),
                     format_mean_ci(vals(MEASURE_KINDS["training"].value)), collapse_cell(members),
                     ", ".join(map(str, events)), format_mean_ci(vals(lambda r: r.peak(kl_tag(r)))),
                     format_mean_ci(vals(lambda r: r.mean("actor/clipfrac")))])
    return _table(head, rows, ["---"] * len(keys) + ["---:"] * (len(head) - len(keys)))


def contrasts_block(study: Study, seeds: set[str] | None = None) -> str:
    """The study's planned contrasts on each of its measures (over ``seeds``; all when None); a cell
    whose contrast is not in that measure's family (:meth:`Study.family_for`) shows ``-``."""
    head = ["contrast", *(measure_kind(m).short.format(**study.facts) for m in study.measures)]
    rows = []
    for spec_ in study.family:
        cells = [study.contrast_name(spec_)]
        for m in study.measures:
            if spec_ not in study.family_for(m):
                cells.append("-")
                continue
            c = study.contrast(spec_, m, seeds)
            bold = "**" if c.p_holm < 0.05 else ""
            cells.append(f"{bold}{c.text()}{bold}, p {fmt_p(c.p)}, Holm {fmt_p(c.p_holm)}")
        rows.append(cells)
    n = len(study.contrast(study.family_for(study.measures[0])[0], study.measures[0], seeds).values)
    sizes = {len(study.family_for(m)) for m in study.measures}
    if study.holm_measures:
        own = [m for m in study.measures if m not in study.holm_measures]
        cols = " and ".join(measure_kind(m).short.split(" (")[0] for m in study.holm_measures)
        family = (", ".join(f"the {plural(len(study.family_for(m)), 'contrast')} of the "
                            f"{measure_kind(m).short.split(' (')[0]} column" for m in own) +
                  f"{'; ' if own else ''}the {cols} columns together, {study.family_label(study.holm_measures[0])}")
    else:
        family = (plural(len(study.family), "contrast") if sizes == {len(study.family)} else "contrasts ("
                  + ", ".join(str(len(study.family_for(m))) for m in study.measures) + " in the columns' order)")
        family = f"the {family} of the column"
    return (_table(head, rows, ["---"] + ["---:"] * len(study.measures)) +
            f"\n\nEach cell: the mean of the per-seed differences, its t 95 % interval over the {n} paired seeds "
            f"(uncorrected) and how many seeds came out above 0; p: paired t-test, two-sided; Holm: p adjusted "
            f"over {family}; bold: Holm p < 0.05." + _single_note(study))


def _single_note(study: Study) -> str:
    """The contrasts block's word on rows of one setting (``"algo=sampo"``): their values are that
    setting's own per seed, tested against 0 (in a gain column: its gain over the start); ``""``
    when the family has none."""
    single = [study.contrast_name(c) for c in study.family if len(parse_contrast(c)) == 1]
    if not single:
        return ""
    return (f" A row of one setting ({', '.join(single)}) is that setting's gain over the start per seed (its last "
            f"validation minus iteration 0, the start policy), t-tested against 0; it has no cell in the other columns.")


def threshold_block(study: Study) -> str:
    thresholds = [str(t) for t in study.extra["thresholds"]]
    spec = study.extra["collapse_tests"]
    groups = list(settings(study.runs))
    tol = spec["tolerant"]
    head = ["KL threshold", *(study.name(g) for g in groups),
            *(f"p {study.name(t)} vs {study.name(spec['baseline'])}" for t in tol),
            f"p {' + '.join(study.name(t) for t in tol)} pooled"]
    rows = []
    for threshold in [*thresholds, None]:
        t = collapse_tests(study, float(threshold) if threshold is not None else None)
        label = threshold if threshold is not None else "the detector as run (all three rules)"
        rows.append([label, *(f"{t['counts'][g][0]}/{t['counts'][g][1]}" for g in groups),
                     *(fmt_p(t["per"][x]) for x in tol), fmt_p(t["pooled"][2])])
    lo, hi = threshold_window(study)
    return (_table(head, rows, ["---"] + ["---:"] * (len(head) - 1)) +
            f"\n\nRuns whose peak `actor/kl_loss` (the per-iteration value the detector reads) exceeds the threshold, "
            f"of each setting's runs; p: Fisher's exact test, two-sided, uncorrected. Every "
            f"{'/'.join(study.name(x) for x in tol)} run and no {study.name(spec['baseline'])} run passes a threshold "
            f"from {lo:.4f} ({study.name(spec['baseline'])}'s highest peak) up to {hi:.4f} (the lowest tolerant peak); "
            f"outside that window the per-method p is no longer the smallest a 4-against-4 table can give.")


def collapses_block(study: Study) -> str:
    """Every run the detector fired in, against the baseline's run of the same seed."""
    spec = study.extra["collapse_tests"]
    base = {seed_of(r): r for r in settings(study.runs)[spec["baseline"]]}
    train = MEASURE_KINDS["training"].value
    head = ["run", "first event", "event iterations", "rules that fired", "peak KL", "final success",
            f"{study.name(spec['baseline'])}'s, same seed",
            "training success", f"{study.name(spec['baseline'])}'s, same seed"]
    rows = []
    for r in study.runs:
        if r.steps_to_collapse() is None or r.group == spec["baseline"]:
            continue
        n_events = event_iterations(r)
        b = base.get(seed_of(r))
        rules = [t.split("/", 1)[1] for t in sorted(r.scalars) if t.startswith("collapse/") and t != "collapse/events"
                 and any(v > 0 for _, v in r.scalars[t])]
        rows.append([f"{study.name(r.group)} seed {seed_of(r)}", str(r.steps_to_collapse()), str(n_events),
                     ", ".join(rules) or "-", f"{r.peak(kl_tag(r)):.3f}", f"{r.final('val/success_rate'):.3f}",
                     f"{b.final('val/success_rate'):.3f}" if b else "-", f"{train(r):.3f}",
                     f"{train(b):.3f}" if b else "-"])
    above = sum(1 for row in rows if row[6] != "-" and float(row[5]) > float(row[6]))
    return (_table(head, rows, ["---"] + ["---:"] * (len(head) - 1)) +
            f"\n\n{len(rows)} runs had a detector event; {above} of them ended with a higher final success than "
            f"{study.name(spec['baseline'])}'s run of the same seed.")


def replay_line(spec: Spec, study: Study) -> str:
    """How many first iterations the seed-1 runs of this study share, value for value, with the
    regime-choosing study's runs of that regime."""
    source = spec.study(study.extra["regime_from"])
    chosen = {k: str(v) for k, v in (source.extra.get("chosen") or {}).items()}
    mine = {r.group: r for r in study.runs if seed_of(r) == "1"}
    out = []
    for r in source.runs:
        if any(r.overrides.get(k) != v for k, v in chosen.items()):
            continue
        algo = f"algo={r.overrides.get('algo')}"
        twin = mine.get(algo)
        if twin is None:
            continue
        n = 0
        for (s1, v1), (s2, v2) in zip(r.scalars["rollout/success_rate"], twin.scalars["rollout/success_rate"]):
            kl1, kl2 = dict(r.scalars[kl_tag(r)]).get(s1), dict(twin.scalars[kl_tag(twin)]).get(s2)
            if s1 != s2 or v1 != v2 or kl1 != kl2:
                break
            n += 1
        out.append((study.name(algo), n, len(r.scalars["rollout/success_rate"])))
    regime = ", ".join(f"{source.name(k)} {v}" for k, v in chosen.items())
    parts = ", ".join(f"{name} {n}" for name, n, _ in out)
    return (f"{source.short} chose this regime ({regime}) on seed 1 alone, and the seed-1 runs here replay its runs "
            f"of that regime: their first iterations are the same to the last bit (training success and "
            f"`{kl_tag(study.runs[0])}` equal; iterations: {parts}, of {out[0][2] if out else 0} in {source.short}).")


def without_seed_block(spec: Spec, study: Study, drop: str = "1") -> str:
    seeds = {seed_of(r) for r in study.runs} - {drop}
    t = collapse_tests(study, None, seeds)
    counts = t["counts"]
    base_c, base_n = counts[t["baseline"]]
    pc, pn, pp = t["pooled"]
    count_line = (f"Detector counts without seed {drop}: " +
                  ", ".join(f"{study.name(x)} {counts[x][0]}/{counts[x][1]}" for x in t["tolerant"]) +
                  f" against {study.name(t['baseline'])} {base_c}/{base_n}: Fisher p " +
                  ", ".join(fmt_p(p) for p in t["per"].values()) + f" per method (uncorrected); pooled {pc}/{pn}: "
                  f"p {fmt_p(pp)}.")
    return "\n\n".join([replay_line(spec, study) if "regime_from" in study.extra else "",
                        contrasts_block(study, seeds).replace(
                            "paired seeds", f"paired seeds ({', '.join(sorted(seeds, key=_seed_key))})"),
                        count_line]).strip()


def format_block(study: Study) -> str:
    """Validation (the protocol's temperature) against training (T 1.0): how low the valid-action ratio went."""
    f = study.facts
    head = ["method", f"validation valid-action ratio, the start / lowest later check ({f['VT']})",
            f"training valid-action ratio, lowest iteration ({f['T']})", "run and iteration of that low",
            "training iterations below 0.5 (runs)"]
    rows = []
    for name, members in settings(study.runs).items():
        start = min(r.first("val/valid_action_ratio") for r in members)
        vmin = min(v for r in members for step, v in r.scalars.get("val/valid_action_ratio", []) if step > 0)
        lows = [(v, seed_of(r), s) for r in members for s, v in r.scalars.get("rollout/valid_action_ratio", [])]
        v, seed, step = min(lows)
        below = [sum(1 for _, x in r.scalars.get("rollout/valid_action_ratio", []) if x < 0.5) for r in members]
        rows.append([study.name(name), f"{start:.3f} / {vmin:.3f}", f"{v:.3f}", f"seed {seed}, iteration {step}",
                     f"{sum(below)} ({sum(b > 0 for b in below)})"])
    return _table(head, rows, ["---"] + ["---:"] * 4)


def types_block(study: Study) -> str:
    """Validation success per task type of each setting: start -> final with the t 95 % intervals over
    the seeds and the gain (:func:`arl.analysis.tables.type_cells`), then what a cell holds; a sentence when
    the runs logged no per-type success."""
    f = study.facts
    types, rows = type_cells(study.runs)
    if not types:
        return ("No success per task type: the runs logged no `val/success_rate/<type>` (it is logged when "
                f"the validation's {f['held_out']} are of two task types or more).")
    body = [[study.name(name), str(n), *cells] for name, (n, cells) in rows.items()]
    return (_table(["setting", "seeds", *types], body, ["---"] + ["---:"] * (len(types) + 1)) +
            f"\n\nEach cell: the task type's validation success (`val/success_rate/<type>`, of the "
            f"{f['val_episodes']} {f['held_out']} at {f['VT']}) at the start (iteration 0, the mean over the seeds) "
            f"-> at the last validation (iteration {f['iterations']}), its mean and t 95 % interval over the seeds, "
            f"and the gain (last minus start) with its t 95 % interval; uncorrected.")


def games_block(study: Study) -> str:
    """Game by game per setting, the seeds pooled: the start against the last validation on the same
    held-out games, the pairs gained and lost, the games up and down and the sign test over games
    (:func:`arl.analysis.games.games_by_setting`), then how to read it; a sentence when the archive holds
    no per-game episodes of both."""
    f = study.facts
    rows = games_by_setting(study.runs)
    if not rows:
        return ("No game-by-game test: the archive holds no per-game episodes (`val_episodes/iter<k>.jsonl`) of "
                "the start and a later validation.")
    noun = f.get("unit") or f["held_out"].removeprefix("held-out ")  # a mix's: its members' (levels)
    head = ["setting", "seeds", f"{noun} x seeds", "won at start", "won last", "gained", "lost", f"{noun} up / down",
            "sign test p"]
    body = [[study.name(name), str(g.seeds), str(g.pairs), f"{g.won_start} ({g.won_start / g.pairs:.3f})",
             f"{g.won_last} ({g.won_last / g.pairs:.3f})", str(g.gained), str(g.lost), f"{g.up} / {g.down}", fmt_p(g.p)]
            for name, g in rows.items()]
    return (_table(head, body, ["---"] + ["---:"] * 8) +
            f"\n\nThe start (iteration 0) against the last validation (iteration {f['iterations']}) on the same "
            f"{f['held_out']} at {f['VT']}, the seeds pooled; gained: a (seed, {noun[:-1]}) pair failed at the start "
            f"and won last, lost: the reverse; up: a {noun[:-1]} more seeds won last than at the start, down: fewer; "
            f"sign test p: exact, two-sided, on the {noun} up against those down, uncorrected. Every seed validates "
            f"on the same {noun}, so a {noun[:-1]}'s seeds are replicates of one unit, not independent pairs: the test "
            f"counts each {noun[:-1]} once. It speaks of these {noun}, not of the spread between seeds (the gain's "
            f"t interval does).")


def calibration_block(study: Study) -> str:
    """The study read as a calibration grid (:mod:`arl.analysis.calibration`): one row per setting, the best
    named, then what the columns measure."""
    f = study.facts
    return (render([replace(r, setting=study.name(r.setting)) for r in rows_of(study.runs)]) +
            f"\n\nGain over the start: `val/success_rate` at iteration {f['iterations']} minus at iteration 0, on "
            f"the {f['val_episodes']} {f['held_out']} at {f['VT']}; peak KL: the run's highest `actor/kl_loss`; valid "
            "actions: `rollout/valid_action_ratio` of the training episodes (at the training temperature) at the first "
            "and last iteration; "
            "same-outcome groups: `rollout/same_outcome_groups`, zero advantages: `adv/frac_zero`, means over the run "
            "(- where the runs predate the metric); env errors: training episodes lost to an environment error "
            "(`rollout/env_errors`, dropped from the batch), summed over the run; means over the seeds.")


def cost_block(study: Study) -> str:
    spec = study.extra["cost"]
    filt, other = spec["filtered"], spec["other"]
    groups = settings(study.runs)

    def perseed_of(setting, fn):
        return {seed_of(r): fn(r) for r in groups[setting]}

    def mean_of(tag):
        return lambda r: r.mean(tag)

    def span(setting, tag):
        vals = [v for r in groups[setting] for _, v in r.scalars.get(tag, [])]
        return f"{min(vals):g}-{max(vals):g}" if min(vals) != max(vals) else f"{min(vals):g}"

    it = ratio_values(study, other, filt, "iteration-seconds")
    roll = {s: perseed_of(other, mean_of("perf/rollout_s"))[s] / perseed_of(filt, mean_of("perf/rollout_s"))[s] for s in it}
    head = ["seed", f"{study.name(filt)} s an iteration", f"{study.name(other)} s an iteration", "ratio",
            "rollout-time ratio", f"{study.name(filt)} kept groups (mean)", f"{study.name(other)} kept groups"]
    rows = []
    f_it, o_it = perseed_of(filt, mean_of("perf/iteration_s")), perseed_of(other, mean_of("perf/iteration_s"))
    f_kept, o_kept = perseed_of(filt, mean_of("filter/kept_groups")), perseed_of(other, mean_of("filter/kept_groups"))
    for s in it:
        rows.append([s, f"{f_it[s]:.1f}", f"{o_it[s]:.1f}", f"{it[s]:.2f}", f"{roll[s]:.2f}", f"{f_kept[s]:.2f}",
                     f"{o_kept[s]:.2f}"])
    cfg = study.config(groups[other][0])["algo"]["filter"]
    va_max = max(v for r in groups[other] for _, v in r.scalars.get("rollout/valid_action_ratio", []))
    m, h = mean_ci(list(roll.values()))
    return (_table(head, rows, ["---:"] * len(head)) +
            f"\n\nRollout rounds an iteration: {study.name(filt)} {span(filt, 'filter/rounds')}, {study.name(other)} "
            f"{span(other, 'filter/rounds')}; groups filled from the last round: {study.name(filt)} "
            f"{span(filt, 'filter/filled_groups')} an iteration, {study.name(other)} {span(other, 'filter/filled_groups')}. "
            f"The {study.name(other)} filter acts as DAPO once the batch's training valid-action ratio reaches "
            f"{cfg.get('valid_ratio_threshold')}; the highest batch ratio of its runs was {va_max:.3f}, so it never "
            f"switched and kept every group: it ran as no filter. The rollout-time ratio is "
            f"{m:.2f} [{m - h:.2f}, {m + h:.2f}] (t 95 %, uncorrected).")


# --------------------------------------------------------------------------- blocks over the spec


def archives_block(spec: Spec, base: Path | None = None) -> str:
    """What each archive holds and lacks, one row per study; links relative to ``base`` (default: the results
    page's folder)."""
    head = ["archive", "runs", "reached their last iteration", "run records (`rl_results.json`)",
            "per-game episodes (`val_episodes/`)", "records of resumed runs", "notes"]
    rows = []
    for study in spec.studies.values():
        c = study.completeness
        notes = []
        if c["records"] == 0:
            notes.append("no run records: a finished run is known by its event files only")
        if c["episodes"] == 0:
            notes.append("no per-game episodes: no game-by-game test")
        if c["resumed"] or c["reloaded"]:
            n = len(c["resumed"]) + len(c["reloaded"])
            notes.append(f"{plural(n, 'record')} written by a run resumed from its checkpoint "
                         f"hold{'s' if n == 1 else ''} no `val_before_rl` (the start validation is in the event files)")
        for d in c["reloaded"]:
            r = next(r for r in study.runs if r.name == d.name)
            notes.append(f"the record of {study.name(r.group)} seed {seed_of(r)} was rewritten by a reload of the "
                         f"already finished run, which trained no iteration")
        if shared := _shared_names(study):
            notes.append(f"{len(shared)} run folders reuse the names of `{shared[0][1]}`'s runs for runs from another "
                         f"start (`model.init_from`): the folder name does not identify the run, its config does")
        resumed = len(c["resumed"]) + len(c["reloaded"])
        link = (str(study.report.relative_to(base)) if base is not None else _rel(study.report, spec)) if study.report else ""
        rows.append([f"[`{study.archive.parent.name}`]({link})",
                     str(c["runs"]), str(c["finished"]), str(c["records"]), str(c["episodes"]),
                     str(resumed) if c["records"] else "-", "; ".join(notes) or "-"])
    return _table(head, rows, ["---"] + ["---:"] * 5 + ["---"])


def _rel(path: Path, spec: Spec) -> str:
    """``path`` as the results page links it (the page sits in the spec's parent folder)."""
    return str(path.relative_to(spec.root.parent))


def default_job_block(spec: Spec) -> str:
    f = next(f for f in spec.findings if f["id"] == "default-job")
    line = _recorded_row(f, spec.alpha).lines[0]
    return f"{line.ours}; {line.interval}. Verdict: {line.verdict} ({f['source']})."
