"""A study of the findings spec: its archive's runs and configs, its measures, its env's task.

A :class:`Study` (one entry of ``studies:`` in ``docs/results/findings.yaml``) reads its archive's
runs (:func:`arl.analysis.runs.find_runs`) and their saved configs, says what the configs hold
(:attr:`Study.facts`: temperatures, sizes, seeds, the start, and the env's description from
:data:`ENV_KINDS`; a mix's members and how each setting weighed them, :meth:`Study.schedule`), gives a
measure of :data:`MEASURE_KINDS` (or on one member of a mix, ``final@sokoban_7x7``: :func:`measure_kind`)
per setting and seed and a planned contrast with its Holm p over the study's family
(:meth:`Study.contrast`), and what the archive holds and lacks (:attr:`Study.completeness`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from arl.analysis.contrasts import Contrast, holm, paired_p, plural
from arl.analysis.runs import Run, event_files, find_runs, read_config, scalar_tags, seed_of, values_by_setting
from arl.analysis.stats import _seed_key, contrast_values, parse_contrast
from arl.analysis.tables import MEASURES, MEMBER_MEASURES, member_tag
from arl.envs.registry import MIX_ENV
from arl.utils.config import lookup

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
    # for a finding of the paper: whether this is the paper's metric (final validation success), or
    # ours only (training episodes at T 1.0); None where it is neither said nor needed
    paper: bool | None = None
    # the validation scalar a gain is read against at iteration 0 (the start's spread beside a gain), and
    # the factor that puts it on the measure's scale
    start_tag: str = "val/success_rate"
    start_scale: float = 1.0


#: WebShop's score (the mean final reward x 100) and the factor that puts it on success's scale
SCORE_TAG, SCORE_SCALE = "val/score", 0.01


def _scaled(tag: str, of: Callable[[Run, str], float | None], scale: float) -> Callable[[Run], float | None]:
    def value(run: Run) -> float | None:
        v = of(run, tag)
        return None if v is None else v * scale

    return value


def _window_mean(tag: str, first: int, last: int) -> Callable[[Run], float | None]:
    def value(run: Run) -> float | None:
        s = [v for step, v in run.scalars.get(tag, []) if first <= step <= last and math.isfinite(v)]
        return statistics.fmean(s) if s else None

    return value


MEASURE_KINDS: dict[str, Measure] = {
    "final": Measure("final success (T {val_T})", MEASURES["final validation success"],
                     "final validation success: `val/success_rate` at iteration {iterations}, {val_episodes} "
                     "{held_out} sampled at {VT}", paper=True),
    "gain": Measure("gain over the start (T {val_T})", MEASURES["gain over the start"],
                    "gain over the start: `val/success_rate` at iteration {iterations} minus at iteration 0 (the "
                    "start policy), the same {val_episodes} {held_out} sampled at {VT}", against_zero=True),
    # WebShop's second metric: the paper's score (mean final reward x 100), here / 100 so that it reads on
    # success's scale (a win scores 1, a near miss its share of the goal's attributes, options and price)
    "score-gain": Measure("score gain over the start (T {val_T})", _scaled(SCORE_TAG, Run.gain, SCORE_SCALE),
                          "score gain over the start: `val/score` / 100 (the mean final reward, on [0, 1]) at "
                          "iteration {iterations} minus at iteration 0, the same {val_episodes} {held_out} sampled at "
                          "{VT}", against_zero=True, start_tag=SCORE_TAG, start_scale=SCORE_SCALE),
    "training": Measure("training success ({T})", MEASURES["mean training success over the run"],
                        "training success: `rollout/success_rate` (every episode an iteration played, re-rolled "
                        "rounds included) at {T}, mean over the {iterations} iterations", paper=False),
    "training-valid": Measure("training valid-action ratio ({T})", MEASURES["mean training valid-action ratio over the run"],
                              "training valid-action ratio: `rollout/valid_action_ratio` at {T}, mean over the "
                              "{iterations} iterations", paper=False),
    "training-early": Measure("training success, iterations 2-6 ({T})", _window_mean("rollout/success_rate", 2, 6),
                              "early training success: `rollout/success_rate` at {T}, mean over iterations 2-6 "
                              "(the rollouts after the first five updates; iteration 1 plays the start policy)"),
    "iteration-seconds": Measure("seconds an iteration", lambda r: r.mean("perf/iteration_s"),
                                 "seconds an iteration: `perf/iteration_s`, mean over the run (two runs side by side)"),
}


def _member_measures(member: str) -> dict[str, Measure]:
    """The measures on one member of a mix (``<kind>@<member>``): the overall kind's, on the member's own
    scalars (``val/<member>/success_rate``, ``rollout/<member>/success_rate``, ...) and held-out games. A mix
    is no setting of the paper's, so none is the paper's metric."""
    val = member_tag(member)
    score = member_tag(member, "score")
    on = f" on {member}"
    games = f"{{val_episodes/{member}}} {{held_out/{member}}}"  # Study.facts of a mix: the member's own
    return {
        "final": Measure(f"final success{on} (T {{val_T}})", MEMBER_MEASURES["final"][1](member),
                         f"final validation success{on} ({{member/{member}}}): `{val}` at iteration {{iterations}}, "
                         f"{games} sampled at {{VT}}"),
        "gain": Measure(f"gain over the start{on} (T {{val_T}})", MEMBER_MEASURES["gain"][1](member),
                        f"gain over the start{on}: `{val}` at iteration {{iterations}} minus at iteration 0 (the start "
                        f"policy), the same {games} sampled at {{VT}}", against_zero=True, start_tag=val),
        "score-gain": Measure(f"score gain over the start{on} (T {{val_T}})", _scaled(score, Run.gain, SCORE_SCALE),
                              f"score gain over the start{on}: `{score}` / 100 at iteration {{iterations}} minus at "
                              f"iteration 0, the same {games} sampled at {{VT}}", against_zero=True, start_tag=score,
                              start_scale=SCORE_SCALE),
        "training": Measure(f"training success{on} ({{T}})", MEMBER_MEASURES["training"][1](member),
                            f"training success{on}: `{member_tag(member, stage='rollout')}` at {{T}}, mean over the "
                            "iterations that played it"),
        "training-valid": Measure(f"training valid-action ratio{on} ({{T}})", MEMBER_MEASURES["training-valid"][1](member),
                                  f"training valid-action ratio{on}: "
                                  f"`{member_tag(member, 'valid_action_ratio', stage='rollout')}` at {{T}}, mean over "
                                  "the iterations that played it"),
    }


#: the kinds of :data:`MEASURE_KINDS` that have a measure on one member of a mix, ``<kind>@<member>``
MEMBER_KINDS = tuple(_member_measures("m"))


def measure_kind(name: str) -> Measure:
    """The measure a spec names: a key of :data:`MEASURE_KINDS` (``final``), or ``<kind>@<member>`` for one
    member of a mix (``final@sokoban_7x7``: its final validation success, ``val/sokoban_7x7/success_rate``;
    kinds :data:`MEMBER_KINDS`). ValueError for any other."""
    if name in MEASURE_KINDS:
        return MEASURE_KINDS[name]
    kind, at, member = name.partition("@")
    if at and kind in MEMBER_KINDS and member and "/" not in member:
        return _member_measures(member)[kind]
    raise ValueError(f"no measure {name!r}; measures: {', '.join(MEASURE_KINDS)}, and on one member of a mix "
                     f"{', '.join(k + '@<member>' for k in MEMBER_KINDS)}")


def measure_member(name: str) -> str | None:
    """The member a measure's name picks (``final@sokoban_7x7``: ``sokoban_7x7``); None for an overall measure."""
    return name.partition("@")[2] or None


# --------------------------------------------------------------------------- studies and archives


def _holds_scalars(events: Path, prefix: str = "rollout/") -> bool:
    return any(t.startswith(prefix) for t in scalar_tags(events))


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
    peers: list[Study] = field(default_factory=list, repr=False)  # the spec's studies, this one among them

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

    @cached_property
    def members(self) -> list[str]:
        """The members of the runs' mix (``env=mix``): the ``env.members`` of their configs, else the members
        they validated (``val/<member>/success_rate``), in order; ``[]`` for runs of one env."""
        out: dict[str, None] = {}
        for r in self.runs:
            for m in (lookup(self.config(r), "env.members") or {}) or r.members():
                out.setdefault(str(m))
        return list(out)

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
            node = lookup(self.config(r), path)  # under its old name in a run archived before a rename
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
            "mini_batches": g("rl.mini_batches"), "groups": g("rollout.tasks_per_iteration"),
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
        """What the study ran, from its runs: the model and its parameters, the task, the optimiser
        steps and training episodes a run, the validation, the seeds, the start's spread over them
        and how many runs ended below it (:meth:`scale_parts`)."""
        return "; ".join(self.scale_parts().values())

    def scale_parts(self) -> dict[str, str]:
        """The parts of :attr:`scale`: ``model``, ``task``, (for a mix) ``training``, ``steps``, ``episodes``,
        ``validation``, ``seeds``, ``start``, ``below``."""
        f = self.facts
        seeds = plural(f["n_seeds"], "paired seed") if f["n_seeds"] != "1" else "1 seed"
        params = self.parameters
        lo, hi = self.start_range()
        below, n = self.below_start()
        return {
            "model": f"{f['model']} model" + (f" ({params / 1e6:.2f}M parameters)" if params else ""),
            "task": f["task_scale"],
            **({"training": self.schedule()} if self.members else {}),
            "steps": f"{f['iterations']} iterations at lr {f['lr']}, {self.steps_text()}",
            "episodes": "training episodes a run: " + self._episodes(),
            "validation": f"validation: {f['val_episodes']} {f['held_out']} at {f['VT']}",
            "seeds": f"{seeds} ({f['seeds']})",
            "start": f"the start policy scored {_span([lo, hi], '.3f')} at iteration 0 over these sampling seeds",
            "below": f"{below} of {plural(n, 'run')} ended below their start",
        }

    def schedule(self) -> str:
        """How each setting's runs weighed a mix's members (:func:`schedule_text` of their configs), settings
        with the same schedule named together: ``"the members' weights: curriculum: a curriculum of 2 stages,
        ...; 7x7 only: fixed, sokoban_7x7 only"``; the schedule alone when every run shares it."""
        by_text: dict[str, list[str]] = {}
        for r in self.runs:
            names = by_text.setdefault(schedule_text(self.config(r).get("env") or {}) or "not recorded", [])
            if self.name(r.group) not in names:
                names.append(self.name(r.group))
        if len(by_text) == 1:
            return f"the members' weights: {next(iter(by_text))}"
        return "the members' weights: " + "; ".join(f"{', '.join(names)}: {t}" for t, names in by_text.items())

    def steps_text(self) -> str:
        """``"60 optimiser steps a run (`rl.mini_batches` 2 a rollout)"``, ``"28-34 optimiser steps a run
        (`rl.mini_batch_size` 256 samples a step)"``: the steps the runs logged, and the setting that
        sized them (a fixed count a rollout, or one step per so many samples, which gives a rollout of more
        turns more steps)."""
        steps = [v for v in self.optimizer_steps().values() if v is not None]
        size = self._shared("rl.mini_batch_size")
        sizing = (f"`rl.mini_batch_size` {size} samples a step" if size not in ("None", "") else
                  f"`rl.mini_batches` {self.facts['mini_batches']} a rollout")
        return f"{_span(steps) + ' optimiser steps a run' if steps else 'optimiser steps not logged'} ({sizing})"

    def _episodes(self) -> str:
        """``"GRPO 1920, SAMPO 3328-3456"``, ``"GiGPO / GRPO 3840, ..."``: each setting's training episodes a run (``rollout/episodes``
        summed), settings with the same span named together, ``"1280 (every run)"`` when all share one."""
        spans: dict[str, list[str]] = {}
        for g, v in self.per_setting(lambda r: r.total("rollout/episodes")).items():
            spans.setdefault(_span(v), []).append(self.name(g))
        if not spans:
            return "not logged"
        if len(spans) == 1:
            return f"{next(iter(spans))} (every run)"
        return ", ".join(f"{' / '.join(names)} {span}" for span, names in spans.items())

    def per_setting(self, value: Callable[[Run], float | None]) -> dict[str, list[float]]:
        """Setting -> the value of each of its runs (None left out), settings in the runs' order."""
        out: dict[str, list[float]] = {}
        for r in self.runs:
            v = value(r)
            if v is not None:
                out.setdefault(r.group, []).append(v)
        return out

    def optimizer_steps(self) -> dict[str, float | None]:
        """Run name -> the optimiser steps it took (``train/optimizer_steps``, a running count; else the
        sum of ``actor/optimizer_steps``, the steps of each iteration; None when it logged neither)."""
        out = {}
        for r in self.runs:
            running = r.scalars.get("train/optimizer_steps")
            out[r.name] = running[-1][1] if running else r.total("actor/optimizer_steps")
        return out

    def start_range(self, seeds: set[str] | None = None, tag: str = "val/success_rate",
                    scale: float = 1.0) -> tuple[float, float]:
        """The lowest and highest validation value ``tag`` (success) at iteration 0 (the start policy), times
        ``scale``, over the runs of ``seeds``: the same weights, sampled with each seed."""
        starts = [v * scale for v in (r.first(tag) for r in self.select(seeds)) if v is not None]
        return min(starts), max(starts)

    def below_start(self) -> tuple[int, int]:
        """(runs whose last validation success is below their first, runs)."""
        pairs = [(r.first("val/success_rate"), r.final("val/success_rate")) for r in self.runs]
        return sum(1 for a, b in pairs if a is not None and b is not None and b < a), len(pairs)

    @cached_property
    def parameters(self) -> int | None:
        """The model's parameters, counted in an archived start's weights
        (``<archive>/../bc_start/bc_policy_hf/model.safetensors``) of this study or of another study of
        the spec whose runs have the same model config and env; None when no archive holds such weights."""
        mine = self._model_key()
        for study in [self, *self.peers]:
            weights = study.archive.parent / "bc_start" / "bc_policy_hf" / "model.safetensors"
            if weights.exists() and study.runs and study._model_key() == mine:
                return safetensors_parameters(weights)
        return None

    def _model_key(self) -> str:
        return json.dumps([self.config_values("model.name"), self.config_values("model.tiny"),
                           self.config_values("env.name")], sort_keys=True, default=str)

    def by_setting(self, measure: str, seeds: set[str] | None = None) -> dict[str, dict[str, float]]:
        """Setting -> {seed: the measure} over the runs of ``seeds`` (all when None)."""
        key = (measure, frozenset(seeds) if seeds is not None else None)
        if key not in self._values:
            member = measure_member(measure)
            if member is not None and member not in self.members:
                raise ValueError(f"study {self.key!r}: measure {measure!r} is on a member its runs do not have; "
                                 + (f"members: {', '.join(self.members)}" if self.members else "its runs are no mix"))
            self._values[key] = values_by_setting(self.select(seeds), measure_kind(measure).value)
        return self._values[key]

    @cached_property
    def _values(self) -> dict:
        return {}

    def family_for(self, measure: str) -> list[str]:
        """The planned contrasts that apply to ``measure``: all of them, except that a contrast of one
        setting belongs only to a measure whose value means something against 0 (a gain)."""
        return [c for c in self.family if len(parse_contrast(c)) > 1 or measure_kind(measure).against_zero]

    @property
    def holm_measures(self) -> list[str]:
        """The measures whose planned contrasts form one Holm family together (``holm_over_measures``
        in the spec): a study with one planned comparison tests it on several measures, and those
        tests are corrected together; [] (the default): a family per measure."""
        return [m for m in self.extra.get("holm_over_measures") or [] if m in self.measures]

    def tests_for(self, measure: str) -> list[tuple[str, str]]:
        """(contrast, measure) of the Holm family that ``measure``'s contrasts belong to."""
        measures = self.holm_measures if measure in self.holm_measures else [measure]
        return [(c, m) for m in measures for c in self.family_for(m)]

    def family_label(self, measure: str) -> str:
        """``"6 contrasts"``; ``"2 tests (SAMPO - GRPO on final success and training success)"`` for a
        family over measures."""
        tests = self.tests_for(measure)
        if len({m for _, m in tests}) == 1:
            return plural(len(tests), "contrast")
        names = " and ".join(measure_kind(m).short.split(" (")[0] for m in dict.fromkeys(m for _, m in tests))
        contrasts = ", ".join(self.contrast_name(c) for c in dict.fromkeys(c for c, _ in tests))
        return f"{plural(len(tests), 'test')} ({contrasts} on {names})"

    def contrast(self, spec: str, measure: str, seeds: set[str] | None = None) -> Contrast:
        per_seed = contrast_values(parse_contrast(spec), self.by_setting(measure, seeds))
        tests = list(dict.fromkeys([*self.tests_for(measure), (spec, measure)]))
        ps = [paired_p(list(contrast_values(parse_contrast(c), self.by_setting(m, seeds)).values()))
              for c, m in tests]
        return Contrast(self, spec, measure, per_seed, holm(ps)[tests.index((spec, measure))], len(tests))

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
# ``task_scale`` (the scale line's) and ``held_out`` (what a validation plays); and, for a mix's members,
# ``what`` (the env without its turns: ``Sokoban 6x6 with 1 box``) and ``turns``. ``at`` is the env section
# read: ``env``, or a mix member's ``env.members.<member>``.


def _listed(values: list, every: str) -> str:
    """Config lists as the page names them: ``"a, b"``; ``every`` for null (all); the runs' values
    joined by `` / `` where they differ."""
    return " / ".join(every if v is None else ", ".join(map(str, v)) if isinstance(v, list) else str(v)
                      for v in values)


def _sokoban(study: Study, at: str = "env") -> dict[str, str]:
    """Sokoban: the room, the boxes and the turns; validation on held-out levels."""
    g = study._shared
    room = g(f"{at}.kwargs.dim_room").strip("[]").replace(", ", "x")
    boxes, turns = plural(g(f"{at}.kwargs.num_boxes"), "box"), g(f"{at}.max_turns")
    return {"room": room, "boxes": g(f"{at}.kwargs.num_boxes"), "task": f"Sokoban {room}, {boxes}, {turns} turns",
            "task_scale": f"Sokoban {room} with {boxes} and {turns} turns", "held_out": "held-out levels",
            "what": f"Sokoban {room} with {boxes}", "turns": turns}


def _math_tool(study: Study, at: str = "env") -> dict[str, str]:
    """math_tool: the generated problems' templates (``env.kwargs.templates``, null: every one) or
    the dataset's file (``env.kwargs.data_path``), and the turns; validation on held-out problems."""
    templates, data = study.config_values(f"{at}.kwargs.templates"), study._shared(f"{at}.kwargs.data_path")
    if data != "None":
        what = f"problems of `{Path(data).name}`"
    elif templates == [None]:
        what = "generated problems of every template"
    else:
        what = f"generated problems of templates {_listed(templates, 'every template')}"
    turns = study._shared(f"{at}.max_turns")
    return {"task": f"math_tool, {what}, {turns} turns", "task_scale": f"math_tool ({what}) with {turns} turns",
            "held_out": "held-out problems", "what": f"math_tool ({what})", "turns": turns}


def _alfworld(study: Study, at: str = "env") -> dict[str, str]:
    """ALFWorld: the task types (``env.kwargs.task_types``, null: all six) and the turns;
    validation on held-out games."""
    types, turns = study.config_values(f"{at}.kwargs.task_types"), study._shared(f"{at}.max_turns")
    if types == [None]:
        task, what = f"ALFWorld, all six task types, {turns} turns", "all six task types"
    else:
        what = f"task types {_listed(types, 'all six')}"
        task = f"ALFWorld {what}, {turns} turns"
    return {"task": task, "task_scale": f"ALFWorld ({what}) with {turns} turns", "held_out": "held-out games",
            "what": f"ALFWorld ({what})", "turns": turns}


def _webshop(study: Study, at: str = "env") -> dict[str, str]:
    """WebShop: the shop (WebShop's files, or the generated one: ``env.kwargs.n_products`` products of
    ``goals_per_product`` goals each) and the turns; validation on held-out tasks (shopping goals)."""
    g = study._shared

    def given(key: str) -> bool:  # a run config keeps `${oc.env:WEBSHOP_DATA,null}` unresolved: the study
        value = g(key)            # scripts never set that variable, so it counts as unset
        return value not in ("None", "") and not value.startswith("${")

    turns = g(f"{at}.max_turns")
    if given(f"{at}.kwargs.data_dir") or given(f"{at}.kwargs.products_path"):
        shop = "WebShop's products and goals"
    else:
        shop = (f"a generated shop of {g(f'{at}.kwargs.n_products')} products, "
                f"{plural(g(f'{at}.kwargs.goals_per_product'), 'goal')} a product")
    return {"task": f"WebShop, {shop}, {turns} turns", "task_scale": f"WebShop ({shop}) with {turns} turns",
            "held_out": "held-out tasks", "what": f"WebShop ({shop})", "turns": turns}


def _any_env(study: Study, at: str = "env") -> dict[str, str]:
    """An env without a kind of its own: its name and turns; validation on held-out games."""
    name, turns = study._shared(f"{at}.name"), study._shared(f"{at}.max_turns")
    return {"task": f"{name}, {turns} turns", "task_scale": f"{name} with {turns} turns", "held_out": "held-out games",
            "what": name, "turns": turns}


def _and(items: list[str]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _mix(study: Study, at: str = "env") -> dict[str, str]:
    """A mix (``env=mix``): each member described by its env's kind, ``"a mix of Sokoban 6x6 with 1 box and
    7x7 with 2 boxes, 10 turns each"`` (an env's name said once for consecutive members of it; each member's
    turns where they differ); validation on each member's own held-out set, ``rollout.val_episodes`` (or the
    member's ``val_episodes``) each. Per member ``m`` also ``member/m`` (its env: ``Sokoban 7x7 with 2 boxes``),
    ``held_out/m`` and ``val_episodes/m``, which the measures on a member (``final@m``) name; ``env_short`` and
    ``env_words`` stand for the mix where a page names the env in a few words."""
    members = study.members
    if not members:
        return _any_env(study, at)
    out: dict[str, str] = {}
    whats, turns, held, sizes, words = [], [], [], [], []
    for m in members:
        node = f"{at}.members.{m}"
        d = ENV_KINDS.get(study._shared(f"{node}.name"), _any_env)(study, node)
        size = study._shared(f"{node}.val_episodes")
        size = study._shared("rollout.val_episodes") if size == "None" else size
        whats.append(d["what"])
        turns.append(d["turns"])
        held.append(d["held_out"])
        sizes.append(size)
        words.append(d["what"].split(" ")[0])
        out |= {f"member/{m}": d["what"], f"held_out/{m}": f"{d['held_out']} of {m}", f"val_episodes/{m}": size}
    short = []  # an env's name said once for consecutive members of it: "Sokoban 6x6 with 1 box and 7x7 with 2 boxes"
    for i, what in enumerate(whats):
        first, _, rest = what.partition(" ")
        short.append(rest if i and rest and not rest.startswith("(") and first == whats[i - 1].split(" ")[0] else what)
    same_turns = len(set(turns)) == 1
    listed = _and(short if same_turns else [f"{w} ({t} turns)" for w, t in zip(short, turns)])
    named = _and([f"{m} ({w}{'' if same_turns else f', {t} turns'})" for m, w, t in zip(members, whats, turns)])
    each = f", {turns[0]} turns each" if same_turns else ""
    noun = held[0] if len(set(held)) == 1 else "held-out games"
    return {**out, "task": f"a mix of {named}{each}", "task_scale": f"a mix of {listed}{each}",
            "held_out": f"{noun} of each member", "unit": noun.removeprefix("held-out "),
            "val_episodes": sizes[0] if len(set(sizes)) == 1 else " / ".join(sizes),
            "turns": turns[0] if same_turns else " / ".join(turns),
            "env_short": f"a mix of {_and(short)}", "env_words": ", ".join(dict.fromkeys(words))}


#: ``env.name`` -> the description of a study's task (others: :func:`_any_env`)
ENV_KINDS: dict[str, Callable[..., dict[str, str]]] = {
    "sokoban": _sokoban, "math_tool": _math_tool, "alfworld": _alfworld, "webshop": _webshop, MIX_ENV: _mix,
}


def weights_text(weights: dict, members: list[str]) -> str:
    """Member weights as a page says them: ``"sokoban_7x7 only"``, ``"sokoban 0.7, math_tool 0.3"`` (each
    member's share, normalised; members of weight 0 left out)."""
    given = {m: float(weights.get(m) or 0.0) for m in members if m in weights}
    total = sum(w for w in given.values() if w > 0)
    played = [m for m, w in given.items() if w > 0]
    if len(played) == 1:
        return f"{played[0]} only"
    return ", ".join(f"{m} {round(given[m] / total, 3):g}" for m in played) if played else "no member"


def _in_a_row(patience: int) -> str:
    return "at a validation" if patience == 1 else f"at {patience} validations in a row"


def schedule_text(env: dict) -> str:
    """How a mix's config weighs its members (``env`` a run config's ``env`` section): ``"fixed, sokoban_7x7
    only"``, or a curriculum (``env.curriculum``, :mod:`arl.datamodules.curriculum`), ``"a curriculum of 2
    stages, sokoban_6x6 only until `val/sokoban_6x6/success_rate` >= 0.6 at 2 validations in a row, then
    sokoban_7x7 only"``; ``""`` for an env that is no mix."""
    members = list((env or {}).get("members") or {})
    if not members:
        return ""
    stages = ((env.get("curriculum") or {}).get("stages")) or []
    if not stages:
        return "fixed, " + weights_text({m: (env["members"][m] or {}).get("weight") for m in members}, members)
    parts = []
    for stage in stages:
        text = weights_text(stage.get("weights") or {}, members)
        if stage.get("until_iteration") is not None:
            text += f" until iteration {stage['until_iteration']}"
        elif stage.get("metric") is not None:
            patience = int(stage.get("patience") or 1)
            text += f" until `{stage['metric']}` >= {stage.get('advance_above')} {_in_a_row(patience)}"
            if stage.get("retreat_below") is not None:
                text += f" (back to it once below {stage['retreat_below']} {_in_a_row(patience)} in the next)"
        parts.append(text)
    return f"a curriculum of {plural(len(stages), 'stage')}, " + ", then ".join(parts)


def _top_k(value: str) -> str:
    """A config's top-k as the page says it: ``off`` for 0 or -1 (no top-k cut), else the number."""
    return "off" if value in ("0", "-1") else value


def _start_name(init_from: str) -> str:
    """A BC start's folder as the study scripts name it, without the checkout that ran it:
    ``study/bc_start_long`` for ``<checkout>/logs/study/bc_start_long/bc_policy_hf``,
    ``docs/results/alfworld_cpu_study/bc_start`` for a start committed beside an archive
    (``<checkout>/docs/results/alfworld_cpu_study/bc_start/bc_policy_hf``)."""
    if "/logs/" in init_from:
        path = init_from.split("/logs/", 1)[-1]
    elif "/docs/" in init_from:
        path = "docs/" + init_from.split("/docs/", 1)[-1]
    else:
        path = init_from
    return path.removesuffix("/bc_policy_hf")


def _span(values, fmt: str = ".0f") -> str:
    """``"60"`` when the values are equal, else ``"28-36"`` (lowest-highest), each in ``fmt``."""
    values = list(values)
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def safetensors_parameters(path: Path) -> int:
    """The parameters a ``.safetensors`` file holds: the product of each tensor's shape, summed,
    read from the file's header (8 bytes of little-endian length, then JSON) without loading it."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    return sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")


def _last_step(run: Run, tag: str) -> int | None:
    s = run.scalars.get(tag)
    return s[-1][0] if s else None
