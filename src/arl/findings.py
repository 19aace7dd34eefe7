"""The results page's findings, computed from the run archives (``python src/report.py findings``).

A spec (``docs/results/findings.yaml``) names, per finding of the paper (and of ours beyond it),
the study and its archive, the measure, the paired contrast, the correction and what the paper's
sign is. This module reads the archives with :mod:`arl.report`'s readers and writes the generated
blocks of the pages the spec lists: the text between ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->``. :func:`check_pages` regenerates every block and names each number on a
page that differs from what the archives give, so a page cannot drift from its runs.

Statistics, per contrast (``"algo=sampo - algo=grpo"``, or a difference of differences): the
per-seed values over the seeds every term ran (:func:`arl.utils.stats.contrast_values`), their
mean and Student-t 95 % interval (uncorrected, as :mod:`arl.report` prints it), and the paired
t-test's two-sided p, Holm-adjusted over the study's family of planned contrasts on the same
measure. The verdict rule is :func:`verdict`.

Blocks (``NAME``): ``findings`` (the table), ``headline`` (README's short table), ``archives``
(what each archive holds and lacks), ``default-job``, and per study ``<study>-setup``,
``<study>-settings``, ``<study>-contrasts``, ``<study>-threshold`` (the collapse detector's KL
threshold swept over the archived curves), ``<study>-collapses``, ``<study>-without-seed-1``,
``<study>-format``, ``<study>-cost``, ``<study>-types`` (success per task type, start -> final) and
``<study>-games`` (game by game, the start against the last validation, McNemar).

A study's runs may be of any env: :data:`ENV_KINDS` says, per ``env.name`` of the runs' configs,
how the page describes the task (Sokoban's room and boxes, math_tool's templates, ALFWorld's task
types) and what validation plays (held-out levels, problems, games).
"""

from __future__ import annotations

import difflib
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable

from arl.report import (
    MEASURES,
    event_files,
    Run,
    collapse_cell,
    find_runs,
    format_mean_ci,
    games_by_setting,
    kl_tag,
    read_config,
    read_overrides,
    seed_of,
    settings,
    type_cells,
    values_by_setting,
)
from arl.utils.stats import _seed_key, contrast_values, fisher_exact, mean_ci, parse_contrast

# --------------------------------------------------------------------------- statistics


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_p_two_sided(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def paired_p(values: list[float], null: float = 0.0) -> float:
    """Two-sided p of the one-sample t-test of the values' mean against ``null`` (paired
    differences against 0); 1 for fewer than two values, 0 when they are equal and off ``null``."""
    if len(values) < 2:
        return 1.0
    m, sd = statistics.fmean(values), statistics.stdev(values)
    if sd == 0.0:
        return 1.0 if m == null else 0.0
    return t_p_two_sided((m - null) / (sd / math.sqrt(len(values))), len(values) - 1)


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjustment of the p-values (the family-wise error rate), in their order."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [1.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def plural(n: int | str, word: str) -> str:
    """``"1 box"``, ``"2 boxes"``, ``"4 seeds"``."""
    one = str(n) == "1"
    return f"{n} {word}" if one else f"{n} {word}es" if word.endswith(("x", "s")) else f"{n} {word}s"


def fmt_p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


# --------------------------------------------------------------------------- measures


@dataclass(frozen=True)
class Measure:
    """What a paired contrast compares per run, and how the page names it."""

    short: str  # the cell's name, with {T} (training) or {VT} (validation) filled from the configs
    value: Callable[[Run], float | None]
    describe: str  # the full definition, with the config fields of :meth:`Study.facts`
    # whether one setting's own value means something against 0 (a gain does; a success rate does not),
    # so that a contrast of one setting ("algo=sampo") belongs to this measure's family
    against_zero: bool = False


def _window_mean(tag: str, first: int, last: int) -> Callable[[Run], float | None]:
    def value(run: Run) -> float | None:
        s = [v for step, v in run.scalars.get(tag, []) if first <= step <= last and math.isfinite(v)]
        return statistics.fmean(s) if s else None

    return value


MEASURE_KINDS: dict[str, Measure] = {
    "final": Measure("final success (T {val_T})", MEASURES["final validation success"],
                     "final validation success: `val/success_rate` at iteration {iterations}, {val_episodes} "
                     "{held_out} sampled at {VT}"),
    "gain": Measure("gain over the start (T {val_T})", MEASURES["gain over the start"],
                    "gain over the start: `val/success_rate` at iteration {iterations} minus at iteration 0 (the "
                    "start policy), the same {val_episodes} {held_out} sampled at {VT}", against_zero=True),
    "training": Measure("training success ({T})", MEASURES["mean training success over the run"],
                        "training success: `rollout/success_rate` (every episode an iteration played, re-rolled "
                        "rounds included) at {T}, mean over the {iterations} iterations"),
    "training-valid": Measure("training valid-action ratio ({T})", MEASURES["mean training valid-action ratio over the run"],
                              "training valid-action ratio: `rollout/valid_action_ratio` at {T}, mean over the "
                              "{iterations} iterations"),
    "training-early": Measure("training success, iterations 2-6 ({T})", _window_mean("rollout/success_rate", 2, 6),
                              "early training success: `rollout/success_rate` at {T}, mean over iterations 2-6 "
                              "(the rollouts after the first five updates; iteration 1 plays the start policy)"),
    "iteration-seconds": Measure("seconds an iteration", lambda r: r.mean("perf/iteration_s"),
                                 "seconds an iteration: `perf/iteration_s`, mean over the run (two runs side by side)"),
}


# --------------------------------------------------------------------------- studies and archives


def _holds_scalars(events: Path, prefix: str = "rollout/") -> bool:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
    acc.Reload()
    return any(t.startswith(prefix) for t in acc.Tags().get("scalars", []))


@dataclass(eq=False)  # identity: a study is hashed and compared as itself
class Study:
    key: str
    title: str
    archive: Path
    command: str
    names: dict[str, str]
    report: Path | None = None
    family: list[str] = field(default_factory=list)
    measures: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    peers: list["Study"] = field(default_factory=list, repr=False)  # the spec's studies, this one among them

    @property
    def short(self) -> str:
        return self.title.split(":")[0]

    @cached_property
    def runs(self) -> list[Run]:
        return [r for r in find_runs(self.archive) if not r.bc_only]

    def config(self, run: Run) -> dict:
        return self._configs[run.name]

    @cached_property
    def _configs(self) -> dict[str, dict]:
        return {r.name: read_config(self.archive / r.name) for r in self.runs}

    def select(self, seeds: set[str] | None = None) -> list[Run]:
        return [r for r in self.runs if seeds is None or seed_of(r) in seeds]

    def name(self, setting: str) -> str:
        return self.names.get(setting, setting)

    def contrast_name(self, spec: str) -> str:
        terms = parse_contrast(spec)
        out = ""
        for i, (sign, name) in enumerate(terms):
            out += ("" if sign > 0 else "-") if i == 0 else (" + " if sign > 0 else " - ")
            out += self.name(name)
        return out

    def config_values(self, path: str) -> list:
        """The distinct values at ``a.b.c`` of the runs' configs, in the runs' order (None where a
        config lacks it; lists kept as lists)."""
        values: dict[str, object] = {}
        for r in self.runs:
            node = self.config(r)
            for key in path.split("."):
                node = node.get(key) if isinstance(node, dict) else None
            values.setdefault(str(node), node)
        return list(values.values())

    def _shared(self, path: str) -> str:
        """The config value at ``a.b.c`` every run shares, or its values joined by `` / `` when they differ."""
        return " / ".join(str(v) for v in self.config_values(path))

    @cached_property
    def facts(self) -> dict[str, str]:
        """What the runs' configs say: temperatures, sizes, the regime (every run the same, or each
        value), and the env's description (:data:`ENV_KINDS`: ``task``, ``task_scale``, ``held_out``)."""
        g = self._shared
        vt = f"T {g('rollout.val_temperature')}, top-p {g('rollout.val_top_p')}, top-k {_top_k(g('rollout.val_top_k'))}"
        seeds = sorted({seed_of(r) for r in self.runs}, key=_seed_key)
        return {
            "T": f"T {g('rollout.temperature')}", "VT": vt, "val_T": g("rollout.val_temperature"),
            "iterations": g("rl.iterations"), "val_episodes": g("rollout.val_episodes"),
            "val_every": g("rl.val_every"), "lr": g("rl.optimizer.lr"),
            "mini_batches": g("rl.mini_batches"), "groups": g("rollout.groups_per_step"),
            "group_size": g("rollout.group_size"), "model": g("model.name"), "env": g("env.name"),
            "turns": g("env.max_turns"), "seeds": ", ".join(seeds),
            "n_seeds": str(len(seeds)), "start": _start_name(g("model.init_from")),
            "kl_threshold": g("callbacks.collapse.kl_threshold"),
            **ENV_KINDS.get(g("env.name"), _any_env)(self),
        }

    def fill(self, text: str) -> str:
        return text.format(**self.facts)

    @property
    def scale(self) -> str:
        """``"tiny model, Sokoban 6x6 with 1 box and 10 turns, 40 iterations at lr ..., 4 paired seeds"``."""
        f = self.facts
        seeds = plural(f["n_seeds"], "paired seed") if f["n_seeds"] != "1" else "1 seed"
        return (f"{f['model']} model, {f['task_scale']}, "
                f"{f['iterations']} iterations at lr {f['lr']} x {f['mini_batches']} mini-batches a rollout, {seeds}")

    def by_setting(self, measure: str, seeds: set[str] | None = None) -> dict[str, dict[str, float]]:
        """Setting -> {seed: the measure} over the runs of ``seeds`` (all when None)."""
        key = (measure, frozenset(seeds) if seeds is not None else None)
        if key not in self._values:
            self._values[key] = values_by_setting(self.select(seeds), MEASURE_KINDS[measure].value)
        return self._values[key]

    @cached_property
    def _values(self) -> dict:
        return {}

    def family_for(self, measure: str) -> list[str]:
        """The planned contrasts that apply to ``measure``: all of them, except that a contrast of one
        setting belongs only to a measure whose value means something against 0 (a gain)."""
        return [c for c in self.family if len(parse_contrast(c)) > 1 or MEASURE_KINDS[measure].against_zero]

    def contrast(self, spec: str, measure: str, seeds: set[str] | None = None) -> "Contrast":
        per_seed = contrast_values(parse_contrast(spec), self.by_setting(measure, seeds))
        family = list(dict.fromkeys([*self.family_for(measure), spec]))
        ps = [paired_p(list(contrast_values(parse_contrast(c), self.by_setting(measure, seeds)).values()))
              for c in family]
        return Contrast(self, spec, measure, per_seed, holm(ps)[family.index(spec)], len(family))

    @cached_property
    def completeness(self) -> dict:
        """What the archive holds per run: results records, per-game episodes, resumed / reloaded records."""
        dirs = [self.archive / r.name for r in self.runs]
        records = [d for d in dirs if (d / "rl_results.json").exists()]
        resumed, reloaded = [], []
        for d in records:
            rec = json.loads((d / "rl_results.json").read_text())
            if "resumed_from" in rec:
                files = event_files(d / "tensorboard" / "rl")
                # a reload of a finished run writes its record again and trains nothing: its newest
                # event file holds no rollout
                (reloaded if files and not _holds_scalars(files[-1]) else resumed).append(d)
        return {"runs": len(dirs), "records": len(records), "episodes": sum((d / "val_episodes").is_dir() for d in dirs),
                "resumed": resumed, "reloaded": reloaded,
                "finished": sum(_last_step(r, "rollout/success_rate") == (self.config(r).get("rl") or {}).get("iterations")
                                for r in self.runs)}


# --------------------------------------------------------------------------- envs
# Each env kind describes a study's task from its runs' configs: ``task`` (the setup block's words),
# ``task_scale`` (the scale line's) and ``held_out`` (what a validation plays).


def _listed(values: list, every: str) -> str:
    """Config lists as the page names them: ``"a, b"``; ``every`` for null (all); the runs' values
    joined by `` / `` where they differ."""
    return " / ".join(every if v is None else ", ".join(map(str, v)) if isinstance(v, list) else str(v)
                      for v in values)


def _sokoban(study: Study) -> dict[str, str]:
    """Sokoban: the room, the boxes and the turns; validation on held-out levels."""
    g = study._shared
    room = g("env.kwargs.dim_room").strip("[]").replace(", ", "x")
    boxes, turns = plural(g("env.kwargs.num_boxes"), "box"), g("env.max_turns")
    return {"room": room, "boxes": g("env.kwargs.num_boxes"), "task": f"Sokoban {room}, {boxes}, {turns} turns",
            "task_scale": f"Sokoban {room} with {boxes} and {turns} turns", "held_out": "held-out levels"}


def _math_tool(study: Study) -> dict[str, str]:
    """math_tool: the generated problems' templates (``env.kwargs.templates``, null: every one) or
    the dataset's file (``env.kwargs.data_path``), and the turns; validation on held-out problems."""
    templates, data = study.config_values("env.kwargs.templates"), study._shared("env.kwargs.data_path")
    if data != "None":
        what = f"problems of `{Path(data).name}`"
    elif templates == [None]:
        what = "generated problems of every template"
    else:
        what = f"generated problems of templates {_listed(templates, 'every template')}"
    turns = study._shared("env.max_turns")
    return {"task": f"math_tool, {what}, {turns} turns", "task_scale": f"math_tool ({what}) with {turns} turns",
            "held_out": "held-out problems"}


def _alfworld(study: Study) -> dict[str, str]:
    """ALFWorld: the task types (``env.kwargs.task_types``, null: all six) and the turns;
    validation on held-out games."""
    types, turns = study.config_values("env.kwargs.task_types"), study._shared("env.max_turns")
    if types == [None]:
        task, what = f"ALFWorld, all six task types, {turns} turns", "all six task types"
    else:
        what = f"task types {_listed(types, 'all six')}"
        task = f"ALFWorld {what}, {turns} turns"
    return {"task": task, "task_scale": f"ALFWorld ({what}) with {turns} turns", "held_out": "held-out games"}


def _any_env(study: Study) -> dict[str, str]:
    """An env without a kind of its own: its name and turns; validation on held-out games."""
    name, turns = study._shared("env.name"), study._shared("env.max_turns")
    return {"task": f"{name}, {turns} turns", "task_scale": f"{name} with {turns} turns", "held_out": "held-out games"}


#: ``env.name`` -> the description of a study's task (others: :func:`_any_env`)
ENV_KINDS: dict[str, Callable[[Study], dict[str, str]]] = {
    "sokoban": _sokoban, "math_tool": _math_tool, "alfworld": _alfworld,
}


def _top_k(value: str) -> str:
    """A config's top-k as the page says it: ``off`` for 0 or -1 (no top-k cut), else the number."""
    return "off" if value in ("0", "-1") else value


def _start_name(init_from: str) -> str:
    """A BC start's folder as the study scripts name it: ``study/bc_start_long`` for
    ``<checkout>/logs/study/bc_start_long/bc_policy_hf``."""
    path = init_from.split("/logs/", 1)[-1]
    return path.removesuffix("/bc_policy_hf")


def _last_step(run: Run, tag: str) -> int | None:
    s = run.scalars.get(tag)
    return s[-1][0] if s else None


@dataclass
class Contrast:
    study: Study
    spec: str
    measure: str
    per_seed: dict[str, float]
    p_holm: float
    family_size: int

    @property
    def values(self) -> list[float]:
        return list(self.per_seed.values())

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def interval(self) -> tuple[float, float]:
        m, half = mean_ci(self.values)
        return m - half, m + half

    @property
    def above(self) -> int:
        return sum(v > 1e-12 for v in self.values)

    @property
    def p(self) -> float:
        return paired_p(self.values)

    @property
    def name(self) -> str:
        return self.study.contrast_name(self.spec)

    def text(self) -> str:
        """``"+0.047 [+0.009, +0.085] (4/4 above 0)"``."""
        lo, hi = self.interval
        return f"{self.mean:+.3f} [{lo:+.3f}, {hi:+.3f}] ({self.above}/{len(self.values)} above 0)"


# --------------------------------------------------------------------------- the verdict rule


def verdict(p_corrected: float, mean: float, expect: str, alpha: float, ours: bool = False,
            effect_p: float | None = None) -> str:
    """reproduced / not reproduced / inconclusive (ours: holds / does not hold / inconclusive).

    ``p_corrected`` < ``alpha`` with the mean on the ``expect`` side ("above" or "below" 0):
    reproduced; on the other side: not reproduced. ``effect_p`` (the corrected p of a test against
    the paper's effect size) < ``alpha`` with the mean below that size: not reproduced. Else
    inconclusive."""
    yes, no = ("holds", "does not hold") if ours else ("reproduced", "not reproduced")
    right_side = mean > 0 if expect == "above" else mean < 0
    if p_corrected < alpha:
        return yes if right_side else no
    if effect_p is not None and effect_p < alpha:
        return no
    return "inconclusive"


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
    import yaml

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such spec: {path}")
    data = yaml.safe_load(path.read_text()) or {}
    spec = Spec(path, data)
    for f in spec.findings:
        for key in ("id", "finding", "paper", "expect"):
            if key not in f:
                raise ValueError(f"{path}: finding {f.get('id', '?')!r} lacks {key!r}")
        for m in f.get("measures", []):
            if m not in MEASURE_KINDS:
                raise ValueError(f"{path}: finding {f['id']!r}: no measure {m!r}; measures: {', '.join(MEASURE_KINDS)}")
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


@dataclass
class Row:
    finding: str
    paper: str
    lines: list[Line]
    notes: list[str]  # caveats and the scale, under the verdicts
    command: str
    archive: str
    headline: bool = False

    def cells(self, columns: list[str], short: bool = False) -> list[str]:
        pick = (lambda ln, a, b: getattr(ln, b) or getattr(ln, a)) if short else (lambda ln, a, b: getattr(ln, a))
        values = {"finding": self.finding, "paper": self.paper,
                  "ours": "<br>".join(pick(ln, "ours", "ours_short") for ln in self.lines),
                  "interval": "<br>".join(pick(ln, "interval", "interval_short") for ln in self.lines),
                  "verdict": "<br>".join([ln.verdict for ln in self.lines] + (self.notes[:-1] if short else self.notes)),
                  "command": self.command, "archive": self.archive}
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
    return "at " + " and ".join(s.short for s in studies) + " scale"


def finding_row(spec: Spec, f: dict) -> Row:
    """The findings table's row of one finding of the spec."""
    kind = f.get("kind", "contrast")
    if kind == "recorded":
        return _recorded_row(f, spec.alpha)
    if kind == "collapse-count":
        return _collapse_row(spec, f, spec.alpha)
    if kind == "ratio":
        return _ratio_row(spec, f, spec.alpha)
    items = _contrast_items(spec, f)
    studies = list(dict.fromkeys(s for s, _ in items))
    multi = len(studies) > 1
    out = []
    for m in f["measures"]:
        contrasts = [s.contrast(c, m) for s, c in items]
        label = _label(MEASURE_KINDS[m], studies)
        names = [f"{c.study.short} {c.name}" if multi else c.name for c in contrasts]
        ours = f"{label}: " + ", ".join(f"{n} {c.mean:+.3f} ({c.above}/{len(c.values)} above 0)"
                                         for n, c in zip(names, contrasts))
        ours_short = f"{label}: " + ", ".join(f"{n} {c.mean:+.3f}" for n, c in zip(names, contrasts))
        lo_hi, holms, interval = _interval_cell(contrasts)
        words = []
        for c in contrasts:
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
            words.append((word, effect_note))
        head = label.split(" (")[0]
        if len({w for w, _ in words}) == 1:
            both = {2: " (both)"}.get(len(words), " (all)" if len(words) > 2 else "")
            text = f"{head}: **{words[0][0]}**{both}" + "".join(n for _, n in words)
        else:
            text = f"{head}: " + "; ".join(f"{n} **{w}**{note}" for n, (w, note) in zip(names, words))
        out.append(Line(ours, interval, text, ours_short, f"{lo_hi}; Holm p {holms}"))
    notes = ([f"({f['caveat']})"] if f.get("caveat") else []) + [_scale(studies)]
    return Row(f["finding"], f["paper"], out, notes, " / ".join(f"`{s.command}`" for s in studies),
               "; ".join(archive_note(s) for s in studies), bool(f.get("headline")))


def _interval_cell(contrasts: list[Contrast]) -> tuple[str, str, str]:
    """(the intervals, the Holm p's, the findings table's interval cell) of a finding's contrasts on
    one measure: ``"[-0.388, -0.029]"``, ``"0.038"``, ``"[-0.388, -0.029] (t 95 %, 3 paired seeds,
    uncorrected); p 0.038, Holm 0.038 over 1 contrast"`` (seeds, not paired seeds, when every
    contrast is one setting's own value)."""
    lo_hi = ", ".join(f"[{lo:+.3f}, {hi:+.3f}]" for lo, hi in (c.interval for c in contrasts))
    seeds = "/".join(map(str, sorted({len(c.values) for c in contrasts})))
    fam = sorted({c.family_size for c in contrasts})
    holms = ", ".join(fmt_p(c.p_holm) for c in contrasts)
    paired = "paired " if any(len(parse_contrast(c.spec)) > 1 for c in contrasts) else ""
    return lo_hi, holms, (f"{lo_hi} (t 95 %, {seeds} {paired}seeds, uncorrected); p "
                          f"{', '.join(fmt_p(c.p) for c in contrasts)}, Holm {holms} over {'/'.join(map(str, fam))} "
                          f"contrast{'s' if fam != [1] else ''}")


def _recorded_row(f: dict, alpha: float) -> Row:
    """A finding from values recorded when the runs were made (no archive): mean and t interval."""
    seeds = list(f["values"])
    values = [float(f["values"][s]) for s in seeds]
    m, half = mean_ci(values)
    p = paired_p(values)
    word = verdict(p, m, f["expect"], alpha, bool(f.get("ours")))
    label = f.get("label", f["measure"])
    line = Line(f"{f['measure']}: " + ", ".join(f"seed {s} {v:+.3f}" for s, v in zip(seeds, values)) + f"; mean {m:+.3f}",
                f"[{m - half:+.3f}, {m + half:+.3f}] (t 95 %, {len(values)} seeds); p {fmt_p(p)}, no correction (a "
                f"family of one)", f"**{word}**", f"{label}: {m:+.3f}", f"[{m - half:+.3f}, {m + half:+.3f}]")
    return Row(f["finding"], f["paper"], [line], [f"({f['source']})", "at CPU scale"], f"`{f['command']}`",
               "none (recorded values)", bool(f.get("headline")))


def collapse_counts(study: Study, threshold: float | None = None, seeds: set[str] | None = None) -> dict[str, tuple[int, int]]:
    """Setting -> (runs that collapsed, runs): the detector as it ran (``threshold`` None: some
    ``collapse/events``), or its KL rule at ``threshold`` (the run's peak KL above it)."""
    def collapsed(r: Run) -> bool:
        if threshold is None:
            return r.steps_to_collapse() is not None
        peak = r.peak(kl_tag(r))
        return peak is not None and peak > threshold

    return {name: (sum(collapsed(r) for r in members), len(members))
            for name, members in settings(study.select(seeds)).items()}


def collapse_tests(study: Study, threshold: float | None = None, seeds: set[str] | None = None) -> dict:
    """Fisher's exact test (two-sided) of each tolerant setting's collapse count against the
    baseline's, their Holm adjustment, and the tolerant settings pooled against the baseline."""
    spec = study.extra["collapse_tests"]
    counts = collapse_counts(study, threshold, seeds)
    base = counts[spec["baseline"]]
    per = {t: fisher_exact(counts[t][0], counts[t][1] - counts[t][0], base[0], base[1] - base[0])
           for t in spec["tolerant"]}
    pooled_c = sum(counts[t][0] for t in spec["tolerant"])
    pooled_n = sum(counts[t][1] for t in spec["tolerant"])
    pooled = fisher_exact(pooled_c, pooled_n - pooled_c, base[0], base[1] - base[0])
    return {"counts": counts, "per": per, "holm": dict(zip(per, holm(list(per.values())))),
            "pooled": (pooled_c, pooled_n, pooled), "baseline": spec["baseline"], "tolerant": spec["tolerant"]}


def threshold_window(study: Study) -> tuple[float, float]:
    """The KL thresholds t for which every tolerant run collapses and no baseline run does:
    [the baseline's highest peak, the tolerant runs' lowest peak)."""
    spec = study.extra["collapse_tests"]
    groups = settings(study.runs)
    base_peak = max(r.peak(kl_tag(r)) for r in groups[spec["baseline"]])
    tol_peak = min(r.peak(kl_tag(r)) for t in spec["tolerant"] for r in groups[t])
    return base_peak, tol_peak


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
                f"Fisher p {per} per method (Holm {holms}); pooled {fmt_p(pp)}, a choice of grouping")
    notes = ([f"({f['caveat']})"] if f.get("caveat") else []) + [_scale([study])]
    return Row(f["finding"], f["paper"], [line], notes, f"`{study.command}`", archive_note(study),
               bool(f.get("headline")))


def _ratio_row(spec: Spec, f: dict, alpha: float) -> Row:
    study = spec.study(f["study"])
    out = []
    for m in f["measures"]:
        measure = MEASURE_KINDS[m]
        for c in f["contrasts"]:
            num, den = [x.strip() for x in c.split(" / ")]
            values = list(ratio_values(study, num, den, m).values())
            mean, half = mean_ci(values)
            p = paired_p(values, null=1.0)
            below = sum(v < 1 for v in values)
            expect = "below" if f["expect"] == "below-one" else "above"
            name = f"{measure.short}, {study.name(num)} / {study.name(den)}"
            out.append(Line(f"{name}: {mean:.2f} ({below}/{len(values)} seeds below 1)",
                            f"[{mean - half:.2f}, {mean + half:.2f}] (t 95 % of the per-seed ratios, {len(values)} "
                            f"paired seeds); p {fmt_p(p)} against 1, no correction",
                            f"**{verdict(p, mean - 1.0, expect, alpha, bool(f.get('ours')))}**",
                            f"{name}: {mean:.2f}", f"[{mean - half:.2f}, {mean + half:.2f}]"))
    notes = ([f"({f['caveat']})"] if f.get("caveat") else []) + [_scale([study])]
    return Row(f["finding"], f["paper"], out, notes, f"`{study.command}`", archive_note(study),
               bool(f.get("headline")))


def ratio_values(study: Study, num: str, den: str, measure: str) -> dict[str, float]:
    by = study.by_setting(measure)
    return {s: by[num][s] / by[den][s] for s in sorted(set(by[num]) & set(by[den]), key=_seed_key)}


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
    measures = [f"- {spec.studies[k].short}: " + "; ".join(spec.studies[k].fill(MEASURE_KINDS[m].describe)
                                                          for m in dict.fromkeys(ms)) + "."
                for k, ms in used.items()]
    scales = [f"- {s.short} scale: {s.scale}." for s in spec.studies.values()]
    return "\n".join([table, "", "Measures, from the runs' configs:", *measures, "", "Scales:", *scales])


def headline_block(spec: Spec) -> str:
    """README's table: the headline findings, their means, intervals (t 95 %, uncorrected) and verdicts."""
    rows = [finding_row(spec, f) for f in spec.findings if f.get("headline")]
    columns = ["finding", "ours", "interval", "verdict"]
    return _table(["finding", "ours (measure: contrast, mean)", "t 95 % interval; Holm p", "verdict"],
                  [r.cells(columns, short=True) for r in rows])


# --------------------------------------------------------------------------- per-study blocks


def setup_block(study: Study) -> str:
    """What the runs were (from their configs), then the settings table."""
    f = study.facts
    groups = settings(study.runs)
    names = ", ".join(study.name(g) for g in groups)
    text = (f"{len(study.runs)} runs: {len(groups)} settings ({names}) x seeds {f['seeds']}; each "
            f"{f['iterations']} iterations of {f['groups']} groups x {f['group_size']} episodes at {f['T']} from the "
            f"BC start `{f['start']}`, lr {f['lr']}, {f['mini_batches']} mini-batches a rollout; {f['task']}; "
            f"validation every {f['val_every']} iterations on {f['val_episodes']} {f['held_out']} at {f['VT']}.")
    return text + "\n\n" + settings_table(study)


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
    for name, members in groups.items():
        def vals(fn):
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
    head = ["contrast", *(MEASURE_KINDS[m].short.format(**study.facts) for m in study.measures)]
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
    family = (plural(len(study.family), "contrast") if sizes == {len(study.family)} else "contrasts ("
              + ", ".join(str(len(study.family_for(m))) for m in study.measures) + " in the columns' order)")
    return (_table(head, rows, ["---"] + ["---:"] * len(study.measures)) +
            f"\n\nEach cell: the mean of the per-seed differences, its t 95 % interval over the {n} paired seeds "
            f"(uncorrected) and how many seeds came out above 0; p: paired t-test, two-sided; Holm: p adjusted "
            f"over the {family} of the column; bold: Holm p < 0.05." + _single_note(study))


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
    the seeds and the gain (:func:`arl.report.type_cells`), then what a cell holds; a sentence when
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
    held-out games, gained and lost, McNemar's exact p (:func:`arl.report.games_by_setting`), then
    how to read it; a sentence when the archive holds no per-game episodes of both."""
    f = study.facts
    rows = games_by_setting(study.runs)
    if not rows:
        return ("No game-by-game test: the archive holds no per-game episodes (`val_episodes/iter<k>.jsonl`) of "
                "the start and a later validation.")
    noun = f["held_out"].removeprefix("held-out ")
    head = ["setting", "seeds", noun, "won at start", "won last", "gained", "lost", "McNemar p"]
    body = [[study.name(name), str(seeds), str(n), f"{first} ({first / n:.3f})", f"{last} ({last / n:.3f})",
             str(gained), str(lost), fmt_p(p)] for name, (seeds, n, first, last, gained, lost, p) in rows.items()]
    return (_table(head, body, ["---"] + ["---:"] * 7) +
            f"\n\nThe start (iteration 0) against the last validation (iteration {f['iterations']}) on the same "
            f"{f['held_out']} at {f['VT']}, every one of every seed a pair, the seeds pooled; gained: failed at "
            f"the start and won last, lost: the reverse; McNemar p: exact, two-sided, on those discordant pairs, "
            f"uncorrected. Pooled, it speaks of these {noun}, not of the spread between seeds (the gain's t interval "
            f"does).")


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


def archives_block(spec: Spec) -> str:
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
        rows.append([f"[`{study.archive.parent.name}`]({_rel(study.report, spec) if study.report else ''})",
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


# --------------------------------------------------------------------------- blocks and pages

MARKER = re.compile(r"<!-- ([a-z0-9_-]+):begin -->\n(.*?)<!-- \1:end -->", re.S)


def generate(spec: Spec, name: str) -> str:
    """The markdown of block ``name``."""
    if name == "findings":
        return findings_block(spec)
    if name == "headline":
        return headline_block(spec)
    if name == "archives":
        return archives_block(spec)
    if name == "default-job":
        return default_job_block(spec)
    study_key, _, kind = name.partition("-")
    study = spec.study(study_key)
    kinds: dict[str, Callable[[], str]] = {
        "setup": lambda: setup_block(study), "settings": lambda: settings_table(study),
        "contrasts": lambda: contrasts_block(study), "threshold": lambda: threshold_block(study),
        "collapses": lambda: collapses_block(study), "without-seed-1": lambda: without_seed_block(spec, study),
        "format": lambda: format_block(study), "cost": lambda: cost_block(study),
        "types": lambda: types_block(study), "games": lambda: games_block(study),
    }
    if kind not in kinds:
        raise ValueError(f"no block kind {kind!r} (block {name!r}); kinds: {', '.join(kinds)}")
    return kinds[kind]()


def render(text: str, blocks: Callable[[str], str]) -> str:
    """``text`` with every marked block's body replaced by ``blocks(name)``."""
    return MARKER.sub(lambda m: f"<!-- {m.group(1)}:begin -->\n{blocks(m.group(1)).rstrip()}\n<!-- {m.group(1)}:end -->",
                      text)


def _cached_blocks(spec: Spec):
    """``block(name)``: the generated block ``name`` of ``spec``, each generated once."""
    import functools

    return functools.lru_cache(maxsize=None)(lambda name: generate(spec, name))


def write_pages(spec: Spec) -> list[Path]:
    block = _cached_blocks(spec)

    written = []
    for page, names in spec.pages.items():
        text = page.read_text()
        missing = [n for n in names if f"<!-- {n}:begin -->" not in text]
        if missing:
            raise ValueError(f"{page}: no markers for the blocks {', '.join(missing)} "
                             f"(add `<!-- NAME:begin -->` and `<!-- NAME:end -->` lines where each goes)")
        new = render(text, block)
        if new != text:
            page.write_text(new)
            written.append(page)
    return written


NUMBER = re.compile(r"(?<![\w.])[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else [line]


def _differences(page_line: str, want_line: str, header: list[str] | None) -> list[str]:
    """Each number of ``page_line`` that differs from ``want_line``'s at the same place, named by
    its table row and column when the lines are table rows."""
    got_cells, want_cells = _cells(page_line), _cells(want_line)
    out = []
    if len(got_cells) != len(want_cells):
        return [f"the line reads {page_line.strip()[:160]!r}; the archive gives {want_line.strip()[:160]!r}"]
    for i, (g, w) in enumerate(zip(got_cells, want_cells)):
        gn, wn = NUMBER.findall(g), NUMBER.findall(w)
        where = (f"row {want_cells[0][:60]!r}, column {header[i]!r}: " if header and i < len(header) and len(want_cells) > 1
                 else "")
        if len(gn) != len(wn):
            if g != w:
                out.append(f"{where}{g[:160]!r}; the archive gives {w[:160]!r}")
            continue
        for a, b in zip(gn, wn):
            if a != b:
                out.append(f"{where}the page has {a}, the archive gives {b}")
        if not out and g != w and gn == wn:
            out.append(f"{where}the text reads {g[:160]!r}; the generator writes {w[:160]!r}")
    return out


def check_text(text: str, blocks: Callable[[str], str], page: str, required: list[str] = ()) -> list[str]:
    """Problems of one page: each number of a generated block that differs from ``blocks(name)``,
    as ``"page:line: [block] ..."``; blocks listed in ``required`` that the page lacks."""
    problems = [f"{page}: no generated block {n!r} (its markers are missing)" for n in required
                if f"<!-- {n}:begin -->" not in text]
    for m in MARKER.finditer(text):
        name = m.group(1)
        try:
            want = blocks(name).rstrip().split("\n")
        except (KeyError, ValueError) as err:
            problems.append(f"{page}: [{name}] cannot be generated: {err}")
            continue
        got = m.group(2).rstrip("\n").split("\n")
        first = text[: m.start(2)].count("\n") + 1
        header: list[str] | None = None
        headers = {}
        for i, line in enumerate(want):  # the header of each table row: the first line of its table
            if line.lstrip().startswith("|"):
                if header is None:
                    header = _cells(line)
                headers[i] = header
            else:
                header = None
        matcher = difflib.SequenceMatcher(a=got, b=want, autojunk=False)
        for op, a0, a1, b0, b1 in matcher.get_opcodes():
            if op == "equal":
                continue
            if op == "replace" and a1 - a0 == b1 - b0:
                for k in range(a1 - a0):
                    for d in _differences(got[a0 + k], want[b0 + k], headers.get(b0 + k)):
                        problems.append(f"{page}:{first + a0 + k}: [{name}] {d}")
                continue
            for k in range(a0, a1):
                problems.append(f"{page}:{first + k}: [{name}] a line the archive does not give: {got[k].strip()[:160]!r}")
            for k in range(b0, b1):
                problems.append(f"{page}:{first + a0}: [{name}] a line missing: the archive gives {want[k].strip()[:160]!r}")
    return problems


def check_pages(spec: Spec) -> list[str]:
    """Every problem of every page the spec lists (none: the pages say what the archives give)."""
    block = _cached_blocks(spec)

    problems = []
    for page, names in spec.pages.items():
        if not page.exists():
            problems.append(f"{page}: no such page")
            continue
        problems += check_text(page.read_text(), block, str(page), names)
    return problems
