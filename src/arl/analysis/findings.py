"""The results page's findings, computed from the run archives (``python src/report.py findings``).

A spec (``docs/results/findings.yaml``) names, per finding of the paper (and of ours beyond it),
the study and its archive, the measure, the paired contrast, the correction and what the paper's
sign is. This module loads it (:func:`load_spec`) and makes the findings table (:func:`findings_block`)
and README's headline table (:func:`headline_block`), a row per finding (:func:`finding_row`). The
archives are read with :mod:`arl.analysis.runs`'s readers (:mod:`arl.analysis.study`); the other
generated blocks are :mod:`arl.analysis.blocks`', and :mod:`arl.analysis.pages` writes them all into
the pages the spec lists, between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``, and checks them.

Statistics, per contrast (``"algo=sampo - algo=grpo"``, or a difference of differences): the
per-seed values over the seeds every term ran (:func:`arl.analysis.stats.contrast_values`), their
mean and Student-t 95 % interval (uncorrected, as :mod:`arl.analysis.report` prints it), and the paired
t-test's two-sided p, Holm-adjusted over the study's family of planned contrasts on the same
measure. The verdict rule is :func:`arl.analysis.contrasts.verdict`.
"""

from __future__ import annotations

import os
import re
import statistics
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import yaml

from arl.analysis.contrasts import Contrast, collapse_tests, fmt_p, paired_p, ratio_values, threshold_window, verdict
from arl.analysis.runs import read_config, read_overrides
from arl.analysis.stats import mean_ci, parse_contrast
from arl.analysis.study import MEASURE_KINDS, Measure, Study, measure_kind

# --------------------------------------------------------------------------- the spec


@dataclass
class Spec:
    path: Path
    data: dict

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def alpha(self) -> float:
        return float(self.data.get("alpha", 0.05))

    @cached_property
    def studies(self) -> dict[str, Study]:
        out = {}
        for key, s in (self.data.get("studies") or {}).items():
            known = {"title", "archive", "report", "command", "family", "measures"}
            out[key] = Study(key, s.get("title", key), self.root / s["archive"], s.get("command", ""),
                             self.data.get("names") or {}, self.root / s["report"] if s.get("report") else None,
                             list(s.get("family") or []), list(s.get("measures") or []),
                             {k: v for k, v in s.items() if k not in known})
        for study in out.values():
            study.peers = list(out.values())
        return out

    @property
    def findings(self) -> list[dict]:
        return list(self.data.get("findings") or [])

    @property
    def pages(self) -> dict[Path, list[str]]:
        return {_shown(self.root / p): list(blocks) for p, blocks in (self.data.get("pages") or {}).items()}

    @property
    def prose(self) -> dict[Path, str]:
        """Page -> the part of it whose prose is checked (``"all"`` or a section's heading line)."""
        return {_shown(self.root / p): str(part) for p, part in (self.data.get("prose") or {}).items()}

    def study(self, key: str) -> Study:
        if key not in self.studies:
            raise ValueError(f"{self.path}: no study {key!r}; studies: {', '.join(self.studies)}")
        return self.studies[key]


def _shown(path: Path) -> Path:
    """``path`` resolved, relative to the working folder when it lies under it (for messages)."""
    path = path.resolve()
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def load_spec(path: Path) -> Spec:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such spec: {path}")
    data = yaml.safe_load(path.read_text()) or {}
    spec = Spec(path, data)
    for f in spec.findings:
        for key in ("id", "finding", "paper", *(("why",) if f.get("kind") == "not-run" else ("expect",))):
            if key not in f:
                raise ValueError(f"{path}: finding {f.get('id', '?')!r} lacks {key!r}")
        for m in f.get("measures", []):
            try:
                measure_kind(m)
            except ValueError as err:
                raise ValueError(f"{path}: finding {f['id']!r}: {err}") from None
    return spec


# --------------------------------------------------------------------------- the findings table


@dataclass
class Line:
    """One measure of a finding: its result, interval and verdict, long (the findings table) and
    short (README's headline table)."""

    ours: str
    interval: str
    verdict: str
    ours_short: str = ""
    interval_short: str = ""
    words: tuple[str, ...] = ()  # the verdict's words, one per contrast
    cell: str = ""  # README's headline cell: the measure, each contrast's mean and interval
    names: tuple[str, ...] = ()  # the contrasts' names, one per word

    @property
    def definite(self) -> bool:
        """Whether some contrast got a verdict other than inconclusive (for or against)."""
        return any(not w.startswith(("inconclusive", "not tested", "not comparable")) for w in self.words)


@dataclass
class Row:
    finding: str
    paper: str
    lines: list[Line]
    notes: list[str]  # caveats and the scale, under the verdicts
    command: str
    archive: str
    headline: bool = False
    where: str = ""  # the environment and the regime (README's headline table)
    ours_finding: bool = False  # a finding of ours, beyond the paper
    envs: list[str] = field(default_factory=list)  # the environments, short (README's headline table)
    sections: list[tuple[str, str]] = field(default_factory=list)  # (name, heading of docs/results.md) per study

    @property
    def definite(self) -> bool:
        return any(ln.definite for ln in self.lines)

    def cells(self, columns: list[str], short: bool = False) -> list[str]:
        pick = (lambda ln, a, b: getattr(ln, b) or getattr(ln, a)) if short else (lambda ln, a, b: getattr(ln, a))
        values = {"finding": self.finding, "paper": self.paper,
                  "ours": "<br>".join(pick(ln, "ours", "ours_short") for ln in self.lines),
                  "interval": "<br>".join(pick(ln, "interval", "interval_short") for ln in self.lines),
                  "verdict": "<br>".join([ln.verdict for ln in self.lines] + (self.notes[:-1] if short else self.notes)),
                  "command": self.command, "archive": self.archive, "where": self.where}
        return [values[c] for c in columns]


def _contrast_items(spec: Spec, f: dict) -> list[tuple[Study, str]]:
    items = []
    for c in f.get("contrasts") or []:
        if isinstance(c, dict):
            items.append((spec.study(c["study"]), c["contrast"]))
        else:
            items.append((spec.study(f["study"]), c))
    return items


def archive_note(study: Study) -> str:
    """``"`arena_stage1` (28 runs; no run records, no per-game episodes)"``."""
    c = study.completeness
    lacks = []
    if c["records"] == 0:
        lacks.append("no run records")
    elif c["records"] < c["runs"]:
        lacks.append(f"{c['runs'] - c['records']} run records missing")
    if c["episodes"] == 0:
        lacks.append("no per-game episodes")
    if c["reloaded"]:
        lacks.append(f"{len(c['reloaded'])} record rewritten by a reload")
    if shared := _shared_names(study):
        lacks.append(f"{len(shared)} folder names reused from `{shared[0][1]}`")
    return f"`{study.archive.parent.name}` ({c['runs']} runs{'; ' + ', '.join(lacks) if lacks else ''})"


def _shared_names(study: Study) -> list[tuple[str, str]]:
    """(folder name, other archive) for this archive's run folders whose names another archive of
    the spec also uses, for a run of the same overrides with another start (``model.init_from``):
    neither the name nor the label (path-like keys are no part of either) tells the two apart. A
    name shared with a run of other overrides is not named: a run folder's name says only what
    varies within its archive (``<algo>_seed<k>``, scripts/rename_runs.py)."""
    out = []
    mine = {r.name: r for r in study.runs}
    for other in study.peers:
        if other is study or other.archive == study.archive or not other.archive.is_dir():
            continue
        theirs = {p.name for p in other.archive.iterdir() if p.is_dir()}
        for name in sorted(set(mine) & theirs):
            if read_overrides(study.archive / name) != read_overrides(other.archive / name):
                continue
            a = (study.config(mine[name]).get("model") or {}).get("init_from")
            b = (read_config(other.archive / name).get("model") or {}).get("init_from")
            if a != b and other.key < study.key:  # named on the later archive
                out.append((name, other.archive.parent.name))
    return out


def _label(measure: Measure, studies: list[Study]) -> str:
    labels = {measure.short.format(**s.facts) for s in studies}
    return labels.pop() if len(labels) == 1 else measure.short.split(" (")[0]


def _scale(studies: list[Study]) -> str:
    """``"at Stage 1 scale"``; a study of a mix also names its members and how each setting weighed them
    (:meth:`Study.schedule`): ``"at Curriculum scale (a mix of Sokoban 6x6 with 1 box and 7x7 with 2 boxes,
    10 turns each; the members' weights: ...)"``."""
    if not any(s.members for s in studies):
        return "at " + " and ".join(s.short for s in studies) + " scale"
    return "at " + " and ".join(f"{s.short} scale" + (f" ({s.facts['task_scale']}; {s.schedule()})" if s.members else "")
                                for s in studies)


def where(study: Study) -> str:
    """The environment and the regime of a study, for README's headline table: ``"Sokoban 6x6 with 1 box
    and 10 turns; 320 optimiser steps a run at lr 0.0003; 4 paired seeds; ...; 27 of 28 runs ended below
    their start"``, with the spec's ``regime`` note of the study where it has one."""
    parts = study.scale_parts()
    steps = parts["steps"].split(", ", 1)[1].split(" (")[0]
    first = parts["task"].split(" ")[0]
    # the study's name leads; where it begins with the task's first word it stands for it
    task = (study.short + parts["task"][len(first):] if study.short.split(" ")[0].lower() == first.lower()
            else f"{study.short}: {parts['task']}")
    return "; ".join([task, f"{steps} at lr {study.facts['lr']}",
                      parts["seeds"].split(" (")[0], *([study.extra["regime"]] if study.extra.get("regime") else []),
                      parts["below"]])


def _short_env(task_scale: str) -> str:
    """``"Sokoban 6x6 with 1 box and 10 turns"`` -> ``"Sokoban 6x6 with 1 box"``; ``"ALFWorld (task types
    ...) with 20 turns"`` -> ``"ALFWorld"``: the environment without its turn budget and description."""
    text = task_scale.split(" (")[0].split(" and ")[0].strip()
    return re.sub(r" with \d+ turns$", "", text)


def env_name(study: Study) -> str:
    """The study's environment, short, for README's headline table (:func:`_short_env` of its scale; a mix's
    members without their turns)."""
    return study.facts.get("env_short") or _short_env(study.facts["task_scale"])


def episodes_note(study: Study, a: str, b: str, prefix: bool = False) -> str:
    """``"SAMPO played 1.77 times GRPO's training episodes (113 against 64 an iteration)"``: the mean over
    each setting's runs of ``rollout/episodes`` (an iteration's episodes, re-rolled rounds included)."""
    per = study.per_setting(lambda r: r.mean("rollout/episodes"))
    ea, eb = statistics.fmean(per[a]), statistics.fmean(per[b])
    return (f"{study.short + ': ' if prefix else ''}{study.name(a)} played {ea / eb:.2f} times {study.name(b)}'s "
            f"training episodes ({ea:.0f} against {eb:.0f} an iteration)")


def _head(measure: str, label: str, ours: bool) -> str:
    """The verdict's name of a measure: ``"final success"``; for a finding of the paper, whether it is
    the paper's metric: ``"final success (the paper's metric)"``, ``"training success (ours, not the
    paper's metric)"``."""
    head = label.split(" (")[0]
    paper = measure_kind(measure).paper
    if ours or paper is None:
        return head
    return f"{head} ({'the paper' if paper else 'ours, not the paper'}'s metric)"


def _start_note(studies: list[Study], short: bool = False, measure: Measure = MEASURE_KINDS["gain"]) -> str:
    """``"; the start 0.432-0.473 over seeds 5, 6, 7, 8"``: where each study's start policy scored
    at iteration 0 over its sampling seeds (the same weights), on ``measure``'s scale, to read a gain against."""
    parts = []
    for s in studies:
        lo, hi = s.start_range(tag=measure.start_tag, scale=measure.start_scale)
        span = f"{lo:.3f}" if f"{lo:.3f}" == f"{hi:.3f}" else f"{lo:.3f}-{hi:.3f}"
        parts.append(f"{s.short + ' ' if len(studies) > 1 else ''}{span}" +
                     ("" if short else f" over seeds {s.facts['seeds']}"))
    return "; the start " + ", ".join(parts)


def _verdict_words(spec: Spec, f: dict, m: str, c) -> tuple[str, str]:
    """The verdict on contrast ``c`` of measure ``m`` of finding ``f``, and the note on the paper's
    effect size when the finding names one (``paper_effect``)."""
    effect_p, effect_note = None, ""
    eff = f.get("paper_effect")
    if eff and eff.get("measure", m) == m:
        base = statistics.fmean(c.study.by_setting(m)[eff["of"]].values())
        size = float(eff["relative"]) * base
        raw = paired_p(c.values, null=size)
        effect_p = min(1.0, raw * c.family_size)
        effect_note = (f"; the paper's size, {size:+.3f} ({100 * eff['relative']:.1f} % of "
                       f"{c.study.name(eff['of'])}'s {base:.3f}): p {fmt_p(raw)}, Bonferroni {fmt_p(effect_p)}")
    word = verdict(c.p_holm, c.mean, f["expect"], alpha=spec.alpha, ours=bool(f.get("ours")), effect_p=effect_p)
    if word == "inconclusive" and c.p < spec.alpha:
        word += " (uncorrected only)"
    return word, effect_note


def finding_row(spec: Spec, f: dict) -> Row:
    """The findings table's row of one finding of the spec."""
    kind = f.get("kind", "contrast")
    if kind == "recorded":
        return _recorded_row(f, spec.alpha)
    if kind == "collapse-count":
        return _collapse_row(spec, f, spec.alpha)
    if kind == "ratio":
        return _ratio_row(spec, f, spec.alpha)
    if kind == "not-run":
        return _not_run_row(f)
    items = _contrast_items(spec, f)
    studies = list(dict.fromkeys(s for s, _ in items))
    multi = len(studies) > 1
    out = []
    for m in f["measures"]:
        # a setting's own value is a finding only where it means something against 0 (a gain), as in
        # the contrasts block (Study.family_for)
        kept = [(s, c) for s, c in items if len(parse_contrast(c)) > 1 or measure_kind(m).against_zero]
        if not kept:
            continue
        contrasts = [s.contrast(c, m) for s, c in kept]
        label = _label(measure_kind(m), studies)
        names = [f"{c.study.short} {c.name}" if multi else c.name for c in contrasts]
        ours = f"{label}: " + ", ".join(f"{n} {c.mean:+.3f} ({c.above}/{len(c.values)} above 0)"
                                         for n, c in zip(names, contrasts))
        ours_short = f"{label}: " + ", ".join(f"{n} {c.mean:+.3f}" for n, c in zip(names, contrasts))
        if measure_kind(m).against_zero:  # a gain: beside it, the start's spread over the sampling seeds
            ours += _start_note(studies, measure=measure_kind(m))
            ours_short += _start_note(studies, short=True, measure=measure_kind(m))
        lo_hi, holms, interval = _interval_cell(contrasts)
        words = [_verdict_words(spec, f, m, c) for c in contrasts]
        head = _head(m, label, bool(f.get("ours")))
        if len({w for w, _ in words}) == 1:
            both = {2: " (both)"}.get(len(words), " (all)" if len(words) > 2 else "")
            text = f"{head}: **{words[0][0]}**{both}" + "".join(n for _, n in words)
        else:
            text = f"{head}: " + "; ".join(f"{n} **{w}**{note}" for n, (w, note) in zip(names, words))
        cell = f"{label}: " + "; ".join(f"{n} {c.mean:+.3f} [{c.interval[0]:+.3f}, {c.interval[1]:+.3f}]"
                                          for n, c in zip(names, contrasts))
        out.append(Line(ours, interval, text, ours_short, f"{lo_hi}; Holm p {holms}", tuple(w for w, _ in words), cell,
                        tuple(names)))
    played = [episodes_note(s, *f["episodes"], prefix=multi) for s in studies] if f.get("episodes") else []
    caveat = "; ".join([*([f["caveat"]] if f.get("caveat") else []), *played])
    notes = ([f"({caveat})"] if caveat else []) + [_scale(studies)]
    return Row(f["finding"], f["paper"], out, notes, " / ".join(f"`{s.command}`" for s in studies),
               "; ".join(archive_note(s) for s in studies), bool(f.get("headline")),
               "<br>".join(where(s) for s in studies), bool(f.get("ours")), [env_name(s) for s in studies],
               [(s.short, s.extra.get("section", "")) for s in studies])


def _interval_cell(contrasts: list[Contrast]) -> tuple[str, str, str]:
    """(the intervals, the Holm p's, the findings table's interval cell) of a finding's contrasts on
    one measure: ``"[-0.388, -0.029]"``, ``"0.038"``, ``"[-0.388, -0.029] (t 95 %, 3 paired seeds,
    uncorrected); p 0.038, Holm 0.038 over 1 contrast"`` (seeds, not paired seeds, when every
    contrast is one setting's own value)."""
    lo_hi = ", ".join(f"[{lo:+.3f}, {hi:+.3f}]" for lo, hi in (c.interval for c in contrasts))
    seeds = "/".join(map(str, sorted({len(c.values) for c in contrasts})))
    fams = list(dict.fromkeys(c.study.family_label(c.measure) for c in contrasts))
    if len(fams) > 1 and all(f.endswith(("contrasts", "contrast")) for f in fams):
        sizes = sorted({c.family_size for c in contrasts})
        fams = [f"{'/'.join(map(str, sizes))} contrasts"]
    holms = ", ".join(fmt_p(c.p_holm) for c in contrasts)
    paired = "paired " if any(len(parse_contrast(c.spec)) > 1 for c in contrasts) else ""
    return lo_hi, holms, (f"{lo_hi} (t 95 %, {seeds} {paired}seeds, uncorrected); p "
                          f"{', '.join(fmt_p(c.p) for c in contrasts)}, Holm {holms} over {'; '.join(fams)}")


def _recorded_row(f: dict, alpha: float) -> Row:
    """A finding from values recorded when the runs were made (no archive): mean and t interval."""
    seeds = list(f["values"])
    values = [float(f["values"][s]) for s in seeds]
    m, half = mean_ci(values)
    p = paired_p(values)
    # the spec may say that the recorded values cannot test the finding (``verdict: not comparable``,
    # with ``why``): the test against 0 is then shown, and not read as a verdict
    word = f.get("verdict") or verdict(p, m, f["expect"], alpha, bool(f.get("ours")))
    label = f.get("label", f["measure"])
    line = Line(f"{f['measure']}: " + ", ".join(f"seed {s} {v:+.3f}" for s, v in zip(seeds, values)) + f"; mean {m:+.3f}",
                f"[{m - half:+.3f}, {m + half:+.3f}] (t 95 %, {len(values)} seeds); p {fmt_p(p)}, no correction (a "
                f"family of one)", f"**{word}**" + (f": {f['why']}" if f.get("why") else ""), f"{label}: {m:+.3f}",
                f"[{m - half:+.3f}, {m + half:+.3f}]", (word,), f"{label}: {m:+.3f} [{m - half:+.3f}, {m + half:+.3f}]")
    return Row(f["finding"], f["paper"], [line], [f"({f['source']})", "at CPU scale"], f"`{f['command']}`",
               "none (recorded values)", bool(f.get("headline")), f.get("where", ""), bool(f.get("ours")),
               [_short_env(f.get("where", "").split(";")[0])], [(f.get("section", "").split(":")[0], f.get("section", ""))])


def _not_run_row(f: dict) -> Row:
    """A finding of the paper that no run here tested (``kind: not-run``): why, and what it would take."""
    line = Line(f"not run: {f['why']}", "-", "**not tested**", "not run", "-", ("not tested",), "not run")
    return Row(f["finding"], f["paper"], [line], [], f"`{f['command']}`", "none (not run)", bool(f.get("headline")),
               f.get("where", ""), bool(f.get("ours")), [_short_env(f.get("where", "").split(";")[0])],
               [(f.get("section", "").split(":")[0], f.get("section", ""))])


def _collapse_row(spec: Spec, f: dict, alpha: float) -> Row:
    study = spec.study(f["study"])
    t = collapse_tests(study)
    counts = t["counts"]
    base_c, base_n = counts[t["baseline"]]
    names = ", ".join(f"{study.name(x)} {counts[x][0]}/{counts[x][1]}" for x in t["tolerant"])
    base = f"{study.name(t['baseline'])} {base_c}/{base_n}"
    pc, pn, pp = t["pooled"]
    per = ", ".join(fmt_p(p) for p in t["per"].values())
    holms = ", ".join(fmt_p(p) for p in t["holm"].values())
    words = [verdict(p, 1.0, "above", alpha) for p in t["holm"].values()]
    lo, hi = threshold_window(study)
    tol = "/".join(study.name(x) for x in t["tolerant"])
    line = Line(f"runs with a detector event (as run: KL > {study.facts['kl_threshold']}, grad-norm spike or "
                f"valid-action drop): {names}, {base}",
                f"Fisher exact, two-sided: p {per} per method, uncorrected; Holm {holms}; the {len(t['tolerant'])} "
                f"methods pooled ({pc}/{pn} against {base_c}/{base_n}): p {fmt_p(pp)}, pooling being a choice",
                f"**{' / '.join(dict.fromkeys(words))}** as a count (Holm); the per-method p holds only for KL "
                f"thresholds from {lo:.4f} (every {tol} run, no {study.name(t['baseline'])} run) up to {hi:.4f}",
                f"detector events: {names}, {base}",
                f"Fisher p {per} per method (Holm {holms}); pooled {fmt_p(pp)}, a choice of grouping", tuple(words),
                f"runs with a collapse event: {names}, {base} (Fisher p {per}, Holm {holms})")
    notes = ([f"({f['caveat']})"] if f.get("caveat") else []) + [_scale([study])]
    return Row(f["finding"], f["paper"], [line], notes, f"`{study.command}`", archive_note(study),
               bool(f.get("headline")), where(study), bool(f.get("ours")), [env_name(study)],
               [(study.short, study.extra.get("section", ""))])


def _ratio_row(spec: Spec, f: dict, alpha: float) -> Row:
    study = spec.study(f["study"])
    out = []
    for m in f["measures"]:
        measure = measure_kind(m)
        for c in f["contrasts"]:
            num, den = [x.strip() for x in c.split(" / ")]
            values = list(ratio_values(study, num, den, m).values())
            mean, half = mean_ci(values)
            p = paired_p(values, null=1.0)
            below = sum(v < 1 for v in values)
            expect = "below" if f["expect"] == "below-one" else "above"
            name = f"{measure.short}, {study.name(num)} / {study.name(den)}"
            word = verdict(p, mean - 1.0, expect, alpha, bool(f.get('ours')))
            out.append(Line(f"{name}: {mean:.2f} ({below}/{len(values)} seeds below 1)",
                            f"[{mean - half:.2f}, {mean + half:.2f}] (t 95 % of the per-seed ratios, {len(values)} "
                            f"paired seeds); p {fmt_p(p)} against 1, no correction",
                            f"**{word}**", f"{name}: {mean:.2f}", f"[{mean - half:.2f}, {mean + half:.2f}]", (word,),
                            f"{name}: {mean:.2f} [{mean - half:.2f}, {mean + half:.2f}]"))
    notes = ([f"({f['caveat']})"] if f.get("caveat") else []) + [_scale([study])]
    return Row(f["finding"], f["paper"], out, notes, f"`{study.command}`", archive_note(study),
               bool(f.get("headline")), where(study), bool(f.get("ours")), [env_name(study)],
               [(study.short, study.extra.get("section", ""))])


FINDINGS_COLUMNS = ["finding", "paper", "ours", "interval", "verdict", "command", "archive"]


FINDINGS_HEAD = ["finding", "the paper", "ours (measure: contrast, mean)", "interval (over what; correction)",
                 "verdict (rule: findings.yaml)", "command", "archive"]


def _table(head: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    align = align or ["---"] * len(head)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def findings_block(spec: Spec) -> str:
    """The findings table, then the definition of every measure it uses per study and each study's scale."""
    rows = [finding_row(spec, f) for f in spec.findings]
    table = _table(FINDINGS_HEAD, [r.cells(FINDINGS_COLUMNS) for r in rows])
    used: dict[str, list[str]] = {}
    for f in spec.findings:
        kind = f.get("kind", "contrast")
        studies = ([s for s, _ in _contrast_items(spec, f)] if kind == "contrast" else
                   [spec.study(f["study"])] if kind == "ratio" else [])
        for s in studies:
            used.setdefault(s.key, []).extend(f["measures"])
    measures = [f"- {spec.studies[k].short}: " + "; ".join(spec.studies[k].fill(measure_kind(m).describe)
                                                          for m in dict.fromkeys(ms)) + "."
                for k, ms in used.items()]
    scales = (f"Scales: the paper's, {spec.data['paper_scale']}; " if spec.data.get("paper_scale") else "Scales: ") + \
        "each study's (model, parameters, optimiser steps, training episodes, validation, the start's spread over " \
        "the sampling seeds) opens its section (the `<study>-scale` block)."
    return "\n".join([table, "", "Measures, from the runs' configs:", *measures, "", scales])


def headline_rows(spec: Spec) -> list[Row]:
    """The findings README shows: every finding of the paper and every finding of ours."""
    return [finding_row(spec, f) for f in spec.findings]


def one_word(words: tuple[str, ...], names: list[str] | None = None) -> str:
    """A line's verdict in a word: ``"inconclusive"`` when every contrast got it (``"(uncorrected only)"``
    dropped: README's table leaves the detail to the findings table), else each contrast's word."""
    plain = [w.split(" (")[0] for w in words]
    if len(set(plain)) == 1:
        return plain[0]
    return "; ".join(f"{n}: {w}" for n, w in zip(names or [], plain)) if names else " / ".join(plain)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lstrip("#").strip().lower())
    return text.replace(" ", "-")


def section_link(spec: Spec, name: str, section: str) -> str:
    """``[<name>](docs/results.md#<anchor>)`` for the heading of the findings page that begins with ``section``
    (the first page of the spec that has a findings block); ValueError when no heading does."""
    page = next(p for p, blocks in spec.pages.items() if "findings" in blocks)
    readme = next((p for p, blocks in spec.pages.items() if "headline" in blocks), page)
    headings = [ln for ln in page.read_text().splitlines() if ln.startswith("#")]
    found = [h for h in headings if h.lstrip("#").strip().startswith(section)]
    if not found:
        raise ValueError(f"no heading of {page} begins with {section!r} (a study's or finding's `section`)")
    target = os.path.relpath(page.resolve(), readme.resolve().parent)
    return f"[{name}]({target}#{github_anchor(found[0])})"


def headline_block(spec: Spec) -> str:
    """README's table: a row per finding, the paper's and ours, each with its environment, the contrast on
    its first measure (the paper's metric for the paper's findings) with its t 95 % interval, the verdict
    in a word and a link to its section of the results page; then the scale the verdicts hold at."""
    out = []
    for r in headline_rows(spec):
        line = r.lines[0]
        links = ", ".join(section_link(spec, n, x) for n, x in dict.fromkeys(r.sections) if x) or "-"
        verdict = one_word(line.words, list(line.names) if len(line.names) == len(line.words) else None)
        out.append([r.finding, ", ".join(dict.fromkeys(e for e in r.envs if e)) or "-", line.cell,
                    f"**{verdict}**", links])
    table = _table(["claim", "environment", "measure: contrast, mean [t 95 %]", "verdict", "details"], out)
    studies = list(spec.studies.values())
    params = sorted({s.parameters for s in studies if s.parameters})
    steps = [v for s in studies for v in s.optimizer_steps().values() if v is not None]
    envs = list(dict.fromkeys(word for s in studies for word in (s.facts["env_words"].split(", ") if "env_words" in s.facts
                                                                 else [s.facts["task_scale"].split(" (")[0].split(" with")[0].split(" ")[0]])))
    span = (lambda lo, hi: f"{lo}" if lo == hi else f"{lo}-{hi}")
    models = sorted({s.facts["model"] for s in studies})
    its = [int(v) for s in studies for v in s.facts["iterations"].split(" / ") if v.isdigit()]
    text = (f"The verdicts hold at this project's scale only: the {' / '.join(models)} model"
            + (f" ({span(f'{params[0] / 1e6:.2f}', f'{params[-1] / 1e6:.2f}')}M parameters)" if params else "")
            + (f", {span(min(its), max(its))} iterations a run" if its else "")
            + (f", {span(f'{min(steps):.0f}', f'{max(steps):.0f}')} optimiser steps a run" if steps else "") + ", on "
            f"{', '.join(envs[:-1]) + ' and ' + envs[-1] if len(envs) > 1 else envs[0]}"
            + (f"; the paper's scale: {spec.data['paper_scale']}" if spec.data.get("paper_scale") else "") + ".")
    return table + "\n\n" + text
